// CudaBackend: the kernels of backend.h on a GPU. GEMMs go to cuBLAS. Where
// cuDNN was found at configure time (NN_WITH_CUDNN) and the cuDNN found at
// run time is usable (CheckLibraries below), convolution (forward, backward
// data, filter and bias), max pooling and ReLU go to cuDNN (its descriptor
// API); otherwise, and for everything else, plain CUDA kernels written to
// match host_backend.cc (the same loops, one thread per output element; where
// the host sums in a fixed order, so does the kernel, except BiasGrad's block
// reduction), and convolution is Backend's default im2col + GEMM. Every call
// enqueues on the stream given at construction; errors are sticky
// (Backend::error()) and never abort. Compiled, not yet run on a GPU.
//
// Version skew (docs/cuda.md, "Library versions"): the first MakeCudaBackend
// of a process compares the cuBLAS and cuDNN it runs with against the
// headers it was built with, and prints one line on stderr saying what it
// found and whether cuDNN is used. cuDNN older than the build's major.minor
// (cuDNN only promises that a newer minor release runs an older build), or
// one whose parts do not load, is not used: the backend's own kernels run
// instead. NN_CUDNN=off never uses it; NN_CUDNN=force uses an older one
// anyway (then a cuDNN that cannot start is an error). An older cuBLAS 13.x
// is reported and used: the backend calls only cublasCreate, SetStream,
// SetMathMode, Sgemm and Destroy, in every release of the soname
// libcublas.so.13.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#if NN_WITH_CUDNN
#include <cudnn.h>
#endif

#include <array>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "cuda_launch.h"
#include "cudnn_algos.h"
#include "dropout_mask.h"

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

#define GRID_LOOP(i, n)                                                   \
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < (n); \
       i += size_t{blockDim.x} * gridDim.x)

