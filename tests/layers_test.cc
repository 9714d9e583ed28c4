// The example layers (examples/layers) on the host backend: every layer's
// backward pass against central finite differences of its forward pass, on
// small sizes; the loss and the momentum step against their formulas.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend.h"
#include "cudnn_algos.h"
#include "layers.h"

namespace nn {
namespace {

constexpr float kEps = 1e-2f;

std::vector<float> Random(size_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Checks analytic gradients against (f(v + eps) - f(v - eps)) / (2 eps) of
// f = the double-precision value of `loss`, for each entry of `v`.
void ExpectGradientMatches(std::vector<float>* v, const std::vector<float>& grad,
                           const std::function<double()>& loss, const char* what) {
  ASSERT_EQ(v->size(), grad.size()) << what;
  for (size_t i = 0; i < v->size(); ++i) {
    const float saved = (*v)[i];
    (*v)[i] = saved + kEps;
    const double up = loss();
    (*v)[i] = saved - kEps;
    const double down = loss();
    (*v)[i] = saved;
    const double numeric = (up - down) / (2.0 * kEps);
    EXPECT_NEAR(grad[i], numeric, 2e-3 + 1e-2 * std::fabs(numeric)) << what << " entry " << i;
  }
}

// For a layer with batch `batch`: loss = sum_i y[i] * r[i] with fixed random
// r, so dLoss/dy = r. Checks dx and dparams.
void CheckLayer(const Layer& layer, int batch, std::vector<float> x) {
  std::unique_ptr<Backend> be = MakeHostBackend();
  const size_t out = layer.out_shape().size() * batch;
  std::vector<float> params = Random(layer.num_params(), 7);
  const std::vector<float> r = Random(out, 11);
  std::vector<float> scratch(layer.ScratchFloats(batch) + 1);
  std::vector<float> y(out);
  auto loss = [&]() {
    layer.Forward(*be, params.data(), x.data(), batch, y.data(), scratch.data());
    double sum = 0;
    for (size_t i = 0; i < out; ++i) sum += double{y[i]} * r[i];
    return sum;
  };
  loss();  // y at the point
  std::vector<float> dx(x.size(), 123.0f), dparams(params.size(), 123.0f);
  layer.Backward(*be, params.data(), x.data(), y.data(), r.data(), batch, dx.data(), dparams.data(),
                 scratch.data());
  ExpectGradientMatches(&x, dx, loss, "dx");
  ExpectGradientMatches(&params, dparams, loss, "dparams");
  // Without dx (the first layer): the same parameter gradient.
  std::vector<float> dparams2(params.size(), -5.0f);
  loss();
  layer.Backward(*be, params.data(), x.data(), y.data(), r.data(), batch, nullptr, dparams2.data(),
                 scratch.data());
  EXPECT_EQ(dparams, dparams2);
}

TEST(LayersTest, FullyConnectedGradient) {
  FullyConnected fc(Shape{2, 2, 3}, 4);  // 12 inputs, flattened
  EXPECT_EQ(fc.num_params(), 12u * 4 + 4);
  CheckLayer(fc, 3, Random(3 * 12, 1));
}

TEST(LayersTest, ConvolutionGradientWithPadding) {
  Conv2D conv(Shape{2, 5, 4}, 3, 3, 1);
  EXPECT_EQ(conv.out_shape().height, 5);
  EXPECT_EQ(conv.out_shape().width, 4);
  EXPECT_EQ(conv.num_params(), 3u * 2 * 9 + 3);
  CheckLayer(conv, 2, Random(2 * 2 * 5 * 4, 2));
}

TEST(LayersTest, ConvolutionGradientWithoutPadding) {
  Conv2D conv(Shape{1, 6, 6}, 2, 5, 0);
  EXPECT_EQ(conv.out_shape().height, 2);
  CheckLayer(conv, 2, Random(2 * 36, 3));
}

// The host backend's ConvForward/ConvBackward (image by image) and
// Backend's default (the batch's im2col side by side + one GEMM, which the
// CUDA backend without cuDNN uses; called here on the host backend's
// kernels) against the definition in backend.h, summed directly in double: a
// cross-correlation with KCRS weights, which is what the CUDA backend asks
// cuDNN for. Strides 2 and 3 too, which Conv2D does not use, and kernels
// wider than the padded image's edges (the host im2col's copied spans), and
// "same" padding in several shapes (its one copy per tap).
TEST(LayersTest, ConvCallsMatchTheirDefinition) {
  struct Case {
    Window w;
    int out_channels, batch;
  };
  const Case cases[] = {{{2, 5, 4, 3, 1, 1}, 3, 2},
                        {{1, 6, 6, 5, 1, 0}, 2, 2},
                        {{3, 7, 6, 3, 2, 1}, 2, 3},
                        // kernel wider than the image; taps left and right
                        {{2, 4, 3, 5, 1, 2}, 2, 2},
                        // stride 3 with padding 2: some columns all outside
                        {{1, 5, 5, 3, 3, 2}, 2, 1},
                        {{2, 6, 7, 4, 2, 3}, 3, 2},
                        // "same" padding (the host's one-copy-per-tap im2col):
                        // 5x5, 1x1, and a kernel wider than the image
                        {{3, 6, 5, 5, 1, 2}, 2, 3},
                        {{2, 3, 4, 1, 1, 0}, 3, 2},
                        {{1, 3, 2, 7, 1, 3}, 2, 2}};
  std::unique_ptr<Backend> be = MakeHostBackend();
  for (const Case& c : cases) {
    const Window& w = c.w;
    const int oh = w.out_height(), ow = w.out_width(), k = w.kernel;
    const int ci = w.channels, co = c.out_channels;
    const size_t in = static_cast<size_t>(c.batch) * ci * w.height * w.width;
    const size_t out = static_cast<size_t>(c.batch) * co * oh * ow;
    const size_t nw = static_cast<size_t>(co) * ci * k * k;
    const std::vector<float> x = Random(in, 21), weights = Random(nw, 22), bias = Random(co, 23),
                             dy = Random(out, 24);
    // [0]: the host's own; [1]: the default.
    std::vector<float> y[2], dx[2], dw[2], db[2], dw_only(nw, 9.0f), db_only(co, 9.0f);
    for (int path = 0; path < 2; ++path) {
      y[path].assign(out, 9.0f);
      dx[path].assign(in, 9.0f);
      dw[path].assign(nw, 9.0f);
      db[path].assign(co, 9.0f);
      std::vector<float> scratch(ConvScratchFloats(c.batch, w, co), 7.0f);
      if (path == 0) {
        be->ConvForward(x.data(), c.batch, w, co, weights.data(), bias.data(), y[0].data(),
                        scratch.data());
        be->ConvBackward(x.data(), dy.data(), c.batch, w, co, weights.data(), dx[0].data(),
                         dw[0].data(), db[0].data(), scratch.data());
        // Without dx (a first layer): the same weight and bias gradients.
        be->ConvBackward(x.data(), dy.data(), c.batch, w, co, weights.data(), nullptr,
                         dw_only.data(), db_only.data(), scratch.data());
      } else {
        be->Backend::ConvForward(x.data(), c.batch, w, co, weights.data(), bias.data(), y[1].data(),
                                 scratch.data());
        be->Backend::ConvBackward(x.data(), dy.data(), c.batch, w, co, weights.data(), dx[1].data(),
                                  dw[1].data(), db[1].data(), scratch.data());
      }
    }
    EXPECT_EQ(dw_only, dw[0]);
    EXPECT_EQ(db_only, db[0]);

    std::vector<double> want_y(out), want_dx(in), want_dw(nw), want_db(co);
    auto xi = [&](int b, int ch, int iy, int ix) {
      return ((static_cast<size_t>(b) * ci + ch) * w.height + iy) * w.width + ix;
    };
    for (int b = 0; b < c.batch; ++b) {
      for (int o = 0; o < co; ++o) {
        for (int i = 0; i < oh; ++i) {
          for (int j = 0; j < ow; ++j) {
            const size_t yi = ((static_cast<size_t>(b) * co + o) * oh + i) * ow + j;
            double sum = bias[o];
            want_db[o] += dy[yi];
            for (int ch = 0; ch < ci; ++ch) {
              for (int ky = 0; ky < k; ++ky) {
                for (int kx = 0; kx < k; ++kx) {
                  const int iy = i * w.stride - w.pad + ky;
                  const int ix = j * w.stride - w.pad + kx;
                  if (iy < 0 || iy >= w.height || ix < 0 || ix >= w.width) continue;
                  const size_t wi = ((static_cast<size_t>(o) * ci + ch) * k + ky) * k + kx;
                  sum += double{weights[wi]} * x[xi(b, ch, iy, ix)];
                  want_dw[wi] += double{dy[yi]} * x[xi(b, ch, iy, ix)];
                  want_dx[xi(b, ch, iy, ix)] += double{dy[yi]} * weights[wi];
                }
              }
            }
            want_y[yi] = sum;
          }
        }
      }
    }
    auto expect_near = [](const std::vector<float>& got, const std::vector<double>& want,
                          const char* what) {
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-4 * std::max(1.0, std::fabs(want[i])))
            << what << " at " << i;
      }
    };
    for (int path = 0; path < 2; ++path) {
      SCOPED_TRACE(path == 0 ? "host backend's own" : "Backend's default");
      expect_near(y[path], want_y, "y");
      expect_near(dx[path], want_dx, "dx");
      expect_near(dw[path], want_dw, "dweights");
      expect_near(db[path], want_db, "dbias");
    }
  }
}

TEST(LayersTest, ReluGradient) {
  // Inputs away from the kink at 0 (farther than kEps).
  std::vector<float> x = Random(2 * 10, 4, 0.1f, 1.0f);
  for (size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];
  CheckLayer(Relu(Shape{10, 1, 1}), 2, x);
}

TEST(LayersTest, MaxPoolGradient) {
  // Distinct values, spaced wider than 2 * kEps, so no window has a tie.
  const int n = 2 * 2 * 4 * 6;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.05f * static_cast<float>((i * 37) % n);
  MaxPool pool(Shape{2, 4, 6}, 2, 2);
  EXPECT_EQ(pool.out_shape().height, 2);
  EXPECT_EQ(pool.out_shape().width, 3);
  CheckLayer(pool, 2, x);
}

// MaxPoolForward against the maximum of each window, for the host
// backend's 2x2 stride-2 path (odd sizes leave a row and a column out) and
// its general loop (overlapping windows, stride 1).
TEST(LayersTest, MaxPoolForwardIsTheWindowMaximum) {
  std::unique_ptr<Backend> be = MakeHostBackend();
  const Window windows[] = {
      {3, 5, 7, 2, 2, 0}, {2, 6, 4, 2, 2, 0}, {2, 5, 6, 3, 2, 0}, {1, 4, 5, 2, 1, 0}};
  for (const Window& w : windows) {
    const int batch = 2, oh = w.out_height(), ow = w.out_width();
    const size_t plane = static_cast<size_t>(w.height) * w.width;
    const std::vector<float> x = Random(batch * w.channels * plane, 31);
    std::vector<float> y(static_cast<size_t>(batch) * w.channels * oh * ow, 9.0f);
    be->MaxPoolForward(x.data(), batch, w, y.data());
    for (int p = 0; p < batch * w.channels; ++p) {
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          float want = -1e30f;
          for (int ky = 0; ky < w.kernel; ++ky) {
            for (int kx = 0; kx < w.kernel; ++kx) {
              want = std::max(want,
                              x[p * plane + (oy * w.stride + ky) * w.width + ox * w.stride + kx]);
            }
          }
          EXPECT_EQ(y[(static_cast<size_t>(p) * oh + oy) * ow + ox], want)
              << "kernel " << w.kernel << " stride " << w.stride << " plane " << p << " at " << oy
              << "," << ox;
        }
      }
    }
  }
}

