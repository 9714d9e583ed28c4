// The network trainer of examples/fashion_mnist (net_trainer.h) on small
// subsets of Fashion-MNIST, and the fmnist_train binary's command line.
// The tests that need the data set skip where it is not installed.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "net_trainer.h"
#include "softmax_model.h"
#include "test_paths.h"

namespace fmnist {
namespace {

const char kDataDir[] = "/usr/share/datasets/fashion-mnist";

// The first `train_limit` training images and the first `test_limit` test
// images; false if the data set is not installed.
bool Load(int64_t train_limit, int64_t test_limit, Dataset* train, Dataset* test) {
  if (!std::filesystem::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz")) {
    return false;
  }
  geeps::Status s = LoadFashionMnist(kDataDir, train_limit, train, test);
  EXPECT_TRUE(s.ok()) << s;
  test->features.resize(static_cast<size_t>(test_limit) * test->dim);
  test->labels.resize(test_limit);
  return s.ok();
}

NetOptions SmallRun(const std::string& model, int workers) {
  NetOptions o;
  o.model = model;
  o.workers = workers;
  o.epochs = 1;
  o.batch_size = 32;
  o.learning_rate = 0.05f;
  o.momentum = 0.9f;
  o.seed = 3;
  return o;
}

// One epoch on 2000 images: the test loss falls at least 2.5-fold from the
// initial ~2.3 (He-initialised weights), for 1 and 2 workers.
class LossFallsTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(LossFallsTest, OneEpochOnASubset) {
  Dataset train, test;
  if (!Load(2000, 1000, &train, &test)) GTEST_SKIP() << "no Fashion-MNIST";
  const auto& [model, workers] = GetParam();
  NetReport report;
  geeps::Status s = TrainNet(SmallRun(model, workers), train, test, &report);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(report.epochs.size(), 1u);
  const double before = report.initial_test.loss;
  const double after = report.epochs[0].test.loss;
  EXPECT_GT(before, 2.0);
  EXPECT_LT(after * 2.5, before) << "test loss " << before << " -> " << after;
  EXPECT_GT(report.epochs[0].test.accuracy, 0.6);
  EXPECT_GT(report.epochs[0].train_loss, 0);
}

INSTANTIATE_TEST_SUITE_P(ModelsAndWorkers, LossFallsTest,
                         ::testing::Combine(::testing::Values("mlp", "cnn"),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "workers";
                         });

// Under BSP, 2 workers with a global batch of 32 (16 each) take the steps of
// 1 worker with the batch of 32: the same weights up to float rounding.
// The runs are short (10 iterations of the CNN, 20 of the MLP): over longer
// ones a rounding difference eventually flips a ReLU or a max-pool choice
// and the two runs part by more than rounding (measured: < 1e-6 after 10
// CNN iterations, 2e-3 after 20).
class EquivalenceTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(EquivalenceTest, TwoWorkersMatchOneWorkerWithTheDoubledBatch) {
  const auto& [model, examples] = GetParam();
  Dataset train, test;
  if (!Load(examples, 100, &train, &test)) GTEST_SKIP() << "no Fashion-MNIST";
  NetReport one, two;
  NetOptions o = SmallRun(model, 1);
  o.evaluate = false;
  ASSERT_TRUE(TrainNet(o, train, test, &one).ok());
  o.workers = 2;
  o.deterministic_bsp = true;
  ASSERT_TRUE(TrainNet(o, train, test, &two).ok());
  ASSERT_EQ(one.final_params.size(), two.final_params.size());
  ASSERT_FALSE(one.final_params.empty());
  // And a control: one worker with half the batch ends elsewhere.
  NetReport half;
  o.workers = 1;
  o.batch_size = 16;
  ASSERT_TRUE(TrainNet(o, train, test, &half).ok());
  double max_diff = 0, max_control = 0;
  for (size_t i = 0; i < one.final_params.size(); ++i) {
    const double a = one.final_params[i], b = two.final_params[i];
    EXPECT_NEAR(a, b, 1e-5 + 1e-4 * std::fabs(a)) << "parameter " << i;
    max_diff = std::max(max_diff, std::fabs(a - b));
    max_control = std::max(max_control, std::fabs(a - half.final_params[i]));
  }
  EXPECT_GT(max_control, 1000 * max_diff);
}

INSTANTIATE_TEST_SUITE_P(Models, EquivalenceTest,
                         ::testing::Values(std::make_tuple("cnn", 320),
                                           std::make_tuple("mlp", 640)),
                         [](const auto& info) { return std::get<0>(info.param); });

// Under a device memory budget too small for all local data (about 20.7 MB
// here), the memory manager keeps part of it in host memory and swaps it
// through the access buffer pool; the math must not change.
TEST(NetTrainerTest, MemoryBudgetGivesTheSameWeights) {
  Dataset train, test;
  if (!Load(320, 100, &train, &test)) GTEST_SKIP() << "no Fashion-MNIST";
  NetOptions o = SmallRun("cnn", 1);
  o.evaluate = false;
  NetReport free_run, budget_run;
  ASSERT_TRUE(TrainNet(o, train, test, &free_run).ok());
  o.device_memory_budget = 21500000;
  geeps::Status s = TrainNet(o, train, test, &budget_run);
  ASSERT_TRUE(s.ok()) << s;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(budget_run.worker0_stats_json, m,
                                std::regex("\"bytes_host_to_device\": *([0-9]+)")))
      << budget_run.worker0_stats_json;
  EXPECT_GT(std::stoll(m[1]), 0) << "nothing was swapped in";
  EXPECT_EQ(free_run.final_params, budget_run.final_params);
  // Far too small: a clear error at FinishVirtualIteration, no crash.
  o.device_memory_budget = 1000;
  s = TrainNet(o, train, test, &budget_run);
  EXPECT_EQ(s.code(), geeps::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("FinishVirtualIteration"), std::string::npos) << s;
}

TEST(NetTrainerTest, RejectsBadOptions) {
  NetOptions o;
  o.model = "resnet";
  EXPECT_EQ(ValidateNetOptions(o).code(), geeps::StatusCode::kInvalidArgument);
  o = NetOptions();
  o.workers = 3;
  o.batch_size = 64;
  geeps::Status s = ValidateNetOptions(o);
  EXPECT_EQ(s.code(), geeps::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("multiple"), std::string::npos) << s;
  EXPECT_FALSE(BuildModel("nope").ok());
  o = NetOptions();
  o.weight_decay = -0.1f;
  s = ValidateNetOptions(o);
  EXPECT_EQ(s.code(), geeps::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("weight decay"), std::string::npos) << s;
  o = NetOptions();
  o.augment_shift = 9;
  s = ValidateNetOptions(o);
  EXPECT_EQ(s.code(), geeps::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("augment shift"), std::string::npos) << s;
  for (float rate : {-0.1f, 1.0f}) {
    o = NetOptions();
    o.dropout = rate;
    s = ValidateNetOptions(o);
    EXPECT_EQ(s.code(), geeps::StatusCode::kInvalidArgument) << rate;
    EXPECT_NE(s.message().find("dropout"), std::string::npos) << s;
    EXPECT_FALSE(BuildModel("cnn", rate).ok()) << rate;
  }
  auto normed = BuildModel("cnn-gn");
  ASSERT_TRUE(normed.ok()) << normed.status();
  EXPECT_EQ(normed->Describe(),
            "conv3x3x16-gn4-relu-maxpool2-conv3x3x32-gn8-relu-maxpool2-fc128-relu-fc10");
  o = NetOptions();
  o.model = "cnn-gn";
  EXPECT_TRUE(ValidateNetOptions(o).ok());
  auto with_dropout = BuildModel("cnn", 0.25f);
  ASSERT_TRUE(with_dropout.ok()) << with_dropout.status();
  EXPECT_NE(with_dropout->Describe().find("relu-dropout0.25-fc10"), std::string::npos)
      << with_dropout->Describe();
}

// The step schedule is lr * decay^epoch for every iteration of an epoch; the
// cosine schedule starts at lr, is lr/2 halfway through the whole run,
// falls at every iteration and ends near 0; it refuses a decay besides.
TEST(NetTrainerTest, LearningRateSchedules) {
  NetOptions o;
  o.learning_rate = 0.08f;
  o.lr_decay = 0.5f;
  o.epochs = 4;
  const int64_t steps = 100;
  EXPECT_FLOAT_EQ(LearningRate(o, 0, 0, steps), 0.08f);
  EXPECT_FLOAT_EQ(LearningRate(o, 0, 99, steps), 0.08f);
  EXPECT_FLOAT_EQ(LearningRate(o, 3, 50, steps), 0.01f);

  o.lr_schedule = LrSchedule::kCosine;
  geeps::Status s = ValidateNetOptions(o);
  EXPECT_EQ(s.code(), geeps::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("step schedule only"), std::string::npos) << s;
  o.lr_decay = 1.0f;
  EXPECT_TRUE(ValidateNetOptions(o).ok());
  EXPECT_FLOAT_EQ(LearningRate(o, 0, 0, steps), 0.08f);
  EXPECT_NEAR(LearningRate(o, 2, 0, steps), 0.04f, 1e-6);
  float previous = LearningRate(o, 0, 0, steps);
  for (int e = 0; e < o.epochs; ++e) {
    for (int64_t t = (e == 0 ? 1 : 0); t < steps; ++t) {
      const float lr = LearningRate(o, e, t, steps);
      ASSERT_LT(lr, previous) << "epoch " << e << " iteration " << t;
      ASSERT_GT(lr, 0.0f) << "epoch " << e << " iteration " << t;
      previous = lr;
    }
  }
  EXPECT_LT(previous, 0.08f * 1e-3f);
}

// Augment mirrors and shifts: every output pixel is the input's pixel at the
// mirrored, shifted place, or 0 where that falls outside; with both off it
// copies; over many draws both mirrors and several shifts occur.
TEST(NetTrainerTest, AugmentMirrorsAndShifts) {
  std::vector<float> in(28 * 28), out(28 * 28);
  for (int k = 0; k < 28 * 28; ++k) in[k] = static_cast<float>(k + 1);  // all distinct, non-zero
  std::mt19937_64 rng(7);
  Augment(in.data(), rng, false, 0, out.data());
  EXPECT_EQ(out, in);
  int mirrored = 0, plain = 0, zeros_seen = 0;
  for (int draw = 0; draw < 64; ++draw) {
    Augment(in.data(), rng, true, 2, out.data());
    // Find the placement from the pixel at the centre, then check all.
    const int v = static_cast<int>(out[14 * 28 + 14]) - 1;
    ASSERT_GE(v, 0);
    const int sy = v / 28, sx = v % 28, dy = 14 - sy;
    bool matched = false;
    for (int mirror = 0; mirror < 2 && !matched; ++mirror) {
      const int dx = mirror ? 14 - (27 - sx) : 14 - sx;
      if (dx < -2 || dx > 2 || dy < -2 || dy > 2) continue;
      bool all = true;
      for (int y = 0; y < 28 && all; ++y)
        for (int x = 0; x < 28 && all; ++x) {
          const int iy = y - dy;
          int ix = x - dx;
          if (mirror) ix = 27 - ix;
          const bool inside = iy >= 0 && iy < 28 && ix >= 0 && ix < 28;
          all = out[y * 28 + x] == (inside ? in[iy * 28 + ix] : 0.0f);
        }
      if (all) {
        matched = true;
        (mirror ? mirrored : plain)++;
        if (dx != 0 || dy != 0) ++zeros_seen;
      }
    }
    EXPECT_TRUE(matched) << "draw " << draw;
  }
  EXPECT_GT(mirrored, 10);
  EXPECT_GT(plain, 10);
  EXPECT_GT(zeros_seen, 10);
}

// Parameters for every layer of `net`, N(0, 0.3) from `seed` (not a
// trained network: for tests of the evaluation).
std::vector<float> RandomParams(const nn::Network& net, uint64_t seed) {
  const Layout lay = MakeLayout(net, 1);
  std::vector<float> params(lay.param_rows * kParamRowWidth);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (float& p : params) p = normal(rng);
  return params;
}

// EvaluateNet's mirror averaging on a small CNN with random weights and
// synthetic 28x28 data: images equal to their mirror image give the same
// result as without averaging; for others the result does not depend on
// which of an image and its mirror image is given, and differs from the
// unaveraged one.
TEST(NetTrainerTest, TestMirrorAveragesAnImageWithItsMirrorImage) {
  auto net = BuildModel("cnn");
  ASSERT_TRUE(net.ok()) << net.status();
  const std::vector<float> params = RandomParams(*net, 5);
  Dataset train, data;
  MakeSyntheticData(10, 250, 9, &train, &data);
  ASSERT_EQ(data.dim, 28 * 28);
  auto mirror = [](const Dataset& d, bool symmetrise) {
    Dataset m = d;
    for (int64_t e = 0; e < d.size(); ++e) {
      const float* in = d.example(e);
      float* out = m.features.data() + e * d.dim;
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x) {
          const float a = in[y * 28 + x], b = in[y * 28 + 27 - x];
          out[y * 28 + x] = symmetrise ? (x < 14 ? a : b) : b;
        }
    }
    return m;
  };
  const Dataset symmetric = mirror(data, true), mirrored = mirror(data, false);
  const Evaluation sym_plain = EvaluateNet(*net, params, symmetric, false);
  const Evaluation sym_avg = EvaluateNet(*net, params, symmetric, true);
  EXPECT_EQ(sym_plain.loss, sym_avg.loss);
  EXPECT_EQ(sym_plain.accuracy, sym_avg.accuracy);