// col[(c * k + ky) * k + kx][y * ow + x], rows `ld` apart.
__global__ void Im2ColKernel(const float* __restrict__ image, Window w, size_t ld,
                             float* __restrict__ col) {
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
__global__ void Col2ImKernel(const float* __restrict__ col, Window w, size_t ld,
                             float* __restrict__ image) {
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

__global__ void SwapOuterAxesKernel(const float* __restrict__ src, int a, int b, int inner,
                                    float* __restrict__ dst) {
  const size_t total = static_cast<size_t>(a) * b * inner;
  GRID_LOOP(i, total) {  // i indexes dst[j][i'][k]
    const size_t k = i % inner;
    const size_t ii = (i / inner) % a;
    const size_t j = i / (static_cast<size_t>(inner) * a);
    dst[i] = src[(ii * b + j) * inner + k];
  }
}

__global__ void AddBiasKernel(const float* __restrict__ bias, int outer, int channels, int inner,
                              float* __restrict__ x) {
  const size_t total = static_cast<size_t>(outer) * channels * inner;
  GRID_LOOP(i, total) x[i] += bias[(i / inner) % channels];
}

// One block per channel: the block sums its channel's outer * inner values.
__global__ void BiasGradKernel(const float* __restrict__ dx, int outer, int channels, int inner,
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

__global__ void ReluBackwardKernel(const float* y, const float* dy, size_t n, float* dx) {
  GRID_LOOP(i, n) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

// Max pooling without cuDNN (not built in, or not usable at run time).
__global__ void MaxPoolForwardKernel(const float* __restrict__ x, size_t planes, Window w,
                                     float* __restrict__ y) {
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
__global__ void MaxPoolBackwardKernel(const float* __restrict__ x, const float* __restrict__ y,
                                      const float* __restrict__ dy, size_t planes, Window w,
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
__global__ void SoftmaxKernel(const float* __restrict__ logits, const int32_t* __restrict__ labels,
                              int batch, int classes, float scale, float* __restrict__ dlogits,
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

// The sum of every thread's v over the block (blockDim.x == kThreads, a power
// of 2), returned to every thread; `partial` is kThreads doubles of shared
// memory, free again when it returns.
__device__ double BlockSum(double v, double* partial) {
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const double total = partial[0];
  __syncthreads();
  return total;
}

// One block per image and group (its `count` values are consecutive): the
// group's mean and 1 / sqrt(variance + epsilon) into stats, as the host
// backend computes them (two passes, in double).
__global__ void GroupStatsKernel(const float* __restrict__ x, size_t count,
                                 float* __restrict__ stats) {
  __shared__ double partial[kThreads];
  const float* v = x + blockIdx.x * count;
  double sum = 0;
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) sum += v[i];
  const double mean = BlockSum(sum, partial) / static_cast<double>(count);
  double squares = 0;
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
    squares += (v[i] - mean) * (v[i] - mean);
  }
  const double var = BlockSum(squares, partial) / static_cast<double>(count);
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = static_cast<float>(mean);
    stats[2 * blockIdx.x + 1] = static_cast<float>(1.0 / sqrt(var + kGroupNormEpsilon));
  }
}

__global__ void GroupNormForwardKernel(const float* __restrict__ x, size_t total, int channels,
                                       int spatial, int groups, const float* __restrict__ gamma,
                                       const float* __restrict__ beta,
                                       const float* __restrict__ stats, float* __restrict__ y) {
  const int per_group = channels / groups;
  GRID_LOOP(i, total) {
    const size_t plane = i / spatial;
    const int c = static_cast<int>(plane % channels);
    const size_t b = plane / channels;
    const float* st = stats + 2 * (b * groups + c / per_group);
    const float scale = gamma[c] * st[1];
    const float shift = beta[c] - st[0] * scale;
    y[i] = x[i] * scale + shift;
  }
}

// One block per channel: dgamma[c] = sum of dy * xhat, dbeta[c] = sum of dy
// over the batch's planes of channel c.
__global__ void GroupNormParamGradKernel(const float* __restrict__ x, const float* __restrict__ dy,
                                         int batch, int channels, int spatial, int groups,
                                         const float* __restrict__ stats,
                                         float* __restrict__ dgamma, float* __restrict__ dbeta) {
  __shared__ double partial[kThreads];
  const int c = blockIdx.x;
  const int g = c / (channels / groups);
  double sum_dyx = 0, sum_dy = 0;
  const size_t total = static_cast<size_t>(batch) * spatial;
  for (size_t j = threadIdx.x; j < total; j += blockDim.x) {
    const size_t b = j / spatial, i = j % spatial;
    const size_t at = (b * channels + c) * spatial + i;
    const float* st = stats + 2 * (b * groups + g);
    sum_dyx += dy[at] * ((static_cast<double>(x[at]) - st[0]) * st[1]);
    sum_dy += dy[at];
  }
  sum_dyx = BlockSum(sum_dyx, partial);
  sum_dy = BlockSum(sum_dy, partial);
  if (threadIdx.x == 0) {
    dgamma[c] = static_cast<float>(sum_dyx);
    dbeta[c] = static_cast<float>(sum_dy);
  }
}

// One block per image and group: dx of its values (backend.h).
__global__ void GroupNormDxKernel(const float* __restrict__ x, const float* __restrict__ dy,
                                  int channels, int spatial, int groups,
                                  const float* __restrict__ gamma, const float* __restrict__ stats,
                                  float* __restrict__ dx) {
  __shared__ double partial[kThreads];
  const int per_group = channels / groups;
  const size_t count = static_cast<size_t>(per_group) * spatial;
  const size_t first = blockIdx.x * count;  // a group's planes are consecutive
  const int first_channel = static_cast<int>(blockIdx.x % groups) * per_group;
  const double mean = stats[2 * blockIdx.x], rstd = stats[2 * blockIdx.x + 1];
  double sum_g = 0, sum_gx = 0;
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
    const double g = static_cast<double>(dy[first + i]) * gamma[first_channel + i / spatial];
    sum_g += g;
    sum_gx += g * ((x[first + i] - mean) * rstd);
  }
  const double mean_g = BlockSum(sum_g, partial) / static_cast<double>(count);
  const double mean_gx = BlockSum(sum_gx, partial) / static_cast<double>(count);
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
    const double xhat = (x[first + i] - mean) * rstd;
    const double g = static_cast<double>(dy[first + i]) * gamma[first_channel + i / spatial];
    dx[first + i] = static_cast<float>(rstd * (g - mean_g - xhat * mean_gx));
  }
}

// Inverted dropout; also its backward pass (the same mask and scale).
__global__ void DropoutKernel(const float* x, size_t n, uint32_t threshold, float scale,
                              uint64_t seed, float* y) {
  GRID_LOOP(i, n) { y[i] = DropoutKeeps(seed, i, threshold) ? x[i] * scale : 0.0f; }
}

__global__ void MomentumKernel(const float* __restrict__ grad, const float* __restrict__ weights,
                               size_t n, float lr, float momentum, float weight_decay,
                               float* __restrict__ velocity, float* __restrict__ delta) {
  GRID_LOOP(i, n) {
    float g = grad[i];
    if (weights != nullptr) g += weight_decay * weights[i];
    const float v = momentum * velocity[i] + g;
    velocity[i] = v;
    delta[i] = -lr * v;
  }
}

const char* CublasName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}

// ---- Library versions (docs/cuda.md, "Library versions") -----------------

struct Version {
  int major = 0, minor = 0, patch = 0;
  std::string str() const {
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
  // Older than `built` in major.minor (a patch release never matters).
  bool OlderThan(const Version& built) const {
    return major < built.major || (major == built.major && minor < built.minor);
  }
};

// What the first MakeCudaBackend of the process found (CheckLibraries).
struct LibraryCheck {
  std::string blas_error;   // non-empty: cuBLAS cannot be used
  bool dnn_wanted = false;  // start cuDNN in each backend (it may still fail)
  bool dnn_forced = false;  // NN_CUDNN=force: a failed start is an error
};

#if NN_WITH_CUDNN
enum class DnnPolicy { kAuto, kOff, kForce };

// NN_CUDNN: auto (default), off (never cuDNN), force (an older cuDNN too).
DnnPolicy ReadDnnPolicy(std::string* note) {
  const char* v = std::getenv("NN_CUDNN");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) {
    return DnnPolicy::kAuto;
  }
  for (const char* off : {"off", "0", "no", "false"}) {
    if (std::strcmp(v, off) == 0) return DnnPolicy::kOff;
  }
  for (const char* on : {"force", "on", "1", "yes", "true"}) {
    if (std::strcmp(v, on) == 0) return DnnPolicy::kForce;
  }
  *note = std::string("NN_CUDNN=") + v + " is not auto, off or force: auto";
  return DnnPolicy::kAuto;
}

// A status as a name, without cudnnGetErrorString: when cuDNN's parts do not
// load, that function may not be reachable either.
std::string DnnStatusName(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH:
      return "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH";
    case CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED:
      return "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED";
    default:
      return "cuDNN status " + std::to_string(static_cast<int>(s));
  }
}
#endif  // NN_WITH_CUDNN