// Dropout while training: about `rate` of the values dropped, the others
// scaled by 1 / (1 - rate), a new mask per seed, the same mask forward and
// backward, and the gradient check holds for a fixed seed; not training, it
// is the identity.
TEST(LayersTest, DropoutDropsScalesAndMatchesItsGradient) {
  const int batch = 4;
  Dropout drop(Shape{16, 5, 5}, 0.4f, 3);
  EXPECT_EQ(drop.name(), "dropout0.4");
  const size_t n = drop.in_shape().size() * batch;         // 1600 values
  const std::vector<float> x = Random(n, 41, 0.5f, 1.5f);  // none zero
  std::unique_ptr<Backend> be = MakeHostBackend();
  std::vector<float> y(n), y2(n), dx(n);

  drop.Forward(*be, nullptr, x.data(), batch, y.data(), nullptr);
  EXPECT_EQ(y, x) << "not training: the identity";
  drop.Backward(*be, nullptr, nullptr, nullptr, x.data(), batch, dx.data(), nullptr, nullptr);
  EXPECT_EQ(dx, x);

  be->SetTraining(true, 1234);
  drop.Forward(*be, nullptr, x.data(), batch, y.data(), nullptr);
  const std::vector<float> ones(n, 1.0f);
  drop.Backward(*be, nullptr, nullptr, nullptr, ones.data(), batch, dx.data(), nullptr, nullptr);
  size_t dropped = 0;
  for (size_t i = 0; i < n; ++i) {
    if (y[i] == 0.0f) {
      ++dropped;
      EXPECT_EQ(dx[i], 0.0f) << i;
    } else {
      EXPECT_FLOAT_EQ(y[i], x[i] / 0.6f) << i;
      EXPECT_FLOAT_EQ(dx[i], 1.0f / 0.6f) << i;
    }
  }
  EXPECT_GT(dropped, n * 0.33) << "rate 0.4 of " << n;
  EXPECT_LT(dropped, n * 0.47) << "rate 0.4 of " << n;

  drop.Forward(*be, nullptr, x.data(), batch, y2.data(), nullptr);
  EXPECT_EQ(y, y2) << "the same seed draws the same mask";
  be->SetTraining(true, 1235);
  drop.Forward(*be, nullptr, x.data(), batch, y2.data(), nullptr);
  EXPECT_NE(y, y2) << "another seed draws another mask";
  Dropout other(Shape{16, 5, 5}, 0.4f, 4);
  other.Forward(*be, nullptr, x.data(), batch, y.data(), nullptr);
  EXPECT_NE(y, y2) << "another layer (salt) draws another mask";

  // In place, as the backend allows.
  std::vector<float> inplace = x;
  drop.Forward(*be, nullptr, inplace.data(), batch, inplace.data(), nullptr);
  EXPECT_EQ(inplace, y2);
}

