// The layers of the example networks: fully connected, convolution, ReLU,
// max pooling, dropout and group normalisation, each a forward and a backward pass over a
// mini-batch, written against Backend (backend.h) so that the same layer runs on any backend. The
// softmax cross-entropy loss is Backend::SoftmaxCrossEntropy and SGD with momentum
// Backend::MomentumDelta.
//
// A layer owns no memory: its parameters, inputs, outputs, gradients and
// scratch space are buffers its caller passes in (in the trainers, Read
// buffers of a libgeeps shared table and LocalAccess buffers of a local
// table). A layer's parameters are one vector: the weights, then the biases.
//
// Contracts shared by every layer (`batch` images of in_shape() in `x`,
// batch images of out_shape() in `y`):
//   Forward  writes y.
//   Backward reads dy = dLoss/dy, x if BackwardNeedsInput(), y if
//            BackwardNeedsOutput();
//            writes dparams = dLoss/dparams summed over the batch
//            (num_params() floats, overwritten) and, unless dx is null,
//            dx = dLoss/dx (overwritten).
//   scratch: ScratchFloats(batch) floats, contents not needed afterwards.
#ifndef GEEPS_EXAMPLES_LAYERS_LAYERS_H_
#define GEEPS_EXAMPLES_LAYERS_LAYERS_H_

#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend.h"

namespace nn {

// channels x height x width; a vector of n features is n x 1 x 1.
struct Shape {
  int channels = 0;
  int height = 1;
  int width = 1;
  size_t size() const { return static_cast<size_t>(channels) * height * width; }
};

class Layer {
 public:
  explicit Layer(Shape in, Shape out) : in_(in), out_(out) {}
  virtual ~Layer() = default;

  virtual std::string name() const = 0;  // e.g. "conv5x5x16"
  Shape in_shape() const { return in_; }
  Shape out_shape() const { return out_; }
  size_t num_params() const { return num_weights() + num_biases(); }
  virtual size_t num_weights() const { return 0; }
  virtual size_t num_biases() const { return 0; }
  virtual size_t ScratchFloats(int /*batch*/) const { return 0; }
  // Which of x and y Backward reads (so a trainer may drop the others).
  virtual bool BackwardNeedsInput() const { return true; }
  virtual bool BackwardNeedsOutput() const { return false; }

  // Writes initial parameters (num_params() floats) drawn from `rng`.
  virtual void InitParams(std::mt19937_64& /*rng*/, float* /*params*/) const {}

  virtual void Forward(Backend& be, const float* params, const float* x, int batch, float* y,
                       float* scratch) const = 0;
  virtual void Backward(Backend& be, const float* params, const float* x, const float* y,
                        const float* dy, int batch, float* dx, float* dparams,
                        float* scratch) const = 0;

 private:
  Shape in_, out_;
};

// y = W x + b, W of outputs x inputs (row-major), the input flattened.
class FullyConnected final : public Layer {
 public:
  FullyConnected(Shape in, int outputs);
  std::string name() const override;
  size_t num_weights() const override;
  size_t num_biases() const override;
  void InitParams(std::mt19937_64& rng, float* params) const override;
  void Forward(Backend& be, const float* params, const float* x, int batch, float* y,
               float* scratch) const override;
  void Backward(Backend& be, const float* params, const float* x, const float* y, const float* dy,
                int batch, float* dx, float* dparams, float* scratch) const override;
};

// 2-d convolution, square kernel, stride 1, zero padding `pad`
// (pad = kernel / 2 keeps the size), by Backend::ConvForward/ConvBackward
// (im2col + one GEMM per batch by default; cuDNN on the CUDA backend where
// it was built with it). Weights: out_channels x (in_channels * kernel^2).
class Conv2D final : public Layer {
 public:
  Conv2D(Shape in, int out_channels, int kernel, int pad);
  std::string name() const override;
  size_t num_weights() const override;
  size_t num_biases() const override;
  size_t ScratchFloats(int batch) const override;
  void InitParams(std::mt19937_64& rng, float* params) const override;
  void Forward(Backend& be, const float* params, const float* x, int batch, float* y,
               float* scratch) const override;
  void Backward(Backend& be, const float* params, const float* x, const float* y, const float* dy,
                int batch, float* dx, float* dparams, float* scratch) const override;