// Compares the cuBLAS and cuDNN this process runs with against the headers
// it was built with, decides whether cuDNN is used, and prints one line on
// stderr saying so (scripts/gpu-check.sh reads it). Once per process: every
// later backend shares the decision.
const LibraryCheck& CheckLibraries() {
  static const LibraryCheck check = [] {
    LibraryCheck c;
    std::string line = "nn: CUDA layer backend: ";
    const Version blas_built{CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH};
    Version blas;
    if (cublasGetProperty(MAJOR_VERSION, &blas.major) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &blas.minor) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &blas.patch) != CUBLAS_STATUS_SUCCESS) {
      line += "cuBLAS of unknown version (cublasGetProperty failed; built with " +
              blas_built.str() + ")";
    } else {
      line += "cuBLAS " + blas.str() + " (built with " + blas_built.str() + ")";
      if (blas.major != blas_built.major) {
        c.blas_error = "cuBLAS " + blas.str() + " is not of major version " +
                       std::to_string(blas_built.major) + ", which this backend was built with";
        line += ": NOT usable";
      } else if (blas.OlderThan(blas_built)) {
        line +=
            ": older than the build, used (the calls made here are in "
            "every " +
            std::to_string(blas_built.major) + ".x)";
      }
    }
    line += "; ";
#if NN_WITH_CUDNN
    std::string note;
    const DnnPolicy policy = ReadDnnPolicy(&note);
    const Version dnn_built{CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL};
    const size_t v = cudnnGetVersion();
    const Version dnn{static_cast<int>(v / 10000), static_cast<int>(v % 10000 / 100),
                      static_cast<int>(v % 100)};
    line += "cuDNN " + (v == 0 ? std::string("of unknown version") : dnn.str()) + " (built with " +
            dnn_built.str() + ")";
    std::string why_not;
    if (policy == DnnPolicy::kOff) {
      why_not = "NN_CUDNN=off";
    } else if (v == 0) {
      // scripts/gpu-bundle.sh's stand-in libcudnn.so.9, where a machine has
      // no cuDNN: it exists only so that the binaries start.
      why_not = "not available (cudnnGetVersion() returned 0)";
    } else if (dnn.major != dnn_built.major) {
      why_not = "not of major version " + std::to_string(dnn_built.major);
    } else if (dnn.OlderThan(dnn_built) && policy != DnnPolicy::kForce) {
      why_not = "older than the build's " + std::to_string(dnn_built.major) + "." +
                std::to_string(dnn_built.minor) +
                " (cuDNN promises only that a newer minor release runs an "
                "older build; NN_CUDNN=force uses it anyway)";
    } else {
      cudnnStatus_t s = cudnnOpsVersionCheck();
      if (s == CUDNN_STATUS_SUCCESS) s = cudnnCnnVersionCheck();
      if (s != CUDNN_STATUS_SUCCESS) {
        why_not = "its parts do not load or do not match (" + DnnStatusName(s) + ")";
      }
    }
    c.dnn_wanted = why_not.empty();
    c.dnn_forced = policy == DnnPolicy::kForce;
    if (c.dnn_wanted) {
      line += dnn.OlderThan(dnn_built) ? ": used (NN_CUDNN=force, although older than the build)"
                                       : ": used";
    } else {
      line += ": NOT used, " + why_not +
              "; convolution, max pooling and ReLU run on the backend's own "
              "kernels";
    }
    if (!note.empty()) line += " (" + note + ")";
#else
    line +=
        "cuDNN: not built in (not found at configure time): NOT used; "
        "convolution, max pooling and ReLU run on the backend's own "
        "kernels";
#endif
    std::fprintf(stderr, "%s\n", line.c_str());
    return c;
  }();
  return check;
}

#if NN_WITH_CUDNN
// The most device memory one convolution algorithm may use as workspace; an
// algorithm that needs more is passed over (the fallbacks need little or
// none). The workspace is the backend's own cudaMalloc, outside libgeeps'
// device memory budget.
constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

// cuDNN's descriptors for one convolution shape (batch, window, filters),
// and the algorithms chosen for it, each on first use.
struct ConvPlan {
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (bias != nullptr) cudnnDestroyTensorDescriptor(bias);
    if (filter != nullptr) cudnnDestroyFilterDescriptor(filter);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }

  cudnnTensorDescriptor_t x = nullptr;       // batch x C x H x W
  cudnnTensorDescriptor_t y = nullptr;       // batch x K x OH x OW
  cudnnTensorDescriptor_t bias = nullptr;    // 1 x K x 1 x 1
  cudnnFilterDescriptor_t filter = nullptr;  // K x C x k x k (KCRS)
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool have_fwd = false, have_bwd_data = false, have_bwd_filter = false;
  cudnnConvolutionFwdAlgo_t fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
};

