#include "layers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace nn {
namespace {

// He initialisation: weights ~ N(0, 2 / fan_in), biases 0.
void HeInit(std::mt19937_64& rng, size_t weights, size_t biases, size_t fan_in, float* params) {
  std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / static_cast<float>(fan_in)));
  for (size_t i = 0; i < weights; ++i) params[i] = normal(rng);
  for (size_t i = 0; i < biases; ++i) params[weights + i] = 0.0f;
}

Shape ConvOut(Shape in, int out_channels, int kernel, int pad) {
  return Shape{out_channels, in.height + 2 * pad - kernel + 1, in.width + 2 * pad - kernel + 1};
}

Shape PoolOut(Shape in, int kernel, int stride) {
  return Shape{in.channels, (in.height - kernel) / stride + 1, (in.width - kernel) / stride + 1};
}

}  // namespace

// ---- FullyConnected ---------------------------------------------------------

FullyConnected::FullyConnected(Shape in, int outputs) : Layer(in, Shape{outputs, 1, 1}) {}

std::string FullyConnected::name() const { return "fc" + std::to_string(out_shape().channels); }
size_t FullyConnected::num_weights() const { return in_shape().size() * out_shape().size(); }
size_t FullyConnected::num_biases() const { return out_shape().size(); }

void FullyConnected::InitParams(std::mt19937_64& rng, float* params) const {
  HeInit(rng, num_weights(), num_biases(), in_shape().size(), params);
}

void FullyConnected::Forward(Backend& be, const float* params, const float* x, int batch, float* y,
                             float* /*scratch*/) const {
  const int in = static_cast<int>(in_shape().size());
  const int out = static_cast<int>(out_shape().size());
  // y (batch x out) = x (batch x in) * W^T (in x out), then + b.
  be.Gemm(false, true, batch, out, in, 1.0f, x, params, 0.0f, y);
  be.AddBias(params + num_weights(), batch, out, 1, y);
}

void FullyConnected::Backward(Backend& be, const float* params, const float* x, const float* /*y*/,
                              const float* dy, int batch, float* dx, float* dparams,
                              float* /*scratch*/) const {
  const int in = static_cast<int>(in_shape().size());
  const int out = static_cast<int>(out_shape().size());
  // dW (out x in) = dy^T (out x batch) * x (batch x in).
  be.Gemm(true, false, out, in, batch, 1.0f, dy, x, 0.0f, dparams);
  be.BiasGrad(dy, batch, out, 1, dparams + num_weights());
  // dx (batch x in) = dy (batch x out) * W (out x in).
  if (dx != nullptr) be.Gemm(false, false, batch, in, out, 1.0f, dy, params, 0.0f, dx);
}

// ---- Conv2D -------------------------------------------------------------------

Conv2D::Conv2D(Shape in, int out_channels, int kernel, int pad)
    : Layer(in, ConvOut(in, out_channels, kernel, pad)) {
  window_ = Window{in.channels, in.height, in.width, kernel, 1, pad};
}

std::string Conv2D::name() const {
  const int k = window_.kernel;
  return "conv" + std::to_string(k) + "x" + std::to_string(k) + "x" +
         std::to_string(out_shape().channels);
}
size_t Conv2D::num_weights() const {
  return static_cast<size_t>(out_shape().channels) * window_.channels * window_.kernel *
         window_.kernel;
}
size_t Conv2D::num_biases() const { return out_shape().channels; }

size_t Conv2D::ScratchFloats(int batch) const {
  return ConvScratchFloats(batch, window_, out_shape().channels);
}

void Conv2D::InitParams(std::mt19937_64& rng, float* params) const {
  HeInit(rng, num_weights(), num_biases(),
         static_cast<size_t>(window_.channels) * window_.kernel * window_.kernel, params);
}

void Conv2D::Forward(Backend& be, const float* params, const float* x, int batch, float* y,
                     float* scratch) const {
  be.ConvForward(x, batch, window_, out_shape().channels, params, params + num_weights(), y,
                 scratch);
}

void Conv2D::Backward(Backend& be, const float* params, const float* x, const float* /*y*/,
                      const float* dy, int batch, float* dx, float* dparams, float* scratch) const {
  be.ConvBackward(x, dy, batch, window_, out_shape().channels, params, dx, dparams,
                  dparams + num_weights(), scratch);
}

// ---- Relu ---------------------------------------------------------------------

Relu::Relu(Shape in) : Layer(in, in) {}

void Relu::Forward(Backend& be, const float*, const float* x, int batch, float* y, float*) const {
  be.ReluForward(x, batch * in_shape().size(), y);
}

void Relu::Backward(Backend& be, const float*, const float*, const float* y, const float* dy,
                    int batch, float* dx, float*, float*) const {
  if (dx != nullptr) be.ReluBackward(y, dy, batch * in_shape().size(), dx);
}

