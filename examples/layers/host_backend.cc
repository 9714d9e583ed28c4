// HostBackend: the kernels of backend.h on the CPU. GEMMs go to the CPU
// BLAS (they are nearly all of a network's arithmetic); everything else is a
// plain loop.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
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

// stats[2 * (b * groups + g)] = the mean of image b's group g, and the next
// float 1 / sqrt(variance + kGroupNormEpsilon) (two passes, in double).
void GroupStats(const float* x, int batch, int channels, int spatial, int groups, float* stats) {
  const size_t count = static_cast<size_t>(channels / groups) * spatial;
  for (size_t bg = 0; bg < static_cast<size_t>(batch) * groups; ++bg) {
    const float* v = x + bg * count;  // a group's channels are consecutive planes
    double sum = 0;
    for (size_t i = 0; i < count; ++i) sum += v[i];
    const double mean = sum / static_cast<double>(count);
    double squares = 0;
    for (size_t i = 0; i < count; ++i) squares += (v[i] - mean) * (v[i] - mean);
    stats[2 * bg] = static_cast<float>(mean);
    stats[2 * bg + 1] = static_cast<float>(
        1.0 / std::sqrt(squares / static_cast<double>(count) + kGroupNormEpsilon));
  }
}

// Im2Col for stride 1 when an output row is as long as an image row
// (2 * pad == kernel - 1, "same" padding): the row of tap (ky, kx) is then
// the whole image plane shifted by (ky - pad) rows and (kx - pad) columns, so
// it is one contiguous copy (the per-row spans are only ~14-28 floats, and
// their many small copies cost more than the GEMM's packing). The copy's
// ends clip at the plane's edges; the taps that fall left or right of the
// image wrap around to the neighbouring row in that copy and are set to 0
// afterwards, as are the rows above or below the image (whose kept taps
// are exactly those wrapped ones).
void SamePaddingIm2Col(const float* image, const Window& w, size_t ld, float* col) {
  const ptrdiff_t width = w.width;
  const ptrdiff_t plane_size = static_cast<ptrdiff_t>(w.height) * width;
  for (int c = 0; c < w.channels; ++c) {
    const float* plane = image + c * plane_size;
    for (int ky = 0; ky < w.kernel; ++ky) {
      for (int kx = 0; kx < w.kernel; ++kx) {
        const ptrdiff_t dx = kx - w.pad;
        const ptrdiff_t shift = (ky - w.pad) * width + dx;  // out[o] = plane[o + shift]
        const ptrdiff_t lo = std::clamp<ptrdiff_t>(-shift, 0, plane_size);
        const ptrdiff_t hi = std::clamp<ptrdiff_t>(plane_size - shift, lo, plane_size);
        std::fill(col, col + lo, 0.0f);
        std::copy(plane + lo + shift, plane + hi + shift, col + lo);
        std::fill(col + hi, col + plane_size, 0.0f);
        // Columns x with x + dx outside [0, width): 0 on every row.
        const ptrdiff_t zero_lo = dx < 0 ? 0 : std::max<ptrdiff_t>(0, width - dx);
        const ptrdiff_t zero_hi = dx < 0 ? std::min(width, -dx) : width;
        // (Column by column: one or two floats per row, where a fill per row
        // would be a library call each.)
        for (ptrdiff_t x = zero_lo; x < zero_hi; ++x) {
          for (ptrdiff_t row = 0; row < plane_size; row += width) col[row + x] = 0.0f;
        }
        col += ld;
      }
    }
  }
}

// One image's convolution sizes: hw outputs per channel, k taps per output
// (channels x kernel^2), in_size and out_size floats per input and output
// image.
struct ImageConv {
  ImageConv(const Window& w, int out_channels)
      : hw(w.out_height() * w.out_width()),
        k(w.channels * w.kernel * w.kernel),
        in_size(static_cast<size_t>(w.channels) * w.height * w.width),
        out_size(static_cast<size_t>(out_channels) * hw) {}
  int hw, k;
  size_t in_size, out_size;
};

