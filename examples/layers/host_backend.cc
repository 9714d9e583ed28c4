// HostBackend: the kernels of backend.h on the CPU. GEMMs go to the CPU
// BLAS (they are nearly all of a network's arithmetic); everything else is a
// plain loop.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend.h"
#include "dropout_mask.h"

namespace nn {
namespace {

// The output columns [lo, hi) whose tap at kernel column kx falls inside
// the image: 0 <= x * stride - pad + kx < width.
struct Span {
  int lo, hi;
};
Span InsideColumns(const Window& w, int kx, int ow) {
  const int first = w.pad - kx;          // x * stride >= first
  const int end = w.width + w.pad - kx;  // x * stride < end
  Span s;
  s.lo = first <= 0 ? 0 : (first + w.stride - 1) / w.stride;
  s.hi = end <= 0 ? 0 : std::min(ow, (end + w.stride - 1) / w.stride);
  if (s.lo > ow) s.lo = ow;
  return s;
}

class HostBackend final : public Backend {
 public:
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, trans_a ? m : k, b,
                trans_b ? k : n, beta, c, n);
  }

  void CopyFromHost(float* dst, const float* host, size_t n) override {
    if (n > 0) std::memcpy(dst, host, n * sizeof(float));
  }
  void CopyToHost(float* host, const float* src, size_t n) override {
    if (n > 0) std::memcpy(host, src, n * sizeof(float));
  }

  void Zero(float* x, size_t n) override { std::memset(x, 0, n * sizeof(float)); }

  void Im2Col(const float* image, const Window& w, size_t ld, float* col) override {
    const int oh = w.out_height(), ow = w.out_width();
    for (int c = 0; c < w.channels; ++c) {
      const float* plane = image + static_cast<size_t>(c) * w.height * w.width;
      for (int ky = 0; ky < w.kernel; ++ky) {
        for (int kx = 0; kx < w.kernel; ++kx) {
          const Span xs = InsideColumns(w, kx, ow);
          for (int y = 0; y < oh; ++y) {
            const int iy = y * w.stride - w.pad + ky;
            float* out = col + static_cast<size_t>(y) * ow;
            if (iy < 0 || iy >= w.height || xs.lo >= xs.hi) {
              std::fill(out, out + ow, 0.0f);
              continue;
            }
            // Taps left and right of the image read 0; the rest are copied
            // without a test per tap (contiguous when the stride is 1).
            std::fill(out, out + xs.lo, 0.0f);
            const float* in = plane + static_cast<size_t>(iy) * w.width + kx - w.pad;
            if (w.stride == 1) {
              std::copy(in + xs.lo, in + xs.hi, out + xs.lo);
            } else {
              for (int x = xs.lo; x < xs.hi; ++x) out[x] = in[x * w.stride];
            }
            std::fill(out + xs.hi, out + ow, 0.0f);
          }
          col += ld;
        }
      }
    }
  }

  void Col2Im(const float* col, const Window& w, size_t ld, float* image) override {
    const int oh = w.out_height(), ow = w.out_width();
    for (int c = 0; c < w.channels; ++c) {
      float* plane = image + static_cast<size_t>(c) * w.height * w.width;
      for (int ky = 0; ky < w.kernel; ++ky) {
        for (int kx = 0; kx < w.kernel; ++kx) {
          const Span xs = InsideColumns(w, kx, ow);
          for (int y = 0; y < oh && xs.lo < xs.hi; ++y) {
            const int iy = y * w.stride - w.pad + ky;
            if (iy < 0 || iy >= w.height) continue;
            const float* in = col + static_cast<size_t>(y) * ow;
            float* out = plane + static_cast<size_t>(iy) * w.width + kx - w.pad;
            if (w.stride == 1) {
              for (int x = xs.lo; x < xs.hi; ++x) out[x] += in[x];
            } else {
              for (int x = xs.lo; x < xs.hi; ++x) out[x * w.stride] += in[x];
            }
          }
          col += ld;
        }
      }
    }
  }

  void SwapOuterAxes(const float* src, int a, int b, int inner, float* dst) override {
    for (int i = 0; i < a; ++i) {
      for (int j = 0; j < b; ++j) {
        const float* from = src + (static_cast<size_t>(i) * b + j) * inner;
        std::copy(from, from + inner, dst + (static_cast<size_t>(j) * a + i) * inner);
      }
    }
  }

  void AddBias(const float* bias, int outer, int channels, int inner, float* x) override {
    for (int o = 0; o < outer; ++o) {
      for (int c = 0; c < channels; ++c) {
        const float b = bias[c];
        float* row = x + (static_cast<size_t>(o) * channels + c) * inner;
        for (int i = 0; i < inner; ++i) row[i] += b;
      }
    }
  }

