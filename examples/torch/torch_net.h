// The example's model and data schedule, shared by torch_fmnist (both its
// libgeeps run and its --baseline) and the torch tests.
//
// TorchNet: a small CNN for 28x28 images: conv 1->16 (5x5, padding 2),
// batch norm, ReLU, 2x2 max pool; conv 16->32 (the same); linear 1568->128,
// ReLU; linear 128->10; log-softmax. Batch norm is optional (the tests that
// compare a 2-worker step with a 1-worker step of the summed batch leave it
// out: its statistics are per batch).
//
// Schedule: global step i of epoch e = i / steps_per_epoch uses examples
// perm_e[(i mod steps_per_epoch) * N * b ...] of a permutation drawn from
// `seed + e`; worker w of N takes the w-th b of them. So N workers of b
// examples and one process of N * b see the same examples at each step.
#ifndef GEEPS_EXAMPLES_TORCH_TORCH_NET_H_
#define GEEPS_EXAMPLES_TORCH_TORCH_NET_H_

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace torch_example {

struct TorchNetImpl : torch::nn::Module {
  explicit TorchNetImpl(bool batch_norm = true) : batch_norm_(batch_norm) {
    namespace nn = torch::nn;
    conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2)));
    conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2)));
    if (batch_norm_) {
      bn1_ = register_module("bn1", nn::BatchNorm2d(16));
      bn2_ = register_module("bn2", nn::BatchNorm2d(32));
    }
    fc1_ = register_module("fc1", nn::Linear(32 * 7 * 7, 128));
    fc2_ = register_module("fc2", nn::Linear(128, 10));
  }

  // x: (batch, 784) or (batch, 1, 28, 28); log-probabilities (batch, 10).
  torch::Tensor forward(torch::Tensor x) {
    x = x.view({-1, 1, 28, 28});
    x = conv1_->forward(x);
    if (batch_norm_) x = bn1_->forward(x);
    x = torch::max_pool2d(torch::relu(x), 2);
    x = conv2_->forward(x);
    if (batch_norm_) x = bn2_->forward(x);
    x = torch::max_pool2d(torch::relu(x), 2);
    x = torch::relu(fc1_->forward(x.flatten(1)));
    return torch::log_softmax(fc2_->forward(x), 1);
  }

 private:
  bool batch_norm_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(TorchNet);

// The examples of global step `step` for worker `w` of `workers` (b each);
// workers = 1 and b = N * b for the single-process baseline.
class Schedule {
 public:
  Schedule(int64_t examples, int workers, int64_t batch, uint64_t seed)
      : examples_(examples), workers_(workers), batch_(batch), seed_(seed) {}

  int64_t steps_per_epoch() const { return examples_ / (workers_ * batch_); }

  std::vector<int64_t> Batch(int64_t step, int worker) {
    const int64_t epoch = step / steps_per_epoch();
    if (epoch != epoch_ || perm_.empty()) Shuffle(epoch);
    const int64_t first = ((step % steps_per_epoch()) * workers_ + worker) * batch_;
    return std::vector<int64_t>(perm_.begin() + first, perm_.begin() + first + batch_);
  }

 private:
  void Shuffle(int64_t epoch) {
    perm_.resize(static_cast<size_t>(examples_));
    std::iota(perm_.begin(), perm_.end(), 0);
    std::mt19937_64 rng(seed_ + static_cast<uint64_t>(epoch));
    std::shuffle(perm_.begin(), perm_.end(), rng);
    epoch_ = epoch;
  }

  int64_t examples_;
  int workers_;
  int64_t batch_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
};

// The learning rate of step `step` of `steps`: `lr`, a tenth of it for the
// last fifth of the steps.
inline double LrAt(double lr, int64_t step, int64_t steps) {
  return step * 5 >= steps * 4 ? lr / 10 : lr;
}

}  // namespace torch_example

#endif  // GEEPS_EXAMPLES_TORCH_TORCH_NET_H_
