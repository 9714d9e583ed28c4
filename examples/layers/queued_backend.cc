// QueuedBackend: every kernel of an inner host backend, run in order through
// an enqueue function (libgeeps' compute stream), as a GPU backend's kernels
// run on their stream. See MakeQueuedBackend in backend.h.
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"

namespace nn {
namespace {

class QueuedBackend final : public Backend {
 public:
  QueuedBackend(std::unique_ptr<Backend> inner, EnqueueFn enqueue, SyncFn sync)
      : inner_(std::move(inner)), enqueue_(std::move(enqueue)), sync_(std::move(sync)) {}

  ~QueuedBackend() override {
    // Queued kernels hold a pointer to inner_: let them run first.
    Sync();
  }

  void CopyFromHost(float* dst, const float* host, size_t n) override {
    if (n == 0) return;
    // `host` may be reused as soon as this returns: the kernel gets a copy.
    auto data = std::make_shared<std::vector<float>>(host, host + n);
    Run([in = inner_.get(), dst, data] { in->CopyFromHost(dst, data->data(), data->size()); });
  }
  void CopyToHost(float* host, const float* src, size_t n) override {
    if (!Sync()) return;
    inner_->CopyToHost(host, src, n);
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    Run([in = inner_.get(), trans_a, trans_b, m, n, k, alpha, a, b, beta, c] {
      in->Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    });
  }
  void Zero(float* x, size_t n) override {
    Run([in = inner_.get(), x, n] { in->Zero(x, n); });
  }
  void Im2Col(const float* image, const Window& w, size_t ld, float* col) override {
    Run([in = inner_.get(), image, w, ld, col] { in->Im2Col(image, w, ld, col); });
  }
  void Col2Im(const float* col, const Window& w, size_t ld, float* image) override {
    Run([in = inner_.get(), col, w, ld, image] { in->Col2Im(col, w, ld, image); });
  }
  void SwapOuterAxes(const float* src, int a, int b, int inner, float* dst) override {
    Run([in = inner_.get(), src, a, b, inner, dst] { in->SwapOuterAxes(src, a, b, inner, dst); });
  }
  void AddBias(const float* bias, int outer, int channels, int inner, float* x) override {
    Run([in = inner_.get(), bias, outer, channels, inner, x] {
      in->AddBias(bias, outer, channels, inner, x);
    });
  }
  void BiasGrad(const float* dx, int outer, int channels, int inner, float* dbias) override {
    Run([in = inner_.get(), dx, outer, channels, inner, dbias] {
      in->BiasGrad(dx, outer, channels, inner, dbias);
    });
  }
  void ReluForward(const float* x, size_t n, float* y) override {
    Run([in = inner_.get(), x, n, y] { in->ReluForward(x, n, y); });
  }
  void ReluBackward(const float* y, const float* dy, size_t n, float* dx) override {
    Run([in = inner_.get(), y, dy, n, dx] { in->ReluBackward(y, dy, n, dx); });
  }
  void MaxPoolForward(const float* x, int batch, const Window& w, float* y) override {
    Run([in = inner_.get(), x, batch, w, y] { in->MaxPoolForward(x, batch, w, y); });
  }
  void MaxPoolBackward(const float* x, const float* y, const float* dy, int batch, const Window& w,
                       float* dx) override {
    Run([in = inner_.get(), x, y, dy, batch, w, dx] {
      in->MaxPoolBackward(x, y, dy, batch, w, dx);
    });
  }
  // One queued item per convolution pass: the inner backend runs its own
  // (default or specialised) implementation.
  void ConvForward(const float* x, int batch, const Window& w, int out_channels,
                   const float* weights, const float* bias, float* y, float* scratch) override {
    Run([in = inner_.get(), x, batch, w, out_channels, weights, bias, y, scratch] {
      in->ConvForward(x, batch, w, out_channels, weights, bias, y, scratch);
    });
  }
  void ConvBackward(const float* x, const float* dy, int batch, const Window& w, int out_channels,
                    const float* weights, float* dx, float* dweights, float* dbias,
                    float* scratch) override {
    Run([in = inner_.get(), x, dy, batch, w, out_channels, weights, dx, dweights, dbias, scratch] {
      in->ConvBackward(x, dy, batch, w, out_channels, weights, dx, dweights, dbias, scratch);
    });
  }
  // Returns a host value: waits for the queue, then computes here (nothing
  // else is queued meanwhile: the backend has one caller).
  double SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch, int classes,
                             float scale, float* dlogits) override {
    if (!Sync()) return std::numeric_limits<double>::quiet_NaN();
    const double loss = inner_->SoftmaxCrossEntropy(logits, labels, batch, classes, scale, dlogits);
    TakeInnerError();
    return loss;
  }
  void GroupNormForward(const float* x, int batch, int channels, int spatial, int groups,
                        const float* gamma, const float* beta, float* y, float* stats) override {
    Run([in = inner_.get(), x, batch, channels, spatial, groups, gamma, beta, y, stats] {
      in->GroupNormForward(x, batch, channels, spatial, groups, gamma, beta, y, stats);
    });
  }
  void GroupNormBackward(const float* x, const float* dy, int batch, int channels, int spatial,
                         int groups, const float* gamma, float* dx, float* dgamma, float* dbeta,
                         float* stats) override {
    Run([in = inner_.get(), x, dy, batch, channels, spatial, groups, gamma, dx, dgamma, dbeta,
         stats] {
      in->GroupNormBackward(x, dy, batch, channels, spatial, groups, gamma, dx, dgamma, dbeta,
                            stats);
    });
  }
  void DropoutForward(const float* x, size_t n, float rate, uint64_t seed, float* y) override {
    Run([in = inner_.get(), x, n, rate, seed, y] { in->DropoutForward(x, n, rate, seed, y); });
  }
  void DropoutBackward(const float* dy, size_t n, float rate, uint64_t seed, float* dx) override {
    Run([in = inner_.get(), dy, n, rate, seed, dx] { in->DropoutBackward(dy, n, rate, seed, dx); });
  }
  void MomentumDelta(const float* grad, const float* weights, size_t n, float lr, float momentum,
                     float weight_decay, float* velocity, float* delta) override {
    Run([in = inner_.get(), grad, weights, n, lr, momentum, weight_decay, velocity, delta] {
      in->MomentumDelta(grad, weights, n, lr, momentum, weight_decay, velocity, delta);
    });
  }

 private:
  // Enqueues `kernel` unless an error is recorded (later kernels are skipped,
  // as on the CUDA backend).
  void Run(std::function<void()> kernel) {
    if (!ok()) return;
    const std::string error = enqueue_(std::move(kernel));
    if (!error.empty()) Fail("queued layer backend: enqueue: " + error);
  }
  // Waits for the queue; false (error recorded) when that fails or a queued
  // kernel failed.
  bool Sync() {
    const std::string error = sync_();
    if (!error.empty()) Fail("queued layer backend: synchronize: " + error);
    TakeInnerError();
    return ok();
  }
  void TakeInnerError() {
    if (!inner_->ok()) Fail(inner_->error());
  }

  const std::unique_ptr<Backend> inner_;
  const EnqueueFn enqueue_;
  const SyncFn sync_;
};

}  // namespace

std::unique_ptr<Backend> MakeQueuedBackend(std::unique_ptr<Backend> inner, EnqueueFn enqueue,
                                           SyncFn sync) {
  if (inner == nullptr || !enqueue || !sync) return nullptr;
  return std::make_unique<QueuedBackend>(std::move(inner), std::move(enqueue), std::move(sync));
}

}  // namespace nn