  const Evaluation plain = EvaluateNet(*net, params, data, false);
  const Evaluation plain_mirrored = EvaluateNet(*net, params, mirrored, false);
  const Evaluation avg = EvaluateNet(*net, params, data, true);
  const Evaluation avg_mirrored = EvaluateNet(*net, params, mirrored, true);
  EXPECT_NE(plain.loss, plain_mirrored.loss);  // the weights are not symmetric
  EXPECT_EQ(avg.loss, avg_mirrored.loss);
  EXPECT_EQ(avg.accuracy, avg_mirrored.accuracy);
  EXPECT_NE(avg.loss, plain.loss);
  EXPECT_NE(avg.loss, plain_mirrored.loss);
}

// evaluate_before: the test before the first epoch is run (initial_test)
// only when asked; the epochs' tests run either way.
TEST(NetTrainerTest, TestBeforeTrainingOnlyWhenAsked) {
  Dataset train, test;
  MakeSyntheticData(320, 100, 4, &train, &test);
  for (bool before : {false, true}) {
    NetOptions o = SmallRun("mlp", 1);
    o.evaluate_before = before;
    NetReport report;
    ASSERT_TRUE(TrainNet(o, train, test, &report).ok());
    ASSERT_EQ(report.epochs.size(), 1u);
    EXPECT_GT(report.epochs[0].test.loss, 0);
    if (before) {
      EXPECT_GT(report.initial_test.loss, 0);
    } else {
      EXPECT_EQ(report.initial_test.loss, 0);
      EXPECT_EQ(report.initial_test.accuracy, 0);
    }
  }
}