TEST(LayersTest, DropoutGradientForAFixedSeed) {
  std::unique_ptr<Backend> be = MakeHostBackend();
  be->SetTraining(true, 99);
  Dropout drop(Shape{6, 1, 1}, 0.5f, 0);
  const int batch = 3;
  std::vector<float> x = Random(6 * batch, 5), r = Random(6 * batch, 6), y(6 * batch);
  auto loss = [&]() {
    drop.Forward(*be, nullptr, x.data(), batch, y.data(), nullptr);
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i) sum += double{y[i]} * r[i];
    return sum;
  };
  std::vector<float> dx(x.size(), 123.0f);
  drop.Backward(*be, nullptr, nullptr, nullptr, r.data(), batch, dx.data(), nullptr, nullptr);
  ExpectGradientMatches(&x, dx, loss, "dropout dx");
}

TEST(LayersTest, GroupNormGradient) {
  GroupNorm gn(Shape{4, 2, 3}, 2);  // 2 groups of 2 channels x 6 positions
  EXPECT_EQ(gn.num_params(), 8u);
  CheckLayer(gn, 3, Random(3 * 24, 4, -2, 2));
  CheckLayer(GroupNorm(Shape{3, 2, 2}, 1), 2, Random(2 * 12, 5));  // one group: layer norm
  CheckLayer(GroupNorm(Shape{3, 3, 1}, 3), 2, Random(2 * 9, 6));   // a group per channel
}

