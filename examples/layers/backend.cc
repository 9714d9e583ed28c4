// Backend's default convolution: im2col + GEMM through the backend's own
// kernels (the code Conv2D used to hold). The CUDA backend without cuDNN
// uses it; the host backend has its own (host_backend.cc).
#include "backend.h"

namespace nn {

namespace {

// The sizes of a batched convolution: hw outputs per image and channel, k
// taps per output (channels x kernel^2), n = batch x hw columns of the
// side-by-side im2col matrix, in_size floats per input image.
struct ConvSizes {
  ConvSizes(int batch, const Window& w)
      : hw(w.out_height() * w.out_width()),
        k(w.channels * w.kernel * w.kernel),
        n(static_cast<size_t>(batch) * hw),
        in_size(static_cast<size_t>(w.channels) * w.height * w.width) {}
  int hw, k;
  size_t n, in_size;
};

// The images' im2col matrices side by side in `cols` (k x n).
void BatchIm2Col(Backend& be, const float* x, int batch, const Window& w, const ConvSizes& z,
                 float* cols) {
  for (int b = 0; b < batch; ++b) {
    be.Im2Col(x + b * z.in_size, w, z.n, cols + static_cast<size_t>(b) * z.hw);
  }
}

}  // namespace

size_t ConvScratchFloats(int batch, const Window& w, int out_channels) {
  const size_t k = static_cast<size_t>(w.channels) * w.kernel * w.kernel;
  const size_t n = static_cast<size_t>(batch) * w.out_height() * w.out_width();
  return (2 * k + out_channels) * n;
}

// The whole batch in one GEMM: the images' im2col matrices side by side
// (k x batch*hw), so that the GEMM is large enough for the BLAS to be
// efficient; the result is channel-major and swapped back to NCHW.
void Backend::ConvForward(const float* x, int batch, const Window& w, int out_channels,
                          const float* weights, const float* bias, float* y, float* scratch) {
  const int co = out_channels;
  const ConvSizes z(batch, w);
  const int hw = z.hw, k = z.k;
  const size_t n = z.n;
  float* cols = scratch;
  float* out_cm = scratch + 2 * k * n;  // co x batch x hw
  BatchIm2Col(*this, x, batch, w, z, cols);
  Gemm(false, false, co, static_cast<int>(n), k, 1.0f, weights, cols, 0.0f, out_cm);
  SwapOuterAxes(out_cm, co, batch, hw, y);
  AddBias(bias, batch, co, hw, y);
}

void Backend::ConvBackward(const float* x, const float* dy, int batch, const Window& w,
                           int out_channels, const float* weights, float* dx, float* dweights,
                           float* dbias, float* scratch) {
  const int co = out_channels;
  const ConvSizes z(batch, w);
  const int hw = z.hw, k = z.k;
  const size_t n = z.n, in_size = z.in_size;
  float* cols = scratch;
  float* dcols = scratch + k * n;
  float* dy_cm = scratch + 2 * k * n;  // co x batch x hw
  SwapOuterAxes(dy, batch, co, hw, dy_cm);
  BatchIm2Col(*this, x, batch, w, z, cols);
  // dW (co x k) = dy (co x n) * cols^T (n x k).
  Gemm(false, true, co, k, static_cast<int>(n), 1.0f, dy_cm, cols, 0.0f, dweights);
  BiasGrad(dy, batch, co, hw, dbias);
  if (dx == nullptr) return;
  // dcols (k x n) = W^T (k x co) * dy (co x n), then back to the images.
  Gemm(true, false, k, static_cast<int>(n), co, 1.0f, weights, dy_cm, 0.0f, dcols);
  Zero(dx, batch * in_size);
  for (int b = 0; b < batch; ++b) {
    Col2Im(dcols + static_cast<size_t>(b) * hw, w, n, dx + b * in_size);
  }
}

}  // namespace nn
