// CudaBackend: the kernels of backend.h on a GPU. GEMMs go to cuBLAS; the
// rest are plain CUDA kernels written to match host_backend.cc (the same
// loops, one thread per output element; where the host sums in a fixed
// order, so does the kernel, except BiasGrad's block reduction). Every call
// enqueues on the stream given at construction; errors are sticky
// (Backend::error()) and never abort.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend.h"

namespace nn {
namespace {

constexpr int kThreads = 256;

int Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

// Window's own out_height()/out_width() are host functions.
__host__ __device__ inline int OutH(const Window& w) {
  return (w.height + 2 * w.pad - w.kernel) / w.stride + 1;
}
__host__ __device__ inline int OutW(const Window& w) {
  return (w.width + 2 * w.pad - w.kernel) / w.stride + 1;
}

#define GRID_LOOP(i, n)                                                  \
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < (n); \
       i += size_t{blockDim.x} * gridDim.x)

// col[(c * k + ky) * k + kx][y * ow + x], rows `ld` apart.
__global__ void Im2ColKernel(const float* __restrict__ image, Window w,
                             size_t ld, float* __restrict__ col) {
  const int oh = OutH(w), ow = OutW(w);
  const size_t cols = static_cast<size_t>(oh) * ow;
  const size_t total = static_cast<size_t>(w.channels) * w.kernel * w.kernel * cols;
  GRID_LOOP(i, total) {
    const size_t row = i / cols;
    const int p = static_cast<int>(i % cols);
    const int y = p / ow, x = p % ow;
    const int kx = static_cast<int>(row % w.kernel);
    const int ky = static_cast<int>((row / w.kernel) % w.kernel);
    const int c = static_cast<int>(row / (w.kernel * w.kernel));
    const int iy = y * w.stride - w.pad + ky;
    const int ix = x * w.stride - w.pad + kx;
    float v = 0.0f;
    if (iy >= 0 && iy < w.height && ix >= 0 && ix < w.width) {
      v = image[(static_cast<size_t>(c) * w.height + iy) * w.width + ix];
    }
    col[row * ld + p] = v;
  }
}

// The adjoint, gathered per image pixel: adds its taps in the host's
// (ky, kx) order.
__global__ void Col2ImKernel(const float* __restrict__ col, Window w,
                             size_t ld, float* __restrict__ image) {
  const int oh = OutH(w), ow = OutW(w);
  const size_t total = static_cast<size_t>(w.channels) * w.height * w.width;
  GRID_LOOP(i, total) {
    const int ix = static_cast<int>(i % w.width);
    const int iy = static_cast<int>((i / w.width) % w.height);
    const int c = static_cast<int>(i / (static_cast<size_t>(w.width) * w.height));
    float acc = image[i];
    for (int ky = 0; ky < w.kernel; ++ky) {
      const int ty = iy + w.pad - ky;
      if (ty < 0 || ty % w.stride != 0 || ty / w.stride >= oh) continue;
      const int y = ty / w.stride;
      for (int kx = 0; kx < w.kernel; ++kx) {
        const int tx = ix + w.pad - kx;
        if (tx < 0 || tx % w.stride != 0 || tx / w.stride >= ow) continue;
        const int x = tx / w.stride;
        const size_t row = (static_cast<size_t>(c) * w.kernel + ky) * w.kernel + kx;
        acc += col[row * ld + static_cast<size_t>(y) * ow + x];
      }
    }
    image[i] = acc;
  }
}

__global__ void SwapOuterAxesKernel(const float* __restrict__ src, int a, int b,
                                    int inner, float* __restrict__ dst) {
  const size_t total = static_cast<size_t>(a) * b * inner;
  GRID_LOOP(i, total) {  // i indexes dst[j][i'][k]
    const size_t k = i % inner;
    const size_t ii = (i / inner) % a;
    const size_t j = i / (static_cast<size_t>(inner) * a);
    dst[i] = src[(ii * b + j) * inner + k];
  }
}

__global__ void AddBiasKernel(const float* __restrict__ bias, int outer,
                              int channels, int inner, float* __restrict__ x) {
  const size_t total = static_cast<size_t>(outer) * channels * inner;
  GRID_LOOP(i, total) x[i] += bias[(i / inner) % channels];
}

// One block per channel: the block sums its channel's outer * inner values.
__global__ void BiasGradKernel(const float* __restrict__ dx, int outer,
                               int channels, int inner,
                               float* __restrict__ dbias) {
  __shared__ float partial[kThreads];
  const int c = blockIdx.x;
  const size_t total = static_cast<size_t>(outer) * inner;
  float sum = 0.0f;
  for (size_t j = threadIdx.x; j < total; j += blockDim.x) {
    const size_t o = j / inner, i = j % inner;
    sum += dx[(o * channels + c) * inner + i];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) dbias[c] = partial[0];
}

__global__ void ReluForwardKernel(const float* x, size_t n, float* y) {
  GRID_LOOP(i, n) y[i] = x[i] > 0 ? x[i] : 0.0f;
}

__global__ void ReluBackwardKernel(const float* y, const float* dy, size_t n,
                                   float* dx) {
  GRID_LOOP(i, n) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

__global__ void MaxPoolForwardKernel(const float* __restrict__ x, size_t planes,
                                     Window w, float* __restrict__ y) {
  const int oh = OutH(w), ow = OutW(w);
  const size_t total = planes * oh * ow;
  GRID_LOOP(i, total) {
    const int ox = static_cast<int>(i % ow);
    const int oy = static_cast<int>((i / ow) % oh);
    const size_t p = i / (static_cast<size_t>(ow) * oh);
    const float* in = x + p * w.height * w.width;
    float best = -INFINITY;
    for (int ky = 0; ky < w.kernel; ++ky) {
      const float* r = in + (oy * w.stride + ky) * w.width + ox * w.stride;
      for (int kx = 0; kx < w.kernel; ++kx) best = fmaxf(best, r[kx]);
    }
    y[i] = best;
  }
}

// Gathered per input pixel: it takes the gradient of every output whose
// window's first maximum it is, in the host's (oy, ox) order.
__global__ void MaxPoolBackwardKernel(const float* __restrict__ x,
                                      const float* __restrict__ y,
                                      const float* __restrict__ dy,
                                      size_t planes, Window w,
                                      float* __restrict__ dx) {
  const int oh = OutH(w), ow = OutW(w);
  const size_t total = planes * w.height * w.width;
  GRID_LOOP(i, total) {
    const int ix = static_cast<int>(i % w.width);
    const int iy = static_cast<int>((i / w.width) % w.height);
    const size_t p = i / (static_cast<size_t>(w.width) * w.height);
    const float* in = x + p * w.height * w.width;
    const float* out = y + p * oh * ow;
    const float* dout = dy + p * oh * ow;
    float acc = 0.0f;
    for (int oy = 0; oy < oh; ++oy) {
      if (iy < oy * w.stride || iy >= oy * w.stride + w.kernel) continue;
      for (int ox = 0; ox < ow; ++ox) {
        if (ix < ox * w.stride || ix >= ox * w.stride + w.kernel) continue;
        const float best = out[oy * ow + ox];
        int first = -1;
        for (int ky = 0; ky < w.kernel && first < 0; ++ky) {
          const int base = (oy * w.stride + ky) * w.width + ox * w.stride;
          for (int kx = 0; kx < w.kernel; ++kx) {
            if (in[base + kx] == best) {
              first = base + kx;
              break;
            }
          }
        }
        if (first == iy * w.width + ix) acc += dout[oy * ow + ox];
      }
    }
    dx[i] = acc;
  }
}

// One thread per row, in double like the host; loss[b] is row b's loss.
__global__ void SoftmaxKernel(const float* __restrict__ logits,
                              const int32_t* __restrict__ labels, int batch,
                              int classes, float scale,
                              float* __restrict__ dlogits,
                              double* __restrict__ loss) {
  GRID_LOOP(b, static_cast<size_t>(batch)) {
    const float* z = logits + b * classes;
    float top = z[0];
    for (int k = 1; k < classes; ++k) top = fmaxf(top, z[k]);
    double sum = 0;
    for (int k = 0; k < classes; ++k) sum += exp(static_cast<double>(z[k]) - top);
    const double log_sum = log(sum) + top;
    const int label = labels[b];
    loss[b] = log_sum - z[label];
    if (dlogits == nullptr) continue;
    float* d = dlogits + b * classes;
    for (int k = 0; k < classes; ++k) {
      const double p = exp(static_cast<double>(z[k]) - log_sum);
      d[k] = scale * static_cast<float>(p - (k == label ? 1.0 : 0.0));
    }
  }
}

__global__ void MomentumKernel(const float* __restrict__ grad, size_t n,
                               float lr, float momentum,
                               float* __restrict__ velocity,
                               float* __restrict__ delta) {
  GRID_LOOP(i, n) {
    const float v = momentum * velocity[i] + grad[i];
    velocity[i] = v;
    delta[i] = -lr * v;
  }
}

const char* CublasName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(cudaStream_t stream, cublasHandle_t blas)
      : stream_(stream), blas_(blas) {}
  ~CudaBackend() override {
    cudaFree(labels_);
    cudaFree(losses_);
    cublasDestroy(blas_);
  }

  void CopyFromHost(float* dst, const float* host, size_t n) override {
    if (!ok() || n == 0) return;
    Check(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice,
                          stream_),
          "CopyFromHost");
  }
  void CopyToHost(float* host, const float* src, size_t n) override {
    if (!ok() || n == 0) return;
    if (!Check(cudaMemcpyAsync(host, src, n * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_),
               "CopyToHost")) {
      return;
    }
    Check(cudaStreamSynchronize(stream_), "CopyToHost (synchronise)");
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    if (!ok()) return;
    // Row-major C (m x n) is column-major C^T: C^T = op(B)^T op(A)^T, so
    // cuBLAS gets B first, then A, with the row-major leading dimensions.
    const cublasStatus_t s = cublasSgemm(
        blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
        trans_b ? k : n, a, trans_a ? m : k, &beta, c, n);
    if (s != CUBLAS_STATUS_SUCCESS) {
      Fail(std::string("CUDA layer backend: cublasSgemm: ") + CublasName(s));
    }
  }