class HostBackend final : public Backend {
 public:
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, trans_a ? m : k, b,
                trans_b ? k : n, beta, c, n);
  }

  // Image by image, where the default puts the batch's im2col matrices
  // side by side for one large GEMM: one image's matrix (k x hw, 28-113 KiB
  // for the example CNN) stays in the core's cache from im2col to GEMM, the
  // GEMM writes y's NCHW planes in place over the bias (no SwapOuterAxes,
  // no separate bias pass, no zeroing of C), and the backward pass reads
  // dy's planes where they are. The example CNN's epoch on 2 cores took
  // 26% less time than with the default (docs/examples.md).
  void ConvForward(const float* x, int batch, const Window& w, int out_channels,
                   const float* weights, const float* bias, float* y, float* scratch) override {
    const ImageConv z(w, out_channels);
    const int co = out_channels, hw = z.hw, k = z.k;
    float* cols = scratch;  // k x hw
    for (int b = 0; b < batch; ++b) {
      float* yb = y + b * z.out_size;
      Im2Col(x + b * z.in_size, w, hw, cols);
      for (int c = 0; c < co; ++c) std::fill(yb + c * hw, yb + (c + 1) * hw, bias[c]);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, co, hw, k, 1.0f, weights, k, cols, hw,
                  1.0f, yb, hw);
    }
  }

  void ConvBackward(const float* x, const float* dy, int batch, const Window& w, int out_channels,
                    const float* weights, float* dx, float* dweights, float* dbias,
                    float* scratch) override {
    const ImageConv z(w, out_channels);
    const int co = out_channels, hw = z.hw, k = z.k;
    float* cols = scratch;                                 // k x hw
    float* dcols = scratch + static_cast<size_t>(k) * hw;  // k x hw
    BiasGrad(dy, batch, co, hw, dbias);
    for (int b = 0; b < batch; ++b) {
      const float* dyb = dy + b * z.out_size;
      Im2Col(x + b * z.in_size, w, hw, cols);
      // dW (co x k) (+)= dy_b (co x hw) * cols^T (hw x k).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, co, k, hw, 1.0f, dyb, hw, cols, hw,
                  b == 0 ? 0.0f : 1.0f, dweights, k);
      if (dx == nullptr) continue;
      // dcols (k x hw) = W^T (k x co) * dy_b (co x hw), then into the image.
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, hw, co, 1.0f, weights, k, dyb, hw,
                  0.0f, dcols, hw);
      float* dxb = dx + b * z.in_size;
      std::fill(dxb, dxb + z.in_size, 0.0f);
      Col2Im(dcols, w, hw, dxb);
    }
    if (batch == 0) std::fill(dweights, dweights + static_cast<size_t>(co) * k, 0.0f);
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
    if (w.stride == 1 && ow == w.width) {
      SamePaddingIm2Col(image, w, ld, col);
      return;
    }
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

  void GroupNormForward(const float* x, int batch, int channels, int spatial, int groups,
                        const float* gamma, const float* beta, float* y, float* stats) override {
    const int per_group = channels / groups;
    GroupStats(x, batch, channels, spatial, groups, stats);
    for (int b = 0; b < batch; ++b) {
      for (int c = 0; c < channels; ++c) {
        const float* st = stats + 2 * (static_cast<size_t>(b) * groups + c / per_group);
        const float scale = gamma[c] * st[1];
        const float shift = beta[c] - st[0] * scale;
        const size_t plane = (static_cast<size_t>(b) * channels + c) * spatial;
        for (int i = 0; i < spatial; ++i) y[plane + i] = x[plane + i] * scale + shift;
      }
    }
  }

  void GroupNormBackward(const float* x, const float* dy, int batch, int channels, int spatial,
                         int groups, const float* gamma, float* dx, float* dgamma, float* dbeta,
                         float* stats) override {
    const int per_group = channels / groups;
    GroupStats(x, batch, channels, spatial, groups, stats);
    std::fill(dgamma, dgamma + channels, 0.0f);
    std::fill(dbeta, dbeta + channels, 0.0f);
    for (int b = 0; b < batch; ++b) {
      for (int g = 0; g < groups; ++g) {
        const float mean = stats[2 * (static_cast<size_t>(b) * groups + g)];
        const float rstd = stats[2 * (static_cast<size_t>(b) * groups + g) + 1];
        // Sums over the group of dy * gamma and of dy * gamma * xhat.
        double sum_g = 0, sum_gx = 0;
        for (int c = g * per_group; c < (g + 1) * per_group; ++c) {
          const size_t plane = (static_cast<size_t>(b) * channels + c) * spatial;
          double dgamma_c = 0, dbeta_c = 0;
          for (int i = 0; i < spatial; ++i) {
            const double xhat = (double{x[plane + i]} - mean) * rstd;
            dgamma_c += dy[plane + i] * xhat;
            dbeta_c += dy[plane + i];
          }
          dgamma[c] += static_cast<float>(dgamma_c);
          dbeta[c] += static_cast<float>(dbeta_c);
          sum_g += gamma[c] * dbeta_c;
          sum_gx += gamma[c] * dgamma_c;
        }
        if (dx == nullptr) continue;
        const double count = static_cast<double>(per_group) * spatial;
        const double mean_g = sum_g / count, mean_gx = sum_gx / count;
        for (int c = g * per_group; c < (g + 1) * per_group; ++c) {
          const size_t plane = (static_cast<size_t>(b) * channels + c) * spatial;
          for (int i = 0; i < spatial; ++i) {
            const double xhat = (double{x[plane + i]} - mean) * rstd;
            dx[plane + i] =
                static_cast<float>(rstd * (dy[plane + i] * gamma[c] - mean_g - xhat * mean_gx));
          }
        }
      }
    }
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