// With its initial parameters (gamma 1, beta 0) every image's group comes
// out with mean 0 and variance var / (var + epsilon), whatever its offset
// and scale; gamma and beta then scale and shift each channel; and an
// image's output depends on that image alone, not on the rest of the batch
// (the same function in training and evaluation).
TEST(LayersTest, GroupNormNormalisesEachImagesGroups) {
  const Shape shape{6, 3, 2};
  const int groups = 3, batch = 4, per_group = 2 * 6;
  GroupNorm gn(shape, groups);
  EXPECT_EQ(gn.name(), "gn3");
  std::vector<float> x = Random(batch * shape.size(), 8);
  for (size_t i = 0; i < x.size(); ++i) {  // a different offset and scale per group
    const size_t bg = i / per_group;
    x[i] = 3.0f * static_cast<float>(bg) - 5.0f + (1.0f + static_cast<float>(bg % 5)) * x[i];
  }
  std::mt19937_64 rng(1);
  std::vector<float> params(gn.num_params());
  gn.InitParams(rng, params.data());
  EXPECT_EQ(params, (std::vector<float>{1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}));
  std::unique_ptr<Backend> be = MakeHostBackend();
  std::vector<float> y(x.size()), scratch(gn.ScratchFloats(batch));
  gn.Forward(*be, params.data(), x.data(), batch, y.data(), scratch.data());
  for (int bg = 0; bg < batch * groups; ++bg) {
    double sum = 0, squares = 0, var_x = 0, mean_x = 0;
    for (int i = 0; i < per_group; ++i) mean_x += x[bg * per_group + i] / double{per_group};
    for (int i = 0; i < per_group; ++i) {
      const double v = y[bg * per_group + i];
      sum += v;
      squares += v * v;
      var_x += (x[bg * per_group + i] - mean_x) * (x[bg * per_group + i] - mean_x) / per_group;
    }
    EXPECT_NEAR(sum / per_group, 0.0, 1e-5) << "group " << bg;
    EXPECT_NEAR(squares / per_group, var_x / (var_x + kGroupNormEpsilon), 1e-5) << "group " << bg;
  }
  // gamma = c + 1, beta = 0.5 - c: y2 = gamma * y + beta, channel by channel.
  for (int c = 0; c < shape.channels; ++c) {
    params[c] = static_cast<float>(c + 1);
    params[shape.channels + c] = 0.5f - static_cast<float>(c);
  }
  std::vector<float> y2(x.size());
  gn.Forward(*be, params.data(), x.data(), batch, y2.data(), scratch.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const int c = static_cast<int>(i / 6 % shape.channels);
    EXPECT_NEAR(y2[i], static_cast<float>(c + 1) * y[i] + 0.5f - static_cast<float>(c), 1e-4) << i;
  }
  // Image 2 alone gives what it gave in the batch.
  std::vector<float> alone(shape.size());
  gn.Forward(*be, params.data(), x.data() + 2 * shape.size(), 1, alone.data(), scratch.data());
  EXPECT_EQ(alone,
            std::vector<float>(y2.begin() + 2 * shape.size(), y2.begin() + 3 * shape.size()));
}