// ---- Dropout ------------------------------------------------------------------

Dropout::Dropout(Shape in, float rate, uint64_t salt) : Layer(in, in), rate_(rate), salt_(salt) {}

std::string Dropout::name() const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "dropout%g", static_cast<double>(rate_));
  return buf;
}

float Dropout::Rate(const Backend& be) const {
  return be.training() ? rate_ : 0.0f;  // rate 0 copies
}

uint64_t Dropout::Seed(const Backend& be) const {
  return be.seed() ^ (salt_ * 0xD1B54A32D192ED03ull);
}

void Dropout::Forward(Backend& be, const float*, const float* x, int batch, float* y,
                      float*) const {
  be.DropoutForward(x, batch * in_shape().size(), Rate(be), Seed(be), y);
}

void Dropout::Backward(Backend& be, const float*, const float*, const float*, const float* dy,
                       int batch, float* dx, float*, float*) const {
  if (dx != nullptr) be.DropoutBackward(dy, batch * in_shape().size(), Rate(be), Seed(be), dx);
}

// ---- MaxPool ------------------------------------------------------------------

MaxPool::MaxPool(Shape in, int kernel, int stride) : Layer(in, PoolOut(in, kernel, stride)) {
  window_ = Window{in.channels, in.height, in.width, kernel, stride, 0};
}

std::string MaxPool::name() const { return "maxpool" + std::to_string(window_.kernel); }

void MaxPool::Forward(Backend& be, const float*, const float* x, int batch, float* y,
                      float*) const {
  be.MaxPoolForward(x, batch, window_, y);
}

void MaxPool::Backward(Backend& be, const float*, const float* x, const float* y, const float* dy,
                       int batch, float* dx, float*, float*) const {
  if (dx != nullptr) be.MaxPoolBackward(x, y, dy, batch, window_, dx);
}

// ---- GroupNorm -----------------------------------------------------------------

GroupNorm::GroupNorm(Shape in, int groups) : Layer(in, in), groups_(groups) {}

std::string GroupNorm::name() const { return "gn" + std::to_string(groups_); }
size_t GroupNorm::num_weights() const { return in_shape().channels; }
size_t GroupNorm::num_biases() const { return in_shape().channels; }
size_t GroupNorm::ScratchFloats(int batch) const {
  return 2 * static_cast<size_t>(batch) * groups_;
}

void GroupNorm::InitParams(std::mt19937_64& /*rng*/, float* params) const {
  std::fill(params, params + num_weights(), 1.0f);
  std::fill(params + num_weights(), params + num_params(), 0.0f);
}

void GroupNorm::Forward(Backend& be, const float* params, const float* x, int batch, float* y,
                        float* scratch) const {
  const Shape s = in_shape();
  be.GroupNormForward(x, batch, s.channels, s.height * s.width, groups_, params,
                      params + num_weights(), y, scratch);
}

void GroupNorm::Backward(Backend& be, const float* params, const float* x, const float* /*y*/,
                         const float* dy, int batch, float* dx, float* dparams,
                         float* scratch) const {
  const Shape s = in_shape();
  be.GroupNormBackward(x, dy, batch, s.channels, s.height * s.width, groups_, params, dx, dparams,
                       dparams + num_weights(), scratch);
}

// ---- Network ------------------------------------------------------------------

Network& Network::FullyConnected(int outputs) {
  layers_.push_back(std::make_unique<nn::FullyConnected>(output_shape(), outputs));
  return *this;
}
Network& Network::Conv(int out_channels, int kernel, int pad) {
  layers_.push_back(std::make_unique<Conv2D>(output_shape(), out_channels, kernel, pad));
  return *this;
}
Network& Network::Relu() {
  layers_.push_back(std::make_unique<nn::Relu>(output_shape()));
  return *this;
}
Network& Network::MaxPool(int kernel, int stride) {
  layers_.push_back(std::make_unique<nn::MaxPool>(output_shape(), kernel, stride));
  return *this;
}

Network& Network::Dropout(float rate) {
  layers_.push_back(
      std::make_unique<nn::Dropout>(output_shape(), rate, static_cast<uint64_t>(layers_.size())));
  return *this;
}

Network& Network::GroupNorm(int groups) {
  layers_.push_back(std::make_unique<nn::GroupNorm>(output_shape(), groups));
  return *this;
}

size_t Network::num_params() const {
  size_t n = 0;
  for (const auto& l : layers_) n += l->num_params();
  return n;
}

std::string Network::Describe() const {
  std::string s;
  for (const auto& l : layers_) s += (s.empty() ? "" : "-") + l->name();
  return s;
}

}  // namespace nn
