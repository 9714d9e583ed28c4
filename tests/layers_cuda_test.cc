// The CUDA layer backend (examples/layers/cuda_backend.cu) against the host
// backend: every kernel, the convolution calls, and every layer's forward
// and backward pass, on random inputs, to 1e-4 relative. Where the backend
// was built with cuDNN (NN_WITH_CUDNN, set by tests/CMakeLists.txt as for
// the library), convolution, max pooling and ReLU are cuDNN's. Skipped, with
// the reason, where no GPU is visible (scripts/gpu-check.sh fails when it
// skips on a GPU machine).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "layers.h"

#ifndef NN_WITH_CUDNN
#define NN_WITH_CUDNN 0
#endif

namespace nn {
namespace {

constexpr bool kWithCudnn = NN_WITH_CUDNN;

// A device copy of a host vector.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<float>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n_, 1) * sizeof(float)), cudaSuccess);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(float), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() { return p_; }
  std::vector<float> Host() const {
    std::vector<float> out(n_);
    cudaDeviceSynchronize();
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(out.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return out;
  }

 private:
  float* p_ = nullptr;
  size_t n_;
};

void ExpectClose(const std::vector<float>& want, const std::vector<float>& got,
                 const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = 1e-4 * std::max(1.0, std::fabs(double{want[i]}));
    ASSERT_NEAR(want[i], got[i], tol) << what << " at " << i;
  }
}

// For sums of `terms` products (weight and bias gradients): the tolerance
// grows with the number of terms, as the order of summation differs.
void ExpectSumsClose(const std::vector<float>& want, const std::vector<float>& got, size_t terms,
                     const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const double scale = std::max(1.0, std::sqrt(static_cast<double>(terms)));
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = 1e-4 * std::max(scale, std::fabs(double{want[i]}));
    ASSERT_NEAR(want[i], got[i], tol) << what << " at " << i;
  }
}

// What any max-pool backward pass must satisfy, whichever of tied maxima it
// routes to: dx is 0 except at inputs equal to the maximum of a window that
// holds them; each plane's dx sums to its dy; and where windows do not
// overlap, each window's dx sums to its output's dy.
void ExpectValidPoolGradient(const std::vector<float>& x, const std::vector<float>& y,
                             const std::vector<float>& dy, const std::vector<float>& dx, int batch,
                             const Window& w) {
  const int oh = w.out_height(), ow = w.out_width();
  const size_t plane_in = static_cast<size_t>(w.height) * w.width;
  const size_t plane_out = static_cast<size_t>(oh) * ow;
  for (size_t p = 0; p < static_cast<size_t>(batch) * w.channels; ++p) {
    const float* in = x.data() + p * plane_in;
    const float* din = dx.data() + p * plane_in;
    const float* out = y.data() + p * plane_out;
    const float* dout = dy.data() + p * plane_out;
    double sum_dx = 0, sum_dy = 0;
    for (size_t i = 0; i < plane_in; ++i) sum_dx += din[i];
    for (size_t o = 0; o < plane_out; ++o) sum_dy += dout[o];
    EXPECT_NEAR(sum_dx, sum_dy, 1e-4 * std::max(1.0, std::fabs(sum_dy))) << "plane " << p;
    for (int iy = 0; iy < w.height; ++iy) {
      for (int ix = 0; ix < w.width; ++ix) {
        const float g = din[iy * w.width + ix];
        if (g == 0.0f) continue;
        bool is_a_max = false;
        for (int oy = 0; oy < oh && !is_a_max; ++oy) {
          for (int ox = 0; ox < ow; ++ox) {
            if (iy >= oy * w.stride && iy < oy * w.stride + w.kernel && ix >= ox * w.stride &&
                ix < ox * w.stride + w.kernel && in[iy * w.width + ix] == out[oy * ow + ox]) {
              is_a_max = true;
              break;
            }
          }
        }
        EXPECT_TRUE(is_a_max) << "plane " << p << ": gradient " << g << " at (" << iy << ", " << ix
                              << "), which is no window's maximum";
      }
    }
    if (w.stride < w.kernel) continue;  // windows overlap
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox) {
        double sum = 0;
        for (int ky = 0; ky < w.kernel; ++ky) {
          for (int kx = 0; kx < w.kernel; ++kx) {
            sum += din[(oy * w.stride + ky) * w.width + ox * w.stride + kx];
          }
        }
        EXPECT_NEAR(sum, dout[oy * ow + ox], 1e-5)
            << "plane " << p << " window (" << oy << ", " << ox << ")";
      }
    }
  }
}

class LayersCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();
      std::string why;
      ASSERT_EQ(MakeCudaBackend(nullptr, &why), nullptr);
      GTEST_SKIP() << why;
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    std::string why;
    cuda_ = MakeCudaBackend(stream_, &why);
    ASSERT_NE(cuda_, nullptr) << why;
    host_ = MakeHostBackend();
  }
  void TearDown() override {
    cuda_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  std::vector<float> Random(size_t n, int levels = 0) {
    std::vector<float> v(n);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> level(0, std::max(levels - 1, 0));
    for (float& x : v) x = levels > 0 ? static_cast<float>(level(rng_)) : normal(rng_);
    return v;
  }
  void Done() {
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_TRUE(cuda_->ok()) << cuda_->error();
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Backend> cuda_, host_;
  std::mt19937_64 rng_{42};
};

TEST_F(LayersCudaTest, CopiesAndZero) {
  std::vector<float> x = Random(1000), back(1000);
  DeviceBuffer d(std::vector<float>(1000, 7.0f));
  cuda_->CopyFromHost(d.get(), x.data(), x.size());
  cuda_->CopyToHost(back.data(), d.get(), back.size());
  Done();
  EXPECT_EQ(x, back);
  cuda_->Zero(d.get(), 500);
  Done();
  std::vector<float> want = x;
  std::fill(want.begin(), want.begin() + 500, 0.0f);
  EXPECT_EQ(d.Host(), want);
}

TEST_F(LayersCudaTest, Gemm) {
  const int m = 13, n = 7, k = 29;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> a = Random(m * k), b = Random(k * n), c = Random(m * n);
      DeviceBuffer da(a), db(b), dc(c);
      host_->Gemm(ta, tb, m, n, k, 0.7f, a.data(), b.data(), 0.3f, c.data());
      cuda_->Gemm(ta, tb, m, n, k, 0.7f, da.get(), db.get(), 0.3f, dc.get());
      Done();
      ExpectClose(c, dc.Host(),
                  "Gemm trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
    }
  }
}

const Window kWindows[] = {
    {3, 7, 6, 3, 2, 1},  // strided, padded, not square
    {2, 5, 5, 3, 1, 1},
    {4, 6, 6, 2, 2, 0},
};

TEST_F(LayersCudaTest, Im2ColAndCol2Im) {
  for (const Window& w : kWindows) {
    const size_t rows = static_cast<size_t>(w.channels) * w.kernel * w.kernel;
    const size_t cols = static_cast<size_t>(w.out_height()) * w.out_width();
    const size_t ld = cols + 5;  // gaps between rows stay untouched
    const size_t pixels = static_cast<size_t>(w.channels) * w.height * w.width;
    std::vector<float> image = Random(pixels), col = Random(rows * ld);
    DeviceBuffer dimage(image), dcol(col);
    host_->Im2Col(image.data(), w, ld, col.data());
    cuda_->Im2Col(dimage.get(), w, ld, dcol.get());
    Done();
    ExpectClose(col, dcol.Host(), "Im2Col");

    std::vector<float> col2 = Random(rows * ld), acc = Random(pixels);
    DeviceBuffer dcol2(col2), dacc(acc);
    host_->Col2Im(col2.data(), w, ld, acc.data());
    cuda_->Col2Im(dcol2.get(), w, ld, dacc.get());
    Done();
    ExpectClose(acc, dacc.Host(), "Col2Im");
  }
}