  void BiasGrad(const float* dx, int outer, int channels, int inner, float* dbias) override {
    std::fill(dbias, dbias + channels, 0.0f);
    for (int o = 0; o < outer; ++o) {
      for (int c = 0; c < channels; ++c) {
        const float* row = dx + (static_cast<size_t>(o) * channels + c) * inner;
        float sum = 0;
        for (int i = 0; i < inner; ++i) sum += row[i];
        dbias[c] += sum;
      }
    }
  }

  void ReluForward(const float* x, size_t n, float* y) override {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
  }

  void ReluBackward(const float* y, const float* dy, size_t n, float* dx) override {
    for (size_t i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
  }

  void DropoutForward(const float* x, size_t n, float rate, uint64_t seed, float* y) override {
    const uint32_t threshold = DropoutThreshold(rate);
    const float scale = 1.0f / (1.0f - rate);
    for (size_t i = 0; i < n; ++i) {
      y[i] = DropoutKeeps(seed, i, threshold) ? x[i] * scale : 0.0f;
    }
  }
  void DropoutBackward(const float* dy, size_t n, float rate, uint64_t seed, float* dx) override {
    DropoutForward(dy, n, rate, seed, dx);  // the same mask and scale
  }

  void MaxPoolForward(const float* x, int batch, const Window& w, float* y) override {
    const int oh = w.out_height(), ow = w.out_width();
    const size_t planes = static_cast<size_t>(batch) * w.channels;
    constexpr float kLow = -std::numeric_limits<float>::infinity();
    for (size_t p = 0; p < planes; ++p) {
      const float* in = x + p * w.height * w.width;
      float* out = y + p * oh * ow;
      if (w.kernel == 2 && w.stride == 2) {  // the examples' pooling
        for (int oy = 0; oy < oh; ++oy) {
          const float* r0 = in + 2 * oy * w.width;
          const float* r1 = r0 + w.width;
          float* o = out + oy * ow;
          for (int ox = 0; ox < ow; ++ox) {
            // The same order of comparisons as the general loop below.
            o[ox] =
                std::max(std::max(std::max(std::max(kLow, r0[2 * ox]), r0[2 * ox + 1]), r1[2 * ox]),
                         r1[2 * ox + 1]);
          }
        }
        continue;
      }
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          float best = kLow;
          for (int ky = 0; ky < w.kernel; ++ky) {
            const float* r = in + (oy * w.stride + ky) * w.width + ox * w.stride;
            for (int kx = 0; kx < w.kernel; ++kx) best = std::max(best, r[kx]);
          }
          out[oy * ow + ox] = best;
        }
      }
    }
  }

  void MaxPoolBackward(const float* x, const float* y, const float* dy, int batch, const Window& w,
                       float* dx) override {
    const int oh = w.out_height(), ow = w.out_width();
    const size_t planes = static_cast<size_t>(batch) * w.channels;
    std::fill(dx, dx + planes * w.height * w.width, 0.0f);
    for (size_t p = 0; p < planes; ++p) {
      const float* in = x + p * w.height * w.width;
      float* din = dx + p * w.height * w.width;
      const float* out = y + p * oh * ow;
      const float* dout = dy + p * oh * ow;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const float best = out[oy * ow + ox];
          bool routed = false;
          for (int ky = 0; ky < w.kernel && !routed; ++ky) {
            const int base = (oy * w.stride + ky) * w.width + ox * w.stride;
            for (int kx = 0; kx < w.kernel; ++kx) {
              if (in[base + kx] == best) {
                din[base + kx] += dout[oy * ow + ox];
                routed = true;
                break;
              }
            }
          }
        }
      }
    }
  }

  double SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch, int classes,
                             float scale, float* dlogits) override {
    double loss = 0;
    for (int b = 0; b < batch; ++b) {
      const float* z = logits + static_cast<size_t>(b) * classes;
      const float top = *std::max_element(z, z + classes);
      double sum = 0;
      for (int k = 0; k < classes; ++k) sum += std::exp(double{z[k]} - top);
      const double log_sum = std::log(sum) + top;
      loss += log_sum - z[labels[b]];
      if (dlogits == nullptr) continue;
      float* d = dlogits + static_cast<size_t>(b) * classes;
      for (int k = 0; k < classes; ++k) {
        const double p = std::exp(double{z[k]} - log_sum);
        d[k] = scale * static_cast<float>(p - (k == labels[b] ? 1.0 : 0.0));
      }
    }
    return loss;
  }

  void MomentumDelta(const float* grad, const float* weights, size_t n, float lr, float momentum,
                     float weight_decay, float* velocity, float* delta) override {
    const bool decay = weight_decay != 0.0f && weights != nullptr;
    for (size_t i = 0; i < n; ++i) {
      float g = grad[i];
      if (decay) g += weight_decay * weights[i];
      velocity[i] = momentum * velocity[i] + g;
      delta[i] = -lr * velocity[i];
    }
  }
};

}  // namespace

std::unique_ptr<Backend> MakeHostBackend() { return std::make_unique<HostBackend>(); }

void SetHostBlasThreads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}

}  // namespace nn