  void Zero(float* x, size_t n) override {
    if (!ok() || n == 0) return;
    Check(cudaMemsetAsync(x, 0, n * sizeof(float), stream_), "Zero");
  }

  void Im2Col(const float* image, const Window& w, size_t ld,
              float* col) override {
    if (!ok()) return;
    const size_t n = static_cast<size_t>(w.channels) * w.kernel * w.kernel *
                     OutH(w) * OutW(w);
    if (n == 0) return;
    Im2ColKernel<<<Blocks(n), kThreads, 0, stream_>>>(image, w, ld, col);
    Launched("Im2Col");
  }

  void Col2Im(const float* col, const Window& w, size_t ld,
              float* image) override {
    if (!ok()) return;
    const size_t n = static_cast<size_t>(w.channels) * w.height * w.width;
    if (n == 0) return;
    Col2ImKernel<<<Blocks(n), kThreads, 0, stream_>>>(col, w, ld, image);
    Launched("Col2Im");
  }

  void SwapOuterAxes(const float* src, int a, int b, int inner,
                     float* dst) override {
    if (!ok()) return;
    const size_t n = static_cast<size_t>(a) * b * inner;
    if (n == 0) return;
    SwapOuterAxesKernel<<<Blocks(n), kThreads, 0, stream_>>>(src, a, b, inner,
                                                             dst);
    Launched("SwapOuterAxes");
  }