TEST_F(LayersCudaTest, SwapAddBiasBiasGrad) {
  const int a = 5, b = 3, inner = 17;
  std::vector<float> src = Random(a * b * inner), dst = Random(a * b * inner);
  DeviceBuffer dsrc(src), ddst(dst);
  host_->SwapOuterAxes(src.data(), a, b, inner, dst.data());
  cuda_->SwapOuterAxes(dsrc.get(), a, b, inner, ddst.get());
  Done();
  ExpectClose(dst, ddst.Host(), "SwapOuterAxes");

  for (int inner2 : {1, 300}) {
    const int outer = 9, channels = 6;
    std::vector<float> bias = Random(channels), x = Random(outer * channels * inner2);
    DeviceBuffer dbias(bias), dx(x);
    host_->AddBias(bias.data(), outer, channels, inner2, x.data());
    cuda_->AddBias(dbias.get(), outer, channels, inner2, dx.get());
    Done();
    ExpectClose(x, dx.Host(), "AddBias");

    std::vector<float> g = Random(channels);
    DeviceBuffer dg(g);
    host_->BiasGrad(x.data(), outer, channels, inner2, g.data());
    cuda_->BiasGrad(dx.get(), outer, channels, inner2, dg.get());
    Done();
    std::vector<float> got = dg.Host();
    for (int c = 0; c < channels; ++c) {  // sums: relative to the magnitude
      EXPECT_NEAR(g[c], got[c], 1e-4 * std::max(1.0f, std::sqrt(float(outer * inner2))))
          << "BiasGrad channel " << c;
    }
  }
}

TEST_F(LayersCudaTest, Relu) {
  const size_t n = 5000;
  std::vector<float> x = Random(n), y(n), dy = Random(n), dx(n);
  DeviceBuffer dxin(x), dyout(y), ddy(dy), ddx(dx);
  host_->ReluForward(x.data(), n, y.data());
  cuda_->ReluForward(dxin.get(), n, dyout.get());
  host_->ReluBackward(y.data(), dy.data(), n, dx.data());
  cuda_->ReluBackward(dyout.get(), ddy.get(), n, ddx.get());
  Done();
  ExpectClose(y, dyout.Host(), "ReluForward");
  ExpectClose(dx, ddx.Host(), "ReluBackward");

  // In place (backend.h allows it): y over x, dx over dy.
  DeviceBuffer dinplace(x), dgrad(dy);
  cuda_->ReluForward(dinplace.get(), n, dinplace.get());
  cuda_->ReluBackward(dinplace.get(), dgrad.get(), n, dgrad.get());
  Done();
  ExpectClose(y, dinplace.Host(), "ReluForward in place");
  ExpectClose(dx, dgrad.Host(), "ReluBackward in place");
}

// The same mask as the host backend (dropout_mask.h is shared code), at
// rates 0 (a copy) and 0.5, forward and backward, also in place.
TEST_F(LayersCudaTest, Dropout) {
  const size_t n = 5000;
  for (float rate : {0.0f, 0.5f}) {
    std::vector<float> x = Random(n), y(n), dy = Random(n), dx(n);
    DeviceBuffer dxin(x), dyout(y), ddy(dy), ddx(dx), dinplace(x);
    host_->DropoutForward(x.data(), n, rate, 77, y.data());
    cuda_->DropoutForward(dxin.get(), n, rate, 77, dyout.get());
    host_->DropoutBackward(dy.data(), n, rate, 77, dx.data());
    cuda_->DropoutBackward(ddy.get(), n, rate, 77, ddx.get());
    cuda_->DropoutForward(dinplace.get(), n, rate, 77, dinplace.get());
    Done();
    const std::vector<float> got = dyout.Host(), got_dx = ddx.Host();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i] == 0.0f, y[i] == 0.0f) << "rate " << rate << " mask at " << i;
      ASSERT_EQ(got_dx[i] == 0.0f, dx[i] == 0.0f) << "rate " << rate << " mask at " << i;
    }
    ExpectClose(y, got, "DropoutForward");
    ExpectClose(dx, got_dx, "DropoutBackward");
    ExpectClose(y, dinplace.Host(), "DropoutForward in place");
  }
}