TEST(LayersTest, SoftmaxCrossEntropyGradientAndValue) {
  std::unique_ptr<Backend> be = MakeHostBackend();
  const int batch = 3, classes = 5;
  std::vector<float> logits = Random(batch * classes, 5, -2, 2);
  const std::vector<int32_t> labels = {0, 4, 2};
  std::vector<float> dlogits(logits.size());
  const float scale = 0.5f;
  const double loss =
      be->SoftmaxCrossEntropy(logits.data(), labels.data(), batch, classes, scale, dlogits.data());
  double expected = 0;
  for (int b = 0; b < batch; ++b) {
    double sum = 0;
    for (int k = 0; k < classes; ++k) sum += std::exp(logits[b * classes + k]);
    expected += std::log(sum) - logits[b * classes + labels[b]];
  }
  EXPECT_NEAR(loss, expected, 1e-5);
  for (float& d : dlogits) d /= scale;  // the gradient of the plain sum
  ExpectGradientMatches(
      &logits, dlogits,
      [&] {
        return be->SoftmaxCrossEntropy(logits.data(), labels.data(), batch, classes, 1.0f, nullptr);
      },
      "dlogits");
}

TEST(LayersTest, MomentumDeltaIsMinusLrTimesVelocity) {
  std::unique_ptr<Backend> be = MakeHostBackend();
  std::vector<float> grad = {1, -2, 3}, velocity = {0.5f, 0, -1}, delta(3);
  be->MomentumDelta(grad.data(), nullptr, 3, 0.1f, 0.9f, 0.0f, velocity.data(), delta.data());
  const std::vector<float> v = {0.9f * 0.5f + 1, -2, 0.9f * -1 + 3};
  for (int i = 0; i < 3; ++i) {
    EXPECT_FLOAT_EQ(velocity[i], v[i]);
    EXPECT_FLOAT_EQ(delta[i], -0.1f * v[i]);
  }
}