 private:
  Window window_;
};

class Relu final : public Layer {
 public:
  explicit Relu(Shape in);
  std::string name() const override { return "relu"; }
  bool BackwardNeedsInput() const override { return false; }
  bool BackwardNeedsOutput() const override { return true; }
  void Forward(Backend& be, const float* params, const float* x, int batch, float* y,
               float* scratch) const override;
  void Backward(Backend& be, const float* params, const float* x, const float* y, const float* dy,
                int batch, float* dx, float* dparams, float* scratch) const override;
};

// Group normalisation (Wu and He, 2018) of conv activations: the channels of
// each image are split into `groups` equal consecutive groups, and each
// group is normalised over its channels and positions, then scaled and
// shifted per channel: y = gamma[c] * (x - mean) / sqrt(var + eps) + beta[c].
// Unlike batch normalisation it needs no running statistics: training and
// evaluation compute the same function of one image, so a layer still owns
// no memory. Parameters: gamma (channels, initially 1) then beta
// (channels, initially 0). REQUIRES: groups divides the channel count.
class GroupNorm final : public Layer {
 public:
  GroupNorm(Shape in, int groups);
  std::string name() const override;  // "gn<groups>"
  size_t num_weights() const override;
  size_t num_biases() const override;
  size_t ScratchFloats(int batch) const override;
  void InitParams(std::mt19937_64& rng, float* params) const override;
  void Forward(Backend& be, const float* params, const float* x, int batch, float* y,
               float* scratch) const override;
  void Backward(Backend& be, const float* params, const float* x, const float* y, const float* dy,
                int batch, float* dx, float* dparams, float* scratch) const override;

 private:
  int groups_;
};

// Inverted dropout at `rate` (in [0, 1)) while the backend is training
// (Backend::SetTraining): each value is zeroed with probability rate, the
// others scaled by 1 / (1 - rate); the identity otherwise (evaluation). The
// mask depends on the backend's seed, this layer's `salt` (so that two
// dropout layers draw differently) and the value's index in the batch.
class Dropout final : public Layer {
 public:
  Dropout(Shape in, float rate, uint64_t salt);
  std::string name() const override;
  bool BackwardNeedsInput() const override { return false; }
  float rate() const { return rate_; }
  void Forward(Backend& be, const float* params, const float* x, int batch, float* y,
               float* scratch) const override;
  void Backward(Backend& be, const float* params, const float* x, const float* y, const float* dy,
                int batch, float* dx, float* dparams, float* scratch) const override;

 private:
  // The rate and the mask's seed this pass uses (the same forward and back).
  float Rate(const Backend& be) const;
  uint64_t Seed(const Backend& be) const;

  float rate_;
  uint64_t salt_;
};

// Max pooling, square window `kernel`, stride `stride`, no padding.
class MaxPool final : public Layer {
 public:
  MaxPool(Shape in, int kernel, int stride);
  std::string name() const override;
  bool BackwardNeedsOutput() const override { return true; }
  void Forward(Backend& be, const float* params, const float* x, int batch, float* y,
               float* scratch) const override;
  void Backward(Backend& be, const float* params, const float* x, const float* y, const float* dy,
                int batch, float* dx, float* dparams, float* scratch) const override;

 private:
  Window window_;
};

// A feed-forward stack of layers; each layer's input is the previous one's
// output. The output of the last layer is the logits.
class Network {
 public:
  explicit Network(Shape input) : input_(input) {}
  Shape output_shape() const { return layers_.empty() ? input_ : layers_.back()->out_shape(); }
  // Appenders; each takes its input shape from output_shape().
  Network& FullyConnected(int outputs);
  Network& Conv(int out_channels, int kernel, int pad);
  Network& Relu();
  Network& MaxPool(int kernel, int stride);
  Network& Dropout(float rate);    // REQUIRES: 0 <= rate < 1
  Network& GroupNorm(int groups);  // REQUIRES: groups divides the channels

  int size() const { return static_cast<int>(layers_.size()); }
  const Layer& layer(int i) const { return *layers_[i]; }
  Shape input_shape() const { return input_; }
  size_t num_params() const;     // over all layers
  std::string Describe() const;  // "conv5x5x16-relu-..."

 private:
  Shape input_;
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace nn

#endif  // GEEPS_EXAMPLES_LAYERS_LAYERS_H_