// cudnn_algos.h's numbers are cuDNN's.
namespace algos = cudnn_algos;
static_assert(algos::kFwdFft == CUDNN_CONVOLUTION_FWD_ALGO_FFT &&
              algos::kFwdFftTiling == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING &&
              algos::kFwdWinograd == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD &&
              algos::kFwdWinogradNonfused == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
static_assert(algos::kDataAlgo0 == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 &&
              algos::kDataFft == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT &&
              algos::kDataFftTiling == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING &&
              algos::kDataWinograd == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD &&
              algos::kDataWinogradNonfused == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED);
static_assert(algos::kFilterAlgo0 == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
              algos::kFilterFft == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT &&
              algos::kFilterAlgo3 == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 &&
              algos::kFilterWinograd == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD &&
              algos::kFilterWinogradNonfused ==
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED &&
              algos::kFilterFftTiling == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING);

constexpr algos::Pass PassOf(cudnnConvolutionFwdAlgo_t) { return algos::Pass::kForward; }
constexpr algos::Pass PassOf(cudnnConvolutionBwdDataAlgo_t) { return algos::Pass::kBackwardData; }
constexpr algos::Pass PassOf(cudnnConvolutionBwdFilterAlgo_t) {
  return algos::Pass::kBackwardFilter;
}

// Whether a heuristic result may be used: supported, deterministic (the same
// inputs give the same bits from run to run, as on the host), without
// tensor-op math (TF32 keeps 10 mantissa bits: far from the host's results),
// and allowed by cudnn_algos.h (neither coarse nor known non-deterministic).
// The descriptor itself is set to CUDNN_FMA_MATH, which is what runs.
template <typename Perf>
bool Usable(const Perf& p) {
  return p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC &&
         (p.mathType == CUDNN_FMA_MATH || p.mathType == CUDNN_DEFAULT_MATH) &&
         algos::Allowed(PassOf(p.algo), static_cast<int>(p.algo));
}
#endif  // NN_WITH_CUDNN

class CudaBackend final : public Backend {
 public:
  CudaBackend(cudaStream_t stream, cublasHandle_t blas) : stream_(stream), blas_(blas) {}
  ~CudaBackend() override {
#if NN_WITH_CUDNN
    plans_.clear();
    StopDnn();
    cudaFree(workspace_);
#endif
    cudaFree(labels_);
    cudaFree(losses_);
    cublasDestroy(blas_);
  }

#if NN_WITH_CUDNN
  // Creates the cuDNN handle (on stream_) and the descriptors that the
  // pooling and ReLU calls re-set each time (host-only calls). On failure it
  // releases what it made and returns why: dnn_ stays null and the backend's
  // own kernels run (not recorded in error(): the backend stays usable).
  std::string StartDnn() {
    std::string why;
    auto step = [&why](cudnnStatus_t s, const char* what) {
      if (s != CUDNN_STATUS_SUCCESS && why.empty()) {
        why = std::string(what) + ": " + DnnStatusName(s);
      }
      return why.empty();
    };
    cudnnHandle_t handle = nullptr;
    if (!step(cudnnCreate(&handle), "cudnnCreate")) return why;
    dnn_ = handle;
    if (step(cudnnSetStream(dnn_, stream_), "cudnnSetStream") &&
        step(cudnnCreatePoolingDescriptor(&pool_), "cudnnCreatePoolingDescriptor") &&
        step(cudnnCreateActivationDescriptor(&relu_), "cudnnCreateActivationDescriptor") &&
        step(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN,
                                          0.0),
             "cudnnSetActivationDescriptor") &&
        step(cudnnCreateTensorDescriptor(&pool_x_), "cudnnCreateTensorDescriptor") &&
        step(cudnnCreateTensorDescriptor(&pool_y_), "cudnnCreateTensorDescriptor") &&
        step(cudnnCreateTensorDescriptor(&vector_), "cudnnCreateTensorDescriptor")) {
      return "";
    }
    StopDnn();
    return why;
  }

  // Releases the handle and the descriptors (dnn_ null afterwards).
  void StopDnn() {
    if (pool_ != nullptr) cudnnDestroyPoolingDescriptor(pool_);
    if (relu_ != nullptr) cudnnDestroyActivationDescriptor(relu_);
    if (pool_x_ != nullptr) cudnnDestroyTensorDescriptor(pool_x_);
    if (pool_y_ != nullptr) cudnnDestroyTensorDescriptor(pool_y_);
    if (vector_ != nullptr) cudnnDestroyTensorDescriptor(vector_);
    if (dnn_ != nullptr) cudnnDestroy(dnn_);
    pool_ = nullptr;
    relu_ = nullptr;
    pool_x_ = pool_y_ = vector_ = nullptr;
    dnn_ = nullptr;
  }
#endif

  void CopyFromHost(float* dst, const float* host, size_t n) override {
    if (!ok() || n == 0) return;
    Check(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, stream_),
          "CopyFromHost");
  }
  void CopyToHost(float* host, const float* src, size_t n) override {
    if (!ok() || n == 0) return;
    if (!Check(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_),
               "CopyToHost")) {
      return;
    }
    Check(cudaStreamSynchronize(stream_), "CopyToHost (synchronise)");
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    if (!ok()) return;
    // Row-major C (m x n) is column-major C^T: C^T = op(B)^T op(A)^T, so
    // cuBLAS gets B first, then A, with the row-major leading dimensions.
    const cublasStatus_t s =
        cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                    n, m, k, &alpha, b, trans_b ? k : n, a, trans_a ? m : k, &beta, c, n);
    if (s != CUBLAS_STATUS_SUCCESS) {
      Fail(std::string("CUDA layer backend: cublasSgemm: ") + CublasName(s));
    }
  }

  void Zero(float* x, size_t n) override {
    if (!ok() || n == 0) return;
    Check(cudaMemsetAsync(x, 0, n * sizeof(float), stream_), "Zero");
  }

  void Im2Col(const float* image, const Window& w, size_t ld, float* col) override {
    if (!ok()) return;
    const size_t n = static_cast<size_t>(w.channels) * w.kernel * w.kernel * OutH(w) * OutW(w);
    if (n == 0) return;
    Launch("Im2Col", Im2ColKernel, Blocks(n), image, w, ld, col);
  }

  void Col2Im(const float* col, const Window& w, size_t ld, float* image) override {
    if (!ok()) return;
    const size_t n = static_cast<size_t>(w.channels) * w.height * w.width;
    if (n == 0) return;
    Launch("Col2Im", Col2ImKernel, Blocks(n), col, w, ld, image);
  }

  void SwapOuterAxes(const float* src, int a, int b, int inner, float* dst) override {
    if (!ok()) return;
    const size_t n = static_cast<size_t>(a) * b * inner;
    if (n == 0) return;
    Launch("SwapOuterAxes", SwapOuterAxesKernel, Blocks(n), src, a, b, inner, dst);
  }

  void AddBias(const float* bias, int outer, int channels, int inner, float* x) override {
    if (!ok()) return;
    const size_t n = static_cast<size_t>(outer) * channels * inner;
    if (n == 0) return;
    Launch("AddBias", AddBiasKernel, Blocks(n), bias, outer, channels, inner, x);
  }

  void BiasGrad(const float* dx, int outer, int channels, int inner, float* dbias) override {
    if (!ok() || channels <= 0) return;
    Launch("BiasGrad", BiasGradKernel, channels, dx, outer, channels, inner, dbias);
  }

  void ReluForward(const float* x, size_t n, float* y) override {
    if (!ok() || n == 0) return;
#if NN_WITH_CUDNN
    // cuDNN's dimensions are ints.
    if (dnn_ != nullptr && n <= static_cast<size_t>(INT_MAX)) {
      const float one = 1.0f, zero = 0.0f;
      if (SetVector(n)) {
        Dnn(cudnnActivationForward(dnn_, relu_, &one, vector_, x, &zero, vector_, y),
            "cudnnActivationForward (ReLU)");
      }
      return;
    }
#endif
    Launch("ReluForward", ReluForwardKernel, Blocks(n), x, n, y);
  }

  void ReluBackward(const float* y, const float* dy, size_t n, float* dx) override {
    if (!ok() || n == 0) return;
#if NN_WITH_CUDNN
    if (dnn_ != nullptr && n <= static_cast<size_t>(INT_MAX)) {
      // ReLU's gradient depends only on the sign of x, which is y's: y
      // stands in for x. dx may be dy (cuDNN allows it in place with one
      // descriptor for both).
      const float one = 1.0f, zero = 0.0f;
      if (SetVector(n)) {
        Dnn(cudnnActivationBackward(dnn_, relu_, &one, vector_, y, vector_, dy, vector_, y, &zero,
                                    vector_, dx),
            "cudnnActivationBackward (ReLU)");
      }
      return;
    }
#endif
    Launch("ReluBackward", ReluBackwardKernel, Blocks(n), y, dy, n, dx);
  }

  void MaxPoolForward(const float* x, int batch, const Window& w, float* y) override {
    if (!ok()) return;
    const size_t planes = static_cast<size_t>(batch) * w.channels;
    const size_t n = planes * OutH(w) * OutW(w);
    if (n == 0) return;
#if NN_WITH_CUDNN
    if (dnn_ != nullptr) {
      if (SetPool(batch, w)) {
        const float one = 1.0f, zero = 0.0f;
        Dnn(cudnnPoolingForward(dnn_, pool_, &one, pool_x_, x, &zero, pool_y_, y),
            "cudnnPoolingForward");
      }
      return;
    }
#endif
    Launch("MaxPoolForward", MaxPoolForwardKernel, Blocks(n), x, planes, w, y);
  }

  void MaxPoolBackward(const float* x, const float* y, const float* dy, int batch, const Window& w,
                       float* dx) override {
    if (!ok()) return;
    const size_t planes = static_cast<size_t>(batch) * w.channels;
    const size_t n = planes * w.height * w.width;
    if (n == 0) return;
#if NN_WITH_CUDNN
    if (dnn_ != nullptr) {
      if (SetPool(batch, w)) {
        const float one = 1.0f, zero = 0.0f;
        Dnn(cudnnPoolingBackward(dnn_, pool_, &one, pool_y_, y, pool_y_, dy, pool_x_, x, &zero,
                                 pool_x_, dx),
            "cudnnPoolingBackward");
      }
      return;
    }
#endif
    Launch("MaxPoolBackward", MaxPoolBackwardKernel, Blocks(n), x, y, dy, planes, w, dx);
  }

