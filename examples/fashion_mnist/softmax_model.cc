#include "softmax_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "idx_reader.h"

namespace fmnist {
namespace {

using geeps::Status;
using geeps::StatusCode;

constexpr int kFashionMnistClasses = 10;

Status LoadSplit(const std::string& dir, const std::string& prefix, uint64_t limit, Dataset* out) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  geeps::StatusOr<IdxImages> images = ReadIdxImages(images_path, limit);
  if (!images.ok()) return images.status();
  geeps::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(labels_path, limit);
  if (!labels.ok()) return labels.status();
  if (labels->size() != images->count) {
    return Status(StatusCode::kInvalidArgument,
                  labels_path + " has " + std::to_string(labels->size()) + " labels but " +
                      images_path + " has " + std::to_string(images->count) + " images");
  }
  for (size_t i = 0; i < labels->size(); ++i) {
    if ((*labels)[i] >= kFashionMnistClasses) {
      return Status(StatusCode::kInvalidArgument,
                    labels_path + ": label " + std::to_string((*labels)[i]) + " of example " +
                        std::to_string(i) + " is not a class in [0, 10)");
    }
  }
  out->dim = static_cast<int>(images->rows * images->cols);
  out->num_classes = kFashionMnistClasses;
  out->features = std::move(images->pixels);
  out->labels = std::move(*labels);
  return Status::OK();
}

// Softmax of logits in place; returns log(sum(exp(logits))) (stable).
double SoftmaxInPlace(float* z, int c) {
  const float m = *std::max_element(z, z + c);
  double sum = 0;
  for (int k = 0; k < c; ++k) {
    z[k] = std::exp(z[k] - m);
    sum += z[k];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int k = 0; k < c; ++k) z[k] *= inv;
  return m + std::log(sum);
}

}  // namespace

Status LoadFashionMnist(const std::string& dir, uint64_t train_limit, Dataset* train,
                        Dataset* test) {
  Status s = LoadSplit(dir, "train", train_limit, train);
  if (!s.ok()) return s;
  s = LoadSplit(dir, "t10k", 0, test);
  if (!s.ok()) return s;
  if (train->dim != test->dim) {
    return Status(StatusCode::kInvalidArgument,
                  "training images have " + std::to_string(train->dim) +
                      " pixels but test images " + std::to_string(test->dim));
  }
  return Status::OK();
}

void ComputeLogits(const float* params, int dim, int num_classes, const float* x, float* logits) {
  const float* bias = params + static_cast<size_t>(dim) * num_classes;
  std::copy(bias, bias + num_classes, logits);
  for (int i = 0; i < dim; ++i) {
    const float xi = x[i];
    if (xi == 0.0f) continue;  // about half of the Fashion-MNIST pixels
    const float* w = params + static_cast<size_t>(i) * num_classes;
    for (int k = 0; k < num_classes; ++k) logits[k] += xi * w[k];
  }
}

double LossAndGradient(const float* params, const Dataset& data, const int64_t* indices, size_t n,
                       float* grad) {
  const int dim = data.dim;
  const int c = data.num_classes;
  if (grad != nullptr) std::fill(grad, grad + NumParams(dim, c), 0.0f);
  std::vector<float> z(c);
  const float scale = 1.0f / static_cast<float>(n);
  double loss = 0;
  for (size_t b = 0; b < n; ++b) {
    const int64_t e = indices[b];
    const float* x = data.example(e);
    const int y = data.labels[e];
    ComputeLogits(params, dim, c, x, z.data());
    const float zy = z[y];
    loss += SoftmaxInPlace(z.data(), c) - zy;
    if (grad == nullptr) continue;
    // d(loss)/d(logit k) = p_k - [k == y], averaged over the batch.
    z[y] -= 1.0f;
    for (int k = 0; k < c; ++k) z[k] *= scale;
    float* gbias = grad + static_cast<size_t>(dim) * c;
    for (int k = 0; k < c; ++k) gbias[k] += z[k];
    for (int i = 0; i < dim; ++i) {
      const float xi = x[i];
      if (xi == 0.0f) continue;
      float* g = grad + static_cast<size_t>(i) * c;
      for (int k = 0; k < c; ++k) g[k] += xi * z[k];
    }
  }
  return loss / static_cast<double>(n);
}

Evaluation Evaluate(const float* params, const Dataset& data) {
  const int c = data.num_classes;
  std::vector<float> z(c);
  double loss = 0;
  int64_t correct = 0;
  for (int64_t e = 0; e < data.size(); ++e) {
    ComputeLogits(params, data.dim, c, data.example(e), z.data());
    const int y = data.labels[e];
    const int predicted = static_cast<int>(std::max_element(z.begin(), z.end()) - z.begin());
    if (predicted == y) ++correct;
    const float zy = z[y];
    loss += SoftmaxInPlace(z.data(), c) - zy;
  }
  Evaluation ev;
  ev.loss = loss / static_cast<double>(data.size());
  ev.accuracy = static_cast<double>(correct) / static_cast<double>(data.size());
  return ev;
}

}  // namespace fmnist
