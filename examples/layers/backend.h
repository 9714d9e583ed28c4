// The compute backend of the example layers: every numerical kernel a layer
// needs, on buffers that live wherever the backend computes (host memory for
// HostBackend; GPU memory for CudaBackend, built on cuBLAS, cuDNN where it
// was found at configure time, and CUDA kernels). The layers (layers.h) call
// only these kernels, so a new backend is one more subclass and no layer
// changes.
//
// Conventions: row-major matrices; images NCHW (batch, channels, height,
// width), one image after the other. Pointers are backend buffers unless
// stated; `labels` are host int32 arrays (a device backend copies them).
// A Backend is used by one thread at a time (each worker owns one).
//
// Errors: the kernels return void. A backend that can fail (CUDA: a launch,
// cuBLAS, cuDNN or copy error, an out-of-range label) records the first
// failure in a sticky error(), skips every later kernel and returns NaN from
// SoftmaxCrossEntropy; callers check error() after each iteration (the
// trainer does). Nothing aborts. The CUDA backend enqueues all its work on
// the stream given at construction (libgeeps' GeePS::compute_stream()), so
// its kernels are ordered with libgeeps' copies; the calls that return host
// values (SoftmaxCrossEntropy, CopyToHost) synchronise that stream.
#ifndef GEEPS_EXAMPLES_LAYERS_BACKEND_H_
#define GEEPS_EXAMPLES_LAYERS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace nn {

// The epsilon GroupNormForward adds to each group's variance.
inline constexpr float kGroupNormEpsilon = 1e-5f;