// Group normalisation against the host: groups of one channel, of all
// channels and between, planes wider than a block (the kernels' strided
// loops), one image.
TEST_F(LayersCudaTest, GroupNorm) {
  struct Case {
    int batch, channels, spatial, groups;
  };
  for (const Case& k :
       {Case{3, 8, 300, 4}, Case{2, 6, 1, 6}, Case{5, 4, 49, 1}, Case{1, 16, 9, 8}}) {
    SCOPED_TRACE(::testing::Message()
                 << k.batch << "x" << k.channels << "x" << k.spatial << " / " << k.groups);
    const size_t n = static_cast<size_t>(k.batch) * k.channels * k.spatial;
    std::vector<float> x = Random(n), gamma = Random(k.channels), beta = Random(k.channels),
                       dy = Random(n), y(n), dx(n), dgamma(k.channels), dbeta(k.channels),
                       stats(2 * k.batch * k.groups);
    for (float& v : x) v = 3.0f * v + 2.0f;
    DeviceBuffer dxin(x), dg(gamma), db(beta), ddy(dy), dyout(y), ddx(dx), ddg(dgamma), ddb(dbeta),
        dstats(stats);
    host_->GroupNormForward(x.data(), k.batch, k.channels, k.spatial, k.groups, gamma.data(),
                            beta.data(), y.data(), stats.data());
    cuda_->GroupNormForward(dxin.get(), k.batch, k.channels, k.spatial, k.groups, dg.get(),
                            db.get(), dyout.get(), dstats.get());
    host_->GroupNormBackward(x.data(), dy.data(), k.batch, k.channels, k.spatial, k.groups,
                             gamma.data(), dx.data(), dgamma.data(), dbeta.data(), stats.data());
    cuda_->GroupNormBackward(dxin.get(), ddy.get(), k.batch, k.channels, k.spatial, k.groups,
                             dg.get(), ddx.get(), ddg.get(), ddb.get(), dstats.get());
    Done();
    ExpectClose(y, dyout.Host(), "GroupNormForward");
    ExpectClose(dx, ddx.Host(), "GroupNormBackward dx");
    const size_t terms = static_cast<size_t>(k.batch) * k.spatial;
    ExpectSumsClose(dgamma, ddg.Host(), terms, "GroupNormBackward dgamma");
    ExpectSumsClose(dbeta, ddb.Host(), terms, "GroupNormBackward dbeta");
  }
}

const Window kPoolWindows[] = {
    {3, 8, 8, 2, 2, 0}, {2, 7, 9, 3, 1, 0}, {2, 9, 7, 3, 2, 0}, {4, 12, 10, 2, 2, 0}};

// Distinct random values: one maximum per window, so every backend routes
// each gradient to the same input.
TEST_F(LayersCudaTest, MaxPool) {
  for (const Window& w : kPoolWindows) {
    SCOPED_TRACE("window " + std::to_string(w.kernel) + " stride " + std::to_string(w.stride) +
                 " on " + std::to_string(w.height) + "x" + std::to_string(w.width));
    const int batch = 3;
    const size_t in = static_cast<size_t>(batch) * w.channels * w.height * w.width;
    const size_t out = static_cast<size_t>(batch) * w.channels * w.out_height() * w.out_width();
    std::vector<float> x = Random(in), y(out), dy = Random(out), dx = Random(in);
    DeviceBuffer dxin(x), dyout(Random(out)), ddy(dy), ddx(dx);
    host_->MaxPoolForward(x.data(), batch, w, y.data());
    cuda_->MaxPoolForward(dxin.get(), batch, w, dyout.get());
    host_->MaxPoolBackward(x.data(), y.data(), dy.data(), batch, w, dx.data());
    cuda_->MaxPoolBackward(dxin.get(), dyout.get(), ddy.get(), batch, w, ddx.get());
    Done();
    ExpectClose(y, dyout.Host(), "MaxPoolForward");
    ExpectClose(dx, ddx.Host(), "MaxPoolBackward");
  }
}