// evaluate_each_epoch false: only the last epoch is tested, and the final
// weights are still copied out; true: every epoch is.
TEST(NetTrainerTest, TestsOnlyAfterTheLastEpochUnlessAsked) {
  Dataset train, test;
  MakeSyntheticData(320, 100, 4, &train, &test);
  for (bool each : {false, true}) {
    NetOptions o = SmallRun("mlp", 2);
    o.epochs = 3;
    o.evaluate_before = false;
    o.evaluate_each_epoch = each;
    NetReport report;
    ASSERT_TRUE(TrainNet(o, train, test, &report).ok());
    ASSERT_EQ(report.epochs.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      const bool expected = each || i == 2;
      EXPECT_EQ(report.epochs[i].tested, expected) << "epoch " << i + 1 << ", each " << each;
      EXPECT_EQ(report.epochs[i].test.loss > 0, expected) << "epoch " << i + 1;
    }
    // (table 0's rows, padded past the last parameter)
    ASSERT_GE(report.final_params.size(), report.num_params);
    EXPECT_TRUE(std::any_of(report.final_params.begin(), report.final_params.end(),
                            [](float w) { return w != 0.0f; }));
  }
}

// EvaluateNet splits the examples over threads: 1, 2, 3 and 4 threads see
// every example once (the same accuracy; the loss differs only by the order
// of its sums), also when the size is not a multiple of the parts.
TEST(NetTrainerTest, EvaluationOverThreadsSeesEveryExampleOnce) {
  auto net = BuildModel("cnn");
  ASSERT_TRUE(net.ok()) << net.status();
  const std::vector<float> params = RandomParams(*net, 6);
  Dataset train, data;
  MakeSyntheticData(10, 1001, 11, &train, &data);
  const Evaluation one = EvaluateNet(*net, params, data, false, 1);
  EXPECT_GT(one.accuracy, 0.0);
  EXPECT_LT(one.accuracy, 1.0);
  // Leaving out or doubling one example moves the mean loss by about
  // 1 / 1001 of itself; the parts' other chunk sizes change the BLAS's
  // rounding by far less.
  for (int threads : {2, 3, 4}) {
    const Evaluation e = EvaluateNet(*net, params, data, false, threads);
    EXPECT_EQ(e.accuracy, one.accuracy) << threads << " threads";
    EXPECT_NEAR(e.loss, one.loss, 1e-6 * one.loss) << threads << " threads";
  }
}