TEST(LayersTest, WeightDecayAddsToTheGradient) {
  std::unique_ptr<Backend> be = MakeHostBackend();
  std::vector<float> grad = {1, -2, 3}, weights = {10, -4, 0.5f}, velocity = {0.5f, 0, -1},
                     delta(3);
  be->MomentumDelta(grad.data(), weights.data(), 3, 0.1f, 0.9f, 0.01f, velocity.data(),
                    delta.data());
  for (int i = 0; i < 3; ++i) {
    const float v0[] = {0.5f, 0, -1};
    const float v = 0.9f * v0[i] + grad[i] + 0.01f * weights[i];
    EXPECT_FLOAT_EQ(velocity[i], v) << i;
    EXPECT_FLOAT_EQ(delta[i], -0.1f * v) << i;
  }
}

TEST(LayersTest, NetworkShapesAndNames) {
  Network net(Shape{1, 28, 28});
  net.Conv(16, 3, 1).Relu().MaxPool(2, 2).Conv(32, 3, 1).Relu().MaxPool(2, 2);
  net.FullyConnected(10);
  EXPECT_EQ(net.output_shape().size(), 10u);
  EXPECT_EQ(net.layer(3).in_shape().height, 14);
  EXPECT_EQ(net.layer(6).in_shape().size(), 32u * 7 * 7);
  EXPECT_EQ(net.Describe(), "conv3x3x16-relu-maxpool2-conv3x3x32-relu-maxpool2-fc10");
  EXPECT_EQ(net.num_params(), (16u * 9 + 16) + (32u * 16 * 9 + 32) + (10u * 32 * 49 + 10));

  Network normed(Shape{1, 28, 28});
  normed.Conv(8, 3, 1).GroupNorm(4).Relu();
  EXPECT_EQ(normed.Describe(), "conv3x3x8-gn4-relu");
  EXPECT_EQ(normed.layer(1).out_shape().size(), 8u * 28 * 28);
  EXPECT_EQ(normed.num_params(), (8u * 9 + 8) + 2 * 8);
}

// The cuDNN algorithms the CUDA backend may take from the heuristics
// (cudnn_algos.h; its numbers are checked against cuDNN's enums where
// cuda_backend.cu compiles): every algorithm of each pass, by cuDNN's
// number, allowed or not, and why.
TEST(CudnnAlgosTest, CoarseAndNondeterministicAlgorithmsAreLeftOut) {
  using cudnn_algos::Pass;
  struct Row {
    Pass pass;
    int algo;
    const char* name;
    bool coarse, nondeterministic;
  };
  const Row rows[] = {
      {Pass::kForward, 0, "IMPLICIT_GEMM", false, false},
      {Pass::kForward, 1, "IMPLICIT_PRECOMP_GEMM", false, false},
      {Pass::kForward, 2, "GEMM", false, false},
      {Pass::kForward, 3, "DIRECT", false, false},
      {Pass::kForward, 4, "FFT", true, false},
      {Pass::kForward, 5, "FFT_TILING", true, false},
      {Pass::kForward, 6, "WINOGRAD", true, false},
      {Pass::kForward, 7, "WINOGRAD_NONFUSED", true, false},
      {Pass::kBackwardData, 0, "DATA_ALGO_0", false, true},
      {Pass::kBackwardData, 1, "DATA_ALGO_1", false, false},
      {Pass::kBackwardData, 2, "DATA FFT", true, false},
      {Pass::kBackwardData, 3, "DATA FFT_TILING", true, false},
      {Pass::kBackwardData, 4, "DATA WINOGRAD", true, false},
      {Pass::kBackwardData, 5, "DATA WINOGRAD_NONFUSED", true, false},
      {Pass::kBackwardFilter, 0, "FILTER_ALGO_0", false, true},
      {Pass::kBackwardFilter, 1, "FILTER_ALGO_1", false, false},
      {Pass::kBackwardFilter, 2, "FILTER FFT", true, false},
      {Pass::kBackwardFilter, 3, "FILTER_ALGO_3", false, true},
      {Pass::kBackwardFilter, 4, "FILTER WINOGRAD", true, false},
      {Pass::kBackwardFilter, 5, "FILTER WINOGRAD_NONFUSED", true, false},
      {Pass::kBackwardFilter, 6, "FILTER FFT_TILING", true, false},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(cudnn_algos::Coarse(r.pass, r.algo), r.coarse);
    EXPECT_EQ(cudnn_algos::KnownNondeterministic(r.pass, r.algo), r.nondeterministic);
    EXPECT_EQ(cudnn_algos::Allowed(r.pass, r.algo), !r.coarse && !r.nondeterministic);
  }
}

}  // namespace
}  // namespace nn