// Few distinct values: many ties. The CUDA kernels route to the first
// maximum, like the host; cuDNN breaks ties its own way, so with it only
// what any max-pool gradient satisfies is checked.
TEST_F(LayersCudaTest, MaxPoolWithTies) {
  for (const Window& w : kPoolWindows) {
    SCOPED_TRACE("window " + std::to_string(w.kernel) + " stride " + std::to_string(w.stride) +
                 " on " + std::to_string(w.height) + "x" + std::to_string(w.width));
    const int batch = 3;
    const size_t in = static_cast<size_t>(batch) * w.channels * w.height * w.width;
    const size_t out = static_cast<size_t>(batch) * w.channels * w.out_height() * w.out_width();
    std::vector<float> x = Random(in, 3), y(out), dy = Random(out), dx = Random(in);
    DeviceBuffer dxin(x), dyout(y), ddy(dy), ddx(dx);
    host_->MaxPoolForward(x.data(), batch, w, y.data());
    cuda_->MaxPoolForward(dxin.get(), batch, w, dyout.get());
    host_->MaxPoolBackward(x.data(), y.data(), dy.data(), batch, w, dx.data());
    cuda_->MaxPoolBackward(dxin.get(), dyout.get(), ddy.get(), batch, w, ddx.get());
    Done();
    ExpectClose(y, dyout.Host(), "MaxPoolForward");
    const std::vector<float> got = ddx.Host();
    ExpectValidPoolGradient(x, y, dy, got, batch, w);
    if (!kWithCudnn) ExpectClose(dx, got, "MaxPoolBackward");
  }
}

// Backend::ConvForward/ConvBackward (cuDNN where built with it, else the
// default im2col + cuBLAS) against the host's im2col + OpenBLAS.
struct ConvCase {
  Window w;
  int out_channels;
  int batch;
};
const ConvCase kConvCases[] = {
    {{3, 9, 8, 3, 1, 1}, 5, 4},     // padded, stride 1, not square
    {{2, 7, 7, 5, 1, 0}, 4, 3},     // no padding
    {{8, 12, 12, 3, 1, 1}, 16, 2},  // more channels
    {{3, 9, 9, 3, 2, 1}, 2, 2},     // strided
};