#if NN_WITH_CUDNN
  // cuDNN computes the convolution itself (scratch is not used): forward,
  // then the bias added by cudnnAddTensor. Without a usable cuDNN: Backend's
  // im2col + GEMM on scratch.
  void ConvForward(const float* x, int batch, const Window& w, int out_channels,
                   const float* weights, const float* bias, float* y, float* scratch) override {
    if (dnn_ == nullptr) {
      Backend::ConvForward(x, batch, w, out_channels, weights, bias, y, scratch);
      return;
    }
    if (!ok() || batch <= 0 || out_channels <= 0) return;
    ConvPlan* p = Plan(batch, w, out_channels);
    if (p == nullptr || !ChooseForward(*p) || !HaveWorkspace(p->fwd_bytes, "ConvForward")) {
      return;
    }
    const float one = 1.0f, zero = 0.0f;
    if (!Dnn(cudnnConvolutionForward(dnn_, &one, p->x, x, p->filter, weights, p->conv, p->fwd,
                                     workspace_, p->fwd_bytes, &zero, p->y, y),
             "cudnnConvolutionForward")) {
      return;
    }
    Dnn(cudnnAddTensor(dnn_, &one, p->bias, bias, &one, p->y, y),
        "cudnnAddTensor (convolution bias)");
  }

  void ConvBackward(const float* x, const float* dy, int batch, const Window& w, int out_channels,
                    const float* weights, float* dx, float* dweights, float* dbias,
                    float* scratch) override {
    if (dnn_ == nullptr) {
      Backend::ConvBackward(x, dy, batch, w, out_channels, weights, dx, dweights, dbias, scratch);
      return;
    }
    if (!ok() || batch <= 0 || out_channels <= 0) return;
    ConvPlan* p = Plan(batch, w, out_channels);
    if (p == nullptr || !ChooseBackwardFilter(*p) ||
        !HaveWorkspace(p->bwd_filter_bytes, "ConvBackward")) {
      return;
    }
    const float one = 1.0f, zero = 0.0f;
    if (!Dnn(cudnnConvolutionBackwardFilter(dnn_, &one, p->x, x, p->y, dy, p->conv, p->bwd_filter,
                                            workspace_, p->bwd_filter_bytes, &zero, p->filter,
                                            dweights),
             "cudnnConvolutionBackwardFilter") ||
        !Dnn(cudnnConvolutionBackwardBias(dnn_, &one, p->y, dy, &zero, p->bias, dbias),
             "cudnnConvolutionBackwardBias")) {
      return;
    }
    if (dx == nullptr) return;
    if (!ChooseBackwardData(*p) || !HaveWorkspace(p->bwd_data_bytes, "ConvBackward")) {
      return;
    }
    Dnn(cudnnConvolutionBackwardData(dnn_, &one, p->filter, weights, p->y, dy, p->conv, p->bwd_data,
                                     workspace_, p->bwd_data_bytes, &zero, p->x, dx),
        "cudnnConvolutionBackwardData");
  }
