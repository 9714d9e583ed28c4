// Softmax regression (multinomial logistic regression): the math of the
// Fashion-MNIST example, on the host, independent of libgeeps.
//
// Parameter layout: (dim + 1) rows of num_classes floats. Row i < dim holds
// the weights of input feature i for every class; row dim holds the biases.
// This is also the layout of the libgeeps table (row_width = num_classes), so
// a Read buffer of all rows in order is directly a parameter vector.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_MODEL_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "geeps/status.h"

namespace fmnist {

// A labelled data set, features in [0, 1].
struct Dataset {
  int dim = 0;                  // features per example
  int num_classes = 0;          // labels are in [0, num_classes)
  std::vector<float> features;  // size() * dim, example after example
  std::vector<uint8_t> labels;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  const float* example(int64_t i) const { return features.data() + i * dim; }
};

// Loads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz; at most
// `train_limit` training examples (0 = all). Checks that images and labels
// agree in count and that every label is below 10. Errors name the file.
geeps::Status LoadFashionMnist(const std::string& dir, uint64_t train_limit, Dataset* train,
                               Dataset* test);

// Floats in a parameter vector: (dim + 1) * num_classes.
inline size_t NumParams(int dim, int num_classes) {
  return static_cast<size_t>(dim + 1) * static_cast<size_t>(num_classes);
}

// logits[k] = bias[k] + sum_i x[i] * W[i][k], k < num_classes.
void ComputeLogits(const float* params, int dim, int num_classes, const float* x, float* logits);

// Mean cross-entropy loss of the examples data[indices[0..n)] under
// `params`. If `grad` is not null it is overwritten with the gradient of that
// mean (NumParams floats, same layout as params).
// REQUIRES: n >= 1, every index in [0, data.size()).
double LossAndGradient(const float* params, const Dataset& data, const int64_t* indices, size_t n,
                       float* grad);

struct Evaluation {
  double loss = 0;      // mean cross-entropy
  double accuracy = 0;  // fraction of examples whose argmax logit is the label
};
// Evaluates `params` on the whole data set. REQUIRES: data.size() >= 1.
Evaluation Evaluate(const float* params, const Dataset& data);

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_MODEL_H_