  void AddBias(const float* bias, int outer, int channels, int inner,
               float* x) override {
    if (!ok()) return;
    const size_t n = static_cast<size_t>(outer) * channels * inner;
    if (n == 0) return;
    AddBiasKernel<<<Blocks(n), kThreads, 0, stream_>>>(bias, outer, channels,
                                                       inner, x);
    Launched("AddBias");
  }

  void BiasGrad(const float* dx, int outer, int channels, int inner,
                float* dbias) override {
    if (!ok() || channels <= 0) return;
    BiasGradKernel<<<channels, kThreads, 0, stream_>>>(dx, outer, channels,
                                                       inner, dbias);
    Launched("BiasGrad");
  }

  void ReluForward(const float* x, size_t n, float* y) override {
    if (!ok() || n == 0) return;
    ReluForwardKernel<<<Blocks(n), kThreads, 0, stream_>>>(x, n, y);
    Launched("ReluForward");
  }

  void ReluBackward(const float* y, const float* dy, size_t n,
                    float* dx) override {
    if (!ok() || n == 0) return;
    ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream_>>>(y, dy, n, dx);
    Launched("ReluBackward");
  }

  void MaxPoolForward(const float* x, int batch, const Window& w,
                      float* y) override {
    if (!ok()) return;
    const size_t planes = static_cast<size_t>(batch) * w.channels;
    const size_t n = planes * OutH(w) * OutW(w);
    if (n == 0) return;
    MaxPoolForwardKernel<<<Blocks(n), kThreads, 0, stream_>>>(x, planes, w, y);
    Launched("MaxPoolForward");
  }