#endif

  double SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch, int classes,
                             float scale, float* dlogits) override {
    if (!ok()) return std::nan("");
    if (batch <= 0) return 0;
    for (int b = 0; b < batch; ++b) {
      if (labels[b] < 0 || labels[b] >= classes) {
        Fail("CUDA layer backend: SoftmaxCrossEntropy: label " + std::to_string(labels[b]) +
             " of row " + std::to_string(b) + " is not in [0, " + std::to_string(classes) + ")");
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
    if (!Check(cudaMemcpyAsync(labels_, labels, batch * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream_),
               "SoftmaxCrossEntropy (labels)")) {
      return std::nan("");
    }
    if (!Launch("SoftmaxCrossEntropy", SoftmaxKernel, Blocks(batch), logits, labels_, batch,
                classes, scale, dlogits, losses_)) {
      return std::nan("");
    }
    host_losses_.resize(batch);
    if (!Check(cudaMemcpyAsync(host_losses_.data(), losses_, batch * sizeof(double),
                               cudaMemcpyDeviceToHost, stream_),
               "SoftmaxCrossEntropy (losses)") ||
        !Check(cudaStreamSynchronize(stream_), "SoftmaxCrossEntropy (synchronise)")) {
      return std::nan("");
    }
    double loss = 0;  // in row order, as the host sums
    for (double l : host_losses_) loss += l;
    return loss;
  }

  void GroupNormForward(const float* x, int batch, int channels, int spatial, int groups,
                        const float* gamma, const float* beta, float* y, float* stats) override {
    if (!ok() || batch == 0) return;
    const size_t count = static_cast<size_t>(channels / groups) * spatial;
    if (!Launch("GroupNormForward (statistics)", GroupStatsKernel, batch * groups, x, count,
                stats)) {
      return;
    }
    const size_t total = static_cast<size_t>(batch) * channels * spatial;
    Launch("GroupNormForward", GroupNormForwardKernel, Blocks(total), x, total, channels, spatial,
           groups, gamma, beta, stats, y);
  }

  void GroupNormBackward(const float* x, const float* dy, int batch, int channels, int spatial,
                         int groups, const float* gamma, float* dx, float* dgamma, float* dbeta,
                         float* stats) override {
    if (!ok()) return;
    if (batch == 0) {
      Zero(dgamma, channels);
      Zero(dbeta, channels);
      return;
    }
    const size_t count = static_cast<size_t>(channels / groups) * spatial;
    if (!Launch("GroupNormBackward (statistics)", GroupStatsKernel, batch * groups, x, count,
                stats)) {
      return;
    }
    if (!Launch("GroupNormBackward (parameters)", GroupNormParamGradKernel, channels, x, dy, batch,
                channels, spatial, groups, stats, dgamma, dbeta) ||
        dx == nullptr) {
      return;
    }
    Launch("GroupNormBackward", GroupNormDxKernel, batch * groups, x, dy, channels, spatial, groups,
           gamma, stats, dx);
  }

  void DropoutForward(const float* x, size_t n, float rate, uint64_t seed, float* y) override {
    if (!ok() || n == 0) return;
    Launch("DropoutForward", DropoutKernel, Blocks(n), x, n, DropoutThreshold(rate),
           1.0f / (1.0f - rate), seed, y);
  }
  void DropoutBackward(const float* dy, size_t n, float rate, uint64_t seed, float* dx) override {
    DropoutForward(dy, n, rate, seed, dx);  // the same mask and scale
  }

  void MomentumDelta(const float* grad, const float* weights, size_t n, float lr, float momentum,
                     float weight_decay, float* velocity, float* delta) override {
    if (!ok() || n == 0) return;
    const float* decayed = weight_decay != 0.0f ? weights : nullptr;
    Launch("MomentumDelta", MomentumKernel, Blocks(n), grad, decayed, n, lr, momentum, weight_decay,
           velocity, delta);
  }

 private:
  bool Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    Fail(std::string("CUDA layer backend: ") + what + ": " + cudaGetErrorName(e) + ": " +
         cudaGetErrorString(e));
    return false;
  }
  // Launches `kernel` with `blocks` x kThreads threads on stream_; false,
  // with error(), if this launch failed. Only its own error counts
  // (cuda_launch.h): an older one still latched in cudaGetLastError() is not
  // blamed on it.
  template <typename... Params, typename... Args>
  bool Launch(const char* what, void (*kernel)(Params...), int blocks, Args&&... args) {
    return Check(LaunchKernel(kernel, blocks, kThreads, stream_, std::forward<Args>(args)...),
                 what);
  }

#if NN_WITH_CUDNN
  bool Dnn(cudnnStatus_t s, const char* what) {
    if (s == CUDNN_STATUS_SUCCESS) return true;
    Fail(std::string("CUDA layer backend: ") + what + ": " + cudnnGetErrorString(s));
    return false;
  }

  // n floats as a 1 x 1 x 1 x n tensor (n <= INT_MAX).
  bool SetVector(size_t n) {
    return Dnn(cudnnSetTensor4dDescriptor(vector_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1,
                                          static_cast<int>(n)),
               "cudnnSetTensor4dDescriptor (ReLU)");
  }

  // The pooling descriptor and pool_x_/pool_y_ for max pooling of `batch`
  // images. MAX_DETERMINISTIC: the backward pass gives the same bits every
  // run. NaNs are not propagated, as the host's std::max does not.
  bool SetPool(int batch, const Window& w) {
    if (!Dnn(cudnnSetPooling2dDescriptor(pool_, CUDNN_POOLING_MAX_DETERMINISTIC,
                                         CUDNN_NOT_PROPAGATE_NAN, w.kernel, w.kernel, w.pad, w.pad,
                                         w.stride, w.stride),
             "cudnnSetPooling2dDescriptor") ||
        !Dnn(cudnnSetTensor4dDescriptor(pool_x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch,
                                        w.channels, w.height, w.width),
             "cudnnSetTensor4dDescriptor (pooling input)") ||
        !Dnn(cudnnSetTensor4dDescriptor(pool_y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch,
                                        w.channels, OutH(w), OutW(w)),
             "cudnnSetTensor4dDescriptor (pooling output)")) {
      return false;
    }
    int n = 0, c = 0, h = 0, wd = 0;
    if (!Dnn(cudnnGetPooling2dForwardOutputDim(pool_, pool_x_, &n, &c, &h, &wd),
             "cudnnGetPooling2dForwardOutputDim")) {
      return false;
    }
    if (n != batch || c != w.channels || h != OutH(w) || wd != OutW(w)) {
      Fail("CUDA layer backend: max pooling: cuDNN's output shape " + std::to_string(h) + "x" +
           std::to_string(wd) + " differs from the window's " + std::to_string(OutH(w)) + "x" +
           std::to_string(OutW(w)));
      return false;
    }
    return true;
  }

  // The plan of a convolution shape, made (descriptors only) on first use;
  // null, with error(), if cuDNN rejects the shape.
  ConvPlan* Plan(int batch, const Window& w, int out_channels) {
    const std::array<int, 8> key = {batch,    w.channels, w.height, w.width,
                                    w.kernel, w.stride,   w.pad,    out_channels};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.get();
    auto p = std::make_unique<ConvPlan>();
    const int oh = OutH(w), ow = OutW(w);
    if (!Dnn(cudnnCreateTensorDescriptor(&p->x), "cudnnCreateTensorDescriptor") ||
        !Dnn(cudnnCreateTensorDescriptor(&p->y), "cudnnCreateTensorDescriptor") ||
        !Dnn(cudnnCreateTensorDescriptor(&p->bias), "cudnnCreateTensorDescriptor") ||
        !Dnn(cudnnCreateFilterDescriptor(&p->filter), "cudnnCreateFilterDescriptor") ||
        !Dnn(cudnnCreateConvolutionDescriptor(&p->conv), "cudnnCreateConvolutionDescriptor") ||
        !Dnn(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch,
                                        w.channels, w.height, w.width),
             "cudnnSetTensor4dDescriptor (convolution input)") ||
        !Dnn(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch,
                                        out_channels, oh, ow),
             "cudnnSetTensor4dDescriptor (convolution output)") ||
        !Dnn(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                        out_channels, 1, 1),
             "cudnnSetTensor4dDescriptor (convolution bias)") ||
        // The layers' weights, out_channels x (channels * k * k) row-major,
        // are cuDNN's KCRS filter layout.
        !Dnn(cudnnSetFilter4dDescriptor(p->filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                        out_channels, w.channels, w.kernel, w.kernel),
             "cudnnSetFilter4dDescriptor") ||
        // im2col reads x[iy = y*stride - pad + ky][...] with weight
        // [ky][kx] unflipped: a cross-correlation.
        !Dnn(cudnnSetConvolution2dDescriptor(p->conv, w.pad, w.pad, w.stride, w.stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
             "cudnnSetConvolution2dDescriptor") ||
        // FMA only: no TF32 tensor cores for float data.
        !Dnn(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType")) {
      return nullptr;
    }
    int n = 0, c = 0, h = 0, wd = 0;
    if (!Dnn(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->filter, &n, &c, &h, &wd),
             "cudnnGetConvolution2dForwardOutputDim")) {
      return nullptr;
    }
    if (n != batch || c != out_channels || h != oh || wd != ow) {
      Fail("CUDA layer backend: convolution: cuDNN's output shape " + std::to_string(h) + "x" +
           std::to_string(wd) + " differs from the window's " + std::to_string(oh) + "x" +
           std::to_string(ow));
      return nullptr;
    }
    ConvPlan* raw = p.get();
    plans_.emplace(key, std::move(p));
    return raw;
  }

  // Grows the workspace to at least `bytes`. False when cudaMalloc has no
  // room (that error is cleared: the caller may try a smaller need); other
  // CUDA errors are recorded.
  bool GrowWorkspace(size_t bytes) {
    if (bytes <= workspace_bytes_) return true;
    // cudaFree waits for the device, so no queued call still uses it.
    const cudaError_t freed = cudaFree(workspace_);
    workspace_ = nullptr;
    workspace_bytes_ = 0;
    if (!Check(freed, "cuDNN workspace (cudaFree)")) return false;
    const cudaError_t e = cudaMalloc(&workspace_, bytes);
    if (e == cudaErrorMemoryAllocation) {
      // Handled here: cleared, so that no later check that reads the last
      // error (the application's, after a <<<...>>> launch) takes it for its
      // own. This backend's launches report their own errors only
      // (cuda_launch.h).
      cudaGetLastError();
      workspace_ = nullptr;
      return false;
    }
    if (!Check(e, "cuDNN workspace (cudaMalloc)")) {
      workspace_ = nullptr;
      return false;
    }
    workspace_bytes_ = bytes;
    return true;
  }

  // Before a call that needs `bytes` of workspace (an earlier failed growth
  // may have released it).
  bool HaveWorkspace(size_t bytes, const char* what) {
    if (GrowWorkspace(bytes)) return true;
    Fail(std::string("CUDA layer backend: ") + what + ": no device memory for " +
         std::to_string(bytes) + " bytes of cuDNN workspace");
    return false;
  }

  // The first usable algorithm of cuDNN's heuristic ranking (`heuristic`
  // fills up to `count` results), then `fallback`, whose workspace
  // (`size(algo, &bytes)`) is at most kMaxWorkspaceBytes and can be
  // allocated. False, with error(), when none can.
  template <typename Perf, typename Algo, typename Heuristic, typename Size>
  bool ChooseAlgo(const char* what, int count, Heuristic heuristic, Size size, Algo fallback,
                  Algo* algo, size_t* bytes) {
    std::vector<Perf> perf(count > 0 ? count : 1);
    int returned = 0;
    const cudnnStatus_t hs = heuristic(static_cast<int>(perf.size()), &returned, perf.data());
    std::vector<Algo> candidates;
    if (hs == CUDNN_STATUS_SUCCESS) {
      for (int i = 0; i < returned && i < static_cast<int>(perf.size()); ++i) {
        if (Usable(perf[i])) candidates.push_back(perf[i].algo);
      }
    }
    candidates.push_back(fallback);
    for (Algo a : candidates) {
      size_t need = 0;
      if (size(a, &need) != CUDNN_STATUS_SUCCESS || need > kMaxWorkspaceBytes) {
        continue;
      }
      if (!GrowWorkspace(need)) {
        if (!ok()) return false;
        continue;
      }
      *algo = a;
      *bytes = need;
      return true;
    }
    Fail(std::string("CUDA layer backend: ") + what + ": no usable cuDNN algorithm (heuristics: " +
         cudnnGetErrorString(hs) + "; fallback " + std::to_string(static_cast<int>(fallback)) +
         " unsupported or its workspace does not fit)");
    return false;
  }

  bool ChooseForward(ConvPlan& p) {
    if (p.have_fwd) return true;
    p.have_fwd = ChooseAlgo<cudnnConvolutionFwdAlgoPerf_t>(
        "ConvForward", CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
        [&](int n, int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
          return cudnnGetConvolutionForwardAlgorithm_v7(dnn_, p.x, p.filter, p.conv, p.y, n,
                                                        returned, perf);
        },
        [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(dnn_, p.x, p.filter, p.conv, p.y, a,
                                                         bytes);
        },
        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &p.fwd, &p.fwd_bytes);
    return p.have_fwd;
  }

  bool ChooseBackwardData(ConvPlan& p) {
    if (p.have_bwd_data) return true;
    p.have_bwd_data = ChooseAlgo<cudnnConvolutionBwdDataAlgoPerf_t>(
        "ConvBackward (data)", CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
        [&](int n, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn_, p.filter, p.y, p.conv, p.x, n,
                                                             returned, perf);
        },
        [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(dnn_, p.filter, p.y, p.conv, p.x, a,
                                                              bytes);
        },
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &p.bwd_data, &p.bwd_data_bytes);
    return p.have_bwd_data;
  }

  bool ChooseBackwardFilter(ConvPlan& p) {
    if (p.have_bwd_filter) return true;
    p.have_bwd_filter = ChooseAlgo<cudnnConvolutionBwdFilterAlgoPerf_t>(
        "ConvBackward (filter)", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
        [&](int n, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn_, p.x, p.y, p.conv, p.filter, n,
                                                               returned, perf);
        },
        [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn_, p.x, p.y, p.conv, p.filter, a,
                                                                bytes);
        },
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &p.bwd_filter, &p.bwd_filter_bytes);
    return p.have_bwd_filter;
  }