TEST_F(LayersCudaTest, ConvMatchesHost) {
  for (const ConvCase& c : kConvCases) {
    const Window& w = c.w;
    SCOPED_TRACE("conv " + std::to_string(w.kernel) + "x" + std::to_string(w.kernel) + "x" +
                 std::to_string(c.out_channels) + " pad " + std::to_string(w.pad) + " stride " +
                 std::to_string(w.stride) + " on " + std::to_string(w.channels) + "x" +
                 std::to_string(w.height) + "x" + std::to_string(w.width) + ", batch " +
                 std::to_string(c.batch));
    const size_t hw = static_cast<size_t>(w.out_height()) * w.out_width();
    const size_t in = static_cast<size_t>(c.batch) * w.channels * w.height * w.width;
    const size_t out = static_cast<size_t>(c.batch) * c.out_channels * hw;
    const size_t nw = static_cast<size_t>(c.out_channels) * w.channels * w.kernel * w.kernel;
    const size_t scratch_n = ConvScratchFloats(c.batch, w, c.out_channels) + 1;
    std::vector<float> x = Random(in), weights = Random(nw), bias = Random(c.out_channels),
                       y = Random(out), dy = Random(out), dx = Random(in), dw = Random(nw),
                       db = Random(c.out_channels), scratch(scratch_n);
    DeviceBuffer dxin(x), dweights(weights), dbias(bias), dyout(Random(out)), ddy(dy),
        ddx(Random(in)), ddw(Random(nw)), ddb(Random(c.out_channels)), dscratch(scratch);
    host_->ConvForward(x.data(), c.batch, w, c.out_channels, weights.data(), bias.data(), y.data(),
                       scratch.data());
    cuda_->ConvForward(dxin.get(), c.batch, w, c.out_channels, dweights.get(), dbias.get(),
                       dyout.get(), dscratch.get());
    host_->ConvBackward(x.data(), dy.data(), c.batch, w, c.out_channels, weights.data(), dx.data(),
                        dw.data(), db.data(), scratch.data());
    cuda_->ConvBackward(dxin.get(), ddy.get(), c.batch, w, c.out_channels, dweights.get(),
                        ddx.get(), ddw.get(), ddb.get(), dscratch.get());
    Done();
    ExpectClose(y, dyout.Host(), "ConvForward y");
    ExpectClose(dx, ddx.Host(), "ConvBackward dx");
    ExpectSumsClose(dw, ddw.Host(), c.batch * hw, "ConvBackward dweights");
    ExpectSumsClose(db, ddb.Host(), c.batch * hw, "ConvBackward dbias");

    // Without dx (a first layer): the same parameter gradients.
    DeviceBuffer ddw2(Random(nw)), ddb2(Random(c.out_channels));
    cuda_->ConvBackward(dxin.get(), ddy.get(), c.batch, w, c.out_channels, dweights.get(), nullptr,
                        ddw2.get(), ddb2.get(), dscratch.get());
    Done();
    EXPECT_EQ(ddw.Host(), ddw2.Host()) << "dweights without dx";
    EXPECT_EQ(ddb.Host(), ddb2.Host()) << "dbias without dx";

    // Again, on the cached plan: the same bits (deterministic algorithms).
    DeviceBuffer dyout2(Random(out)), ddx2(Random(in));
    cuda_->ConvForward(dxin.get(), c.batch, w, c.out_channels, dweights.get(), dbias.get(),
                       dyout2.get(), dscratch.get());
    cuda_->ConvBackward(dxin.get(), ddy.get(), c.batch, w, c.out_channels, dweights.get(),
                        ddx2.get(), ddw2.get(), ddb2.get(), dscratch.get());
    Done();
    EXPECT_EQ(dyout.Host(), dyout2.Host()) << "ConvForward repeated";
    EXPECT_EQ(ddx.Host(), ddx2.Host()) << "ConvBackward dx repeated";
    EXPECT_EQ(ddw.Host(), ddw2.Host()) << "ConvBackward dweights repeated";
  }
}

TEST_F(LayersCudaTest, SoftmaxCrossEntropy) {
  const int batch = 37, classes = 10;
  std::vector<float> logits = Random(batch * classes), d = Random(batch * classes);
  for (float& z : logits) z *= 4;
  std::vector<int32_t> labels(batch);
  for (int b = 0; b < batch; ++b) labels[b] = (b * 7) % classes;
  DeviceBuffer dlogits(logits), dd(d);
  const double want =
      host_->SoftmaxCrossEntropy(logits.data(), labels.data(), batch, classes, 0.25f, d.data());
  const double got =
      cuda_->SoftmaxCrossEntropy(dlogits.get(), labels.data(), batch, classes, 0.25f, dd.get());
  Done();
  EXPECT_NEAR(want, got, 1e-4 * std::fabs(want));
  ExpectClose(d, dd.Host(), "dlogits");
  const double no_grad =
      cuda_->SoftmaxCrossEntropy(dlogits.get(), labels.data(), batch, classes, 1.0f, nullptr);
  EXPECT_NEAR(want, no_grad, 1e-4 * std::fabs(want));
  Done();
}