  void MaxPoolBackward(const float* x, const float* y, const float* dy,
                       int batch, const Window& w, float* dx) override {
    if (!ok()) return;
    const size_t planes = static_cast<size_t>(batch) * w.channels;
    const size_t n = planes * w.height * w.width;
    if (n == 0) return;
    MaxPoolBackwardKernel<<<Blocks(n), kThreads, 0, stream_>>>(x, y, dy, planes,
                                                               w, dx);
    Launched("MaxPoolBackward");
  }

  double SoftmaxCrossEntropy(const float* logits, const int32_t* labels,
                             int batch, int classes, float scale,
                             float* dlogits) override {
    if (!ok()) return std::nan("");
    if (batch <= 0) return 0;
    for (int b = 0; b < batch; ++b) {
      if (labels[b] < 0 || labels[b] >= classes) {
        Fail("CUDA layer backend: SoftmaxCrossEntropy: label " +
             std::to_string(labels[b]) + " of row " + std::to_string(b) +
             " is not in [0, " + std::to_string(classes) + ")");
        return std::nan("");
      }
    }
    if (batch > capacity_) {
      // cudaFree waits for the device, so no queued kernel still uses them.
      cudaFree(labels_);
      cudaFree(losses_);
      labels_ = nullptr;
      losses_ = nullptr;
      capacity_ = 0;
      if (!Check(cudaMalloc(&labels_, batch * sizeof(int32_t)),
                 "SoftmaxCrossEntropy (cudaMalloc)") ||
          !Check(cudaMalloc(&losses_, batch * sizeof(double)),
                 "SoftmaxCrossEntropy (cudaMalloc)")) {
        return std::nan("");
      }
      capacity_ = batch;
    }
    if (!Check(cudaMemcpyAsync(labels_, labels, batch * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream_),
               "SoftmaxCrossEntropy (labels)")) {
      return std::nan("");
    }
    SoftmaxKernel<<<Blocks(batch), kThreads, 0, stream_>>>(
        logits, labels_, batch, classes, scale, dlogits, losses_);
    if (!Launched("SoftmaxCrossEntropy")) return std::nan("");
    host_losses_.resize(batch);
    if (!Check(cudaMemcpyAsync(host_losses_.data(), losses_,
                               batch * sizeof(double), cudaMemcpyDeviceToHost,
                               stream_),
               "SoftmaxCrossEntropy (losses)") ||
        !Check(cudaStreamSynchronize(stream_),
               "SoftmaxCrossEntropy (synchronise)")) {
      return std::nan("");
    }
    double loss = 0;  // in row order, as the host sums
    for (double l : host_losses_) loss += l;
    return loss;
  }

  void MomentumDelta(const float* grad, size_t n, float lr, float momentum,
                     float* velocity, float* delta) override {
    if (!ok() || n == 0) return;
    MomentumKernel<<<Blocks(n), kThreads, 0, stream_>>>(grad, n, lr, momentum,
                                                        velocity, delta);
    Launched("MomentumDelta");
  }

 private:
  bool Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    Fail(std::string("CUDA layer backend: ") + what + ": " +
         cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
    return false;
  }
  bool Launched(const char* kernel) { return Check(cudaGetLastError(), kernel); }

  cudaStream_t stream_;
  cublasHandle_t blas_;
  int32_t* labels_ = nullptr;  // device: SoftmaxCrossEntropy's labels
  double* losses_ = nullptr;   // device: its per-row losses
  int capacity_ = 0;           // rows of labels_ and losses_
  std::vector<double> host_losses_;
};

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend(void* stream, std::string* error) {
  auto fail = [error](std::string why) -> std::unique_ptr<Backend> {
    if (error != nullptr) *error = std::move(why);
    return nullptr;
  };
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear it: this is not the caller's error
    return fail(std::string("no CUDA device: ") +
                (e != cudaSuccess ? cudaGetErrorString(e) : "none visible"));
  }
  cublasHandle_t blas = nullptr;
  cublasStatus_t s = cublasCreate(&blas);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return fail(std::string("cublasCreate: ") + CublasName(s));
  }
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  s = cublasSetStream(blas, cuda_stream);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH);
  if (s != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(blas);
    return fail(std::string("cuBLAS setup: ") + CublasName(s));
  }
  return std::make_unique<CudaBackend>(cuda_stream, blas);
}

}  // namespace nn