#endif  // NN_WITH_CUDNN

  cudaStream_t stream_;
  cublasHandle_t blas_;
  int32_t* labels_ = nullptr;  // device: SoftmaxCrossEntropy's labels
  double* losses_ = nullptr;   // device: its per-row losses
  int capacity_ = 0;           // rows of labels_ and losses_
  std::vector<double> host_losses_;
#if NN_WITH_CUDNN
  cudnnHandle_t dnn_ = nullptr;
  cudnnPoolingDescriptor_t pool_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
  cudnnTensorDescriptor_t pool_x_ = nullptr, pool_y_ = nullptr;
  cudnnTensorDescriptor_t vector_ = nullptr;  // ReLU's 1 x 1 x 1 x n
  // One plan per convolution shape seen (a few per layer: the training
  // batch, the evaluation chunk and its remainder).
  std::map<std::array<int, 8>, std::unique_ptr<ConvPlan>> plans_;
  void* workspace_ = nullptr;  // device: cuDNN's workspace, grown on demand
  size_t workspace_bytes_ = 0;
#endif
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
  const LibraryCheck& libraries = CheckLibraries();
  if (!libraries.blas_error.empty()) return fail(libraries.blas_error);
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
  auto backend = std::make_unique<CudaBackend>(cuda_stream, blas);
#if NN_WITH_CUDNN
  if (libraries.dnn_wanted) {
    const std::string why = backend->StartDnn();
    if (!why.empty()) {
      if (libraries.dnn_forced) {
        return fail("cuDNN cannot start (NN_CUDNN=force): " + why);
      }
      static std::once_flag said;
      std::call_once(said, [&why] {
        std::fprintf(stderr,
                     "nn: CUDA layer backend: cuDNN cannot start (%s): NOT "
                     "used; convolution, max pooling and ReLU run on the "
                     "backend's own kernels\n",
                     why.c_str());
      });
    }
  }
#endif
  return backend;
}

}  // namespace nn