// Geometry of a square-kernel 2-d window (convolution or pooling) over a
// channels x height x width image.
struct Window {
  int channels = 0;
  int height = 0;
  int width = 0;
  int kernel = 1;
  int stride = 1;
  int pad = 0;
  int out_height() const { return (height + 2 * pad - kernel) / stride + 1; }
  int out_width() const { return (width + 2 * pad - kernel) / stride + 1; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // What the random layers (nn::Dropout) draw from. A trainer sets
  // training(true) and a new seed before each iteration's forward pass (the
  // backward pass of that iteration sees the same seed). Not training (the
  // default, as in evaluation) makes dropout the identity.
  void SetTraining(bool training, uint64_t seed) {
    training_ = training;
    seed_ = seed;
  }
  bool training() const { return training_; }
  uint64_t seed() const { return seed_; }

  // The first error so far; empty while all is well.
  const std::string& error() const { return error_; }
  bool ok() const { return error_.empty(); }

  // Host <-> backend buffer copies (host: memcpy). CopyFromHost may return
  // before the copy ends, but `host` may be reused at once; CopyToHost
  // returns once `host` holds the data.
  virtual void CopyFromHost(float* dst, const float* host, size_t n) = 0;
  virtual void CopyToHost(float* host, const float* src, size_t n) = 0;

  // C = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) k x n, C m x n.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // x[i] = 0 for i < n.
  virtual void Zero(float* x, size_t n) = 0;

  // im2col of one image: `col` is a (channels * kernel^2) x (out_h * out_w)
  // matrix whose rows are `ld` floats apart (ld >= out_h * out_w, so that
  // the images of a batch can sit side by side); taps outside the image
  // (padding) read 0.
  virtual void Im2Col(const float* image, const Window& w, size_t ld, float* col) = 0;
  // The adjoint: adds col's entries back into `image` (which it accumulates
  // into; zero it first).
  virtual void Col2Im(const float* col, const Window& w, size_t ld, float* image) = 0;
  // dst[j][i][k] = src[i][j][k] for i < a, j < b, k < inner: swaps the two
  // outer axes (batch-major <-> channel-major activations).
  virtual void SwapOuterAxes(const float* src, int a, int b, int inner, float* dst) = 0;

  // x[o][c][i] += bias[c] for o < outer, c < channels, i < inner.
  virtual void AddBias(const float* bias, int outer, int channels, int inner, float* x) = 0;
  // dbias[c] = sum over o, i of dx[o][c][i].
  virtual void BiasGrad(const float* dx, int outer, int channels, int inner, float* dbias) = 0;

  // y = max(x, 0); dx = dy where y > 0, else 0 (in-place allowed).
  virtual void ReluForward(const float* x, size_t n, float* y) = 0;
  virtual void ReluBackward(const float* y, const float* dy, size_t n, float* dx) = 0;

  // Max pooling of `batch` images (no padding). The backward pass routes
  // each output's gradient to one input of its window equal to the output
  // (no argmax buffer: it is recomputed from x and y): the host backend and
  // the CUDA kernels take the first in row-major order; cuDNN
  // (CUDNN_POOLING_MAX_DETERMINISTIC) breaks ties its own way, which only
  // matters where a window holds equal maxima.
  virtual void MaxPoolForward(const float* x, int batch, const Window& w, float* y) = 0;
  virtual void MaxPoolBackward(const float* x, const float* y, const float* dy, int batch,
                               const Window& w, float* dx) = 0;

  // Convolution of `batch` images x (w.channels x w.height x w.width each)
  // with `out_channels` filters of w.channels x w.kernel x w.kernel, stride
  // w.stride, zero padding w.pad. It is a cross-correlation (the kernel is
  // not flipped):
  //   y[b][o][i][j] = bias[o] + sum over c, ky, kx of
  //                   weights[o][c][ky][kx] * x[b][c][iy][ix],
  //   iy = i * stride - pad + ky,  ix = j * stride - pad + kx
  // (taps outside the image read 0). weights: out_channels x
  // (channels * kernel^2), row-major, i.e. KCRS; bias: out_channels floats;
  // y: batch x out_channels x w.out_height() x w.out_width(), overwritten.
  // scratch: ConvScratchFloats(batch, w, out_channels) backend floats,
  // contents not needed afterwards (a backend may leave it unused).
  //
  // The default is im2col of the whole batch (images side by side) + one
  // GEMM + SwapOuterAxes + AddBias, through this interface's own kernels;
  // the CUDA backend without cuDNN uses it. The CUDA backend with cuDNN
  // overrides both calls, and so does the host backend (one image at a
  // time, in cache; the scratch it uses is a part of the default's).
  virtual void ConvForward(const float* x, int batch, const Window& w, int out_channels,
                           const float* weights, const float* bias, float* y, float* scratch);
  // The gradients of ConvForward given dy = dLoss/dy: dweights
  // (out_channels x channels * kernel^2) and dbias (out_channels), summed
  // over the batch and overwritten, and, unless dx is null, dx = dLoss/dx
  // (overwritten). Reads x, dy and weights; scratch as above.
  virtual void ConvBackward(const float* x, const float* dy, int batch, const Window& w,
                            int out_channels, const float* weights, float* dx, float* dweights,
                            float* dbias, float* scratch);

  // Softmax cross-entropy over `batch` rows of `classes` logits. Returns the
  // sum (not the mean) of the rows' losses; if `dlogits` is not null, writes
  // scale * d(sum of losses)/d(logits) = scale * (softmax - onehot).
  virtual double SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch,
                                     int classes, float scale, float* dlogits) = 0;

  // Inverted dropout of n values at `rate` (in [0, 1)): y[i] = x[i] / (1 -
  // rate) where DropoutKeeps(seed, i, DropoutThreshold(rate)) (dropout_mask.h),
  // else 0; the backward pass dx[i] = dy[i] / (1 - rate) where kept, else 0,
  // with the same seed. Rate 0 copies. In-place allowed.
  virtual void DropoutForward(const float* x, size_t n, float rate, uint64_t seed, float* y) = 0;
  virtual void DropoutBackward(const float* dy, size_t n, float rate, uint64_t seed, float* dx) = 0;