TEST_F(LayersCudaTest, BadLabelIsAStickyError) {
  std::vector<float> logits = Random(20);
  std::vector<int32_t> labels = {3, 10};
  DeviceBuffer dlogits(logits);
  EXPECT_TRUE(
      std::isnan(cuda_->SoftmaxCrossEntropy(dlogits.get(), labels.data(), 2, 10, 1.0f, nullptr)));
  EXPECT_FALSE(cuda_->ok());
  EXPECT_NE(cuda_->error().find("label 10"), std::string::npos) << cuda_->error();
  labels[1] = 1;  // later calls do nothing, and the first error stays
  EXPECT_TRUE(
      std::isnan(cuda_->SoftmaxCrossEntropy(dlogits.get(), labels.data(), 2, 10, 1.0f, nullptr)));
  EXPECT_NE(cuda_->error().find("label 10"), std::string::npos);
}

TEST_F(LayersCudaTest, MomentumDelta) {
  const size_t n = 3001;
  std::vector<float> g = Random(n), w = Random(n), v = Random(n), delta = Random(n);
  DeviceBuffer dg(g), dw(w), dv(v), ddelta(delta);
  for (int step = 0; step < 4; ++step) {
    const float decay = step % 2 ? 5e-4f : 0.0f;  // with and without weight decay
    host_->MomentumDelta(g.data(), w.data(), n, 0.05f, 0.9f, decay, v.data(), delta.data());
    cuda_->MomentumDelta(dg.get(), dw.get(), n, 0.05f, 0.9f, decay, dv.get(), ddelta.get());
  }
  Done();
  ExpectClose(v, dv.Host(), "velocity");
  ExpectClose(delta, ddelta.Host(), "delta");
}

// Every layer of a small CNN, forward and backward, on both backends.
TEST_F(LayersCudaTest, LayersMatchHost) {
  Network net(Shape{2, 10, 10});
  net.Conv(4, 3, 1).GroupNorm(2).Relu().MaxPool(2, 2).Conv(3, 3, 0).FullyConnected(5);
  const int batch = 4;
  std::mt19937_64 init(7);
  for (int i = 0; i < net.size(); ++i) {
    const Layer& layer = net.layer(i);
    SCOPED_TRACE(layer.name());
    std::vector<float> params(layer.num_params());
    layer.InitParams(init, params.data());
    for (float& p : params) p += 0.1f * Random(1)[0];  // nonzero biases
    const size_t in = layer.in_shape().size() * batch;
    const size_t out = layer.out_shape().size() * batch;
    std::vector<float> x = Random(in), y(out), dy = Random(out), dx(in), dparams(params.size()),
                       scratch(layer.ScratchFloats(batch) + 1);
    DeviceBuffer dp(params), dxin(x), dyout(y), ddy(dy), ddx(dx), ddparams(dparams),
        dscratch(scratch);
    layer.Forward(*host_, params.data(), x.data(), batch, y.data(), scratch.data());
    layer.Forward(*cuda_, dp.get(), dxin.get(), batch, dyout.get(), dscratch.get());
    layer.Backward(*host_, params.data(), x.data(), y.data(), dy.data(), batch, dx.data(),
                   dparams.data(), scratch.data());
    layer.Backward(*cuda_, dp.get(), dxin.get(), dyout.get(), ddy.get(), batch, ddx.get(),
                   ddparams.get(), dscratch.get());
    Done();
    ExpectClose(y, dyout.Host(), "forward");
    ExpectClose(dx, ddx.Host(), "dx");
    ExpectClose(dparams, ddparams.Host(), "dparams");
  }
}

}  // namespace
}  // namespace nn