#ifdef FMNIST_TRAIN
// Runs the binary; returns its exit status and output (stdout + stderr).
int RunTrainer(const std::string& args, std::string* output) {
  const std::string cmd =
      std::string(::geeps::testing::Program(FMNIST_TRAIN)) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(FmnistTrainBinaryTest, BadFlagsExitWithUsageError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--model resnet", "unknown model"},
      {"--epochs -1", "epochs"},
      {"--workers 2 --batch-size 33", "multiple"},
      {"--lr abc", "lr"},
      {"--lr 0", "learning rate"},
      {"--momentum 1.5", "momentum"},
      {"--no-such-flag", "no-such-flag"},
      {"stray", "positional"},
      {"--train-limit -5", "train-limit"},
      {"--dropout 1", "dropout"},
      {"--lr-schedule linear", "--lr-schedule must be step or cosine"},
      {"--lr-schedule cosine --lr-decay 0.7", "step schedule only"},
      {"--epochs 2 --epochs abc", "epochs"},  // the last one counts
  };
  for (const auto& [args, expected] : cases) {
    std::string out;
    EXPECT_EQ(RunTrainer(args, &out), 2) << args << ": " << out;
    EXPECT_NE(out.find(expected), std::string::npos) << args << ": " << out;
    EXPECT_NE(out.find("fmnist_train --help"), std::string::npos) << out;
  }
}