  // Group normalisation of `batch` images of `channels` planes of `spatial`
  // values (NCHW), the channels in `groups` equal consecutive groups
  // (REQUIRES: groups divides channels). Per image and group, with mean and
  // biased variance var over its channels / groups * spatial values:
  //   y = gamma[c] * (x - mean) * rstd + beta[c],
  //   rstd = 1 / sqrt(var + kGroupNormEpsilon).
  // stats: 2 * batch * groups backend floats of scratch (each image and
  // group's mean and rstd; contents not needed afterwards).
  virtual void GroupNormForward(const float* x, int batch, int channels, int spatial, int groups,
                                const float* gamma, const float* beta, float* y, float* stats) = 0;
  // Given dy = dLoss/dy: dgamma and dbeta (channels each, summed over the
  // batch, overwritten) and, unless dx is null, dx = dLoss/dx (overwritten),
  // with xhat = (x - mean) * rstd and g = dy * gamma[c]:
  //   dx = rstd * (g - mean over the group of g - xhat * mean of g * xhat).
  // Recomputes the statistics from x (into `stats`, as above).
  virtual void GroupNormBackward(const float* x, const float* dy, int batch, int channels,
                                 int spatial, int groups, const float* gamma, float* dx,
                                 float* dgamma, float* dbeta, float* stats) = 0;

  // SGD with momentum and L2 weight decay, as a delta for an add-only
  // parameter server:
  //   velocity = momentum * velocity + grad + weight_decay * weights;
  //   delta = -lr * velocity.
  // `weights` may be null when weight_decay is 0.
  virtual void MomentumDelta(const float* grad, const float* weights, size_t n, float lr,
                             float momentum, float weight_decay, float* velocity, float* delta) = 0;

 protected:
  // Records `message` unless an error is already recorded.
  void Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
  }

 private:
  std::string error_;
  bool training_ = false;
  uint64_t seed_ = 0;
};

// The floats of scratch that Backend::ConvForward/ConvBackward need for
// `batch` images of window `w` and `out_channels` filters: the default
// implementation's batch im2col matrix, its gradient, and the output (or
// its gradient) in channel-major order.
size_t ConvScratchFloats(int batch, const Window& w, int out_channels);

// The host backend: GEMMs through the CPU BLAS (OpenBLAS), the rest plain
// loops; convolutions by Backend's default im2col + GEMM.
std::unique_ptr<Backend> MakeHostBackend();

// Runs a kernel later, in order (libgeeps: GeePS::EnqueueHostWork on the
// worker's compute stream); returns an error message, empty when queued.
using EnqueueFn = std::function<std::string(std::function<void()>)>;
// Waits until every queued kernel has run; an error message, empty if none.
using SyncFn = std::function<std::string()>;

// A backend that runs each kernel of `inner` (a host backend) as one queued
// item through `enqueue`, in call order, the way a GPU backend's kernels run
// on its stream: the application's compute is then ordered with libgeeps'
// own copies exactly as on a GPU, and libgeeps' asynchronous host mode
// (Config::async_host_streams) runs it late, so a missing ordering shows up
// as wrong results on a machine without a GPU. CopyFromHost copies the host
// data before it returns; SoftmaxCrossEntropy and CopyToHost wait for the
// queue (`sync`) and run at once. A failed enqueue or sync, or an error of
// `inner`, becomes this backend's sticky error. Null if an argument is
// empty. The queued kernels use `inner`, so destroying the backend waits
// for them.
std::unique_ptr<Backend> MakeQueuedBackend(std::unique_ptr<Backend> inner, EnqueueFn enqueue,
                                           SyncFn sync);

// The CUDA backend, all on `stream` (a cudaStream_t; null = the legacy
// default stream) of the current device: GEMMs through cuBLAS; where cuDNN
// was found at configure time (NN_WITH_CUDNN), convolution (forward,
// backward data, filter and bias), max pooling and ReLU through cuDNN; the
// rest (and, without cuDNN, those too) CUDA kernels. Buffers are device
// memory, `labels` stay host arrays. Null, with the reason in *error, when
// libgeeps was built without CUDA, no GPU is visible ("no CUDA device:
// ..."), or cuBLAS or cuDNN cannot start. Compiled, not yet run on a GPU.
std::unique_ptr<Backend> MakeCudaBackend(void* stream, std::string* error);

// Sets the CPU BLAS's thread count, process-wide (for every host backend):
// with W workers on C cores, max(1, C / W) avoids oversubscription.
void SetHostBlasThreads(int threads);

}  // namespace nn

#endif  // GEEPS_EXAMPLES_LAYERS_BACKEND_H_