TEST(FmnistTrainBinaryTest, MissingDataSetExitsWithClearMessage) {
  std::string out;
  EXPECT_EQ(RunTrainer("--data-dir /nonexistent/fashion", &out), 2) << out;
  EXPECT_NE(out.find("cannot load Fashion-MNIST from /nonexistent/fashion"), std::string::npos)
      << out;
  EXPECT_NE(out.find("dataset-fashion-mnist"), std::string::npos) << out;
}

TEST(FmnistTrainBinaryTest, TrainsAndWritesTheCurve) {
  if (!std::filesystem::exists(std::string(kDataDir))) GTEST_SKIP();
  const std::string csv =
      ::testing::TempDir() + "/fmnist_curve_" + std::to_string(::getpid()) + ".csv";
  std::string out;
  ASSERT_EQ(RunTrainer("--model mlp --epochs 1 --train-limit 1000 --batch-size 50 "
                       "--curve-csv " +
                           csv,
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("final test accuracy: 0."), std::string::npos) << out;
  FILE* f = std::fopen(csv.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char line[256];
  ASSERT_NE(std::fgets(line, sizeof(line), f), nullptr);
  EXPECT_EQ(std::string(line), "time_s,epoch,train_loss,test_loss,test_accuracy\n");
  int lines = 1;
  while (std::fgets(line, sizeof(line), f) != nullptr) ++lines;
  std::fclose(f);
  EXPECT_EQ(lines, 3);  // header, epoch 0, epoch 1
  std::remove(csv.c_str());
}
// A flag given twice takes its last value (scripts/run-example.sh appends
// the user's arguments to its defaults); only the last epoch is tested
// unless --test-every-epoch.
TEST(FmnistTrainBinaryTest, LastValueOfARepeatedFlagWinsAndTestsFollowTheFlag) {
  if (!std::filesystem::exists(std::string(kDataDir))) GTEST_SKIP();
  const std::string args = "--model mlp --epochs 3 --train-limit 1000 --batch-size 50 --epochs 2";
  std::string out;
  ASSERT_EQ(RunTrainer(args, &out), 0) << out;
  EXPECT_EQ(out.find("epoch 3/3"), std::string::npos) << out;
  const size_t first = out.find("epoch 1/2: train loss ");
  ASSERT_NE(first, std::string::npos) << out;
  const std::string line1 = out.substr(first, out.find('\n', first) - first);
  EXPECT_EQ(line1.find("test accuracy"), std::string::npos) << line1;
  EXPECT_NE(out.find("epoch 2/2: train loss "), std::string::npos) << out;
  EXPECT_NE(out.find("final test accuracy: 0."), std::string::npos) << out;

  std::string every;
  ASSERT_EQ(RunTrainer(args + " --test-every-epoch", &every), 0) << every;
  const size_t at = every.find("epoch 1/2: train loss ");
  ASSERT_NE(at, std::string::npos) << every;
  const std::string tested = every.substr(at, every.find('\n', at) - at);
  EXPECT_NE(tested.find("test accuracy 0."), std::string::npos) << tested;
}

#ifdef GEEPS_LAUNCH
// --processes: two processes started by geeps_launch, one worker each.
TEST(FmnistTrainBinaryTest, TrainsAsTwoProcesses) {
  if (!std::filesystem::exists(std::string(kDataDir))) GTEST_SKIP();
  std::string out;
  const std::string cmd = std::string("-n 2 ") + ::geeps::testing::Program(FMNIST_TRAIN) +
                          " --processes --model mlp --epochs 1 "
                          "--train-limit 1000 --batch-size 50";
  const std::string full =
      std::string(::geeps::testing::Program(GEEPS_LAUNCH)) + " " + cmd + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("final test accuracy: 0."), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1] done"), std::string::npos) << out;
}
#endif  // GEEPS_LAUNCH
#endif  // FMNIST_TRAIN

}  // namespace
}  // namespace fmnist
