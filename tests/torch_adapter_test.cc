// The libtorch adapter (examples/torch/geeps_torch.h): the mapping of a
// module's parameters to tables, a worker's steps against libtorch alone,
// and two workers against one worker with the summed batch. Label torch:
// built only where libtorch is (GEEPS_WITH_TORCH).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "doc_trainer.h"
#include "geeps/geeps_all.h"
#include "geeps_torch.h"
#include "test_paths.h"
#include "test_util.h"
#include "torch_net.h"

namespace {

using torch_example::TorchNet;

constexpr int64_t kSteps = 3;
constexpr double kLr = 0.05;
constexpr double kMomentum = 0.9;

// Synthetic images and labels: example i of a fixed draw.
struct Data {
  torch::Tensor x, y;
  explicit Data(int64_t n) {
    torch::manual_seed(7);
    x = torch::rand({n, 784});
    y = torch::randint(0, 10, {n}, torch::kLong);
  }
  // Examples [first, first + count).
  std::pair<torch::Tensor, torch::Tensor> Slice(int64_t first, int64_t count) const {
    return {x.narrow(0, first, count), y.narrow(0, first, count)};
  }
};

TorchNet SeededNet(bool batch_norm) {
  torch::manual_seed(1);
  return TorchNet(batch_norm);
}

std::vector<torch::Tensor> Parameters(TorchNet& net) {
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

// libtorch alone: step i trains on examples [i * batch, (i + 1) * batch),
// SGD with momentum written as the adapter's arithmetic (v = m v + g;
// p += (-lr v), two roundings; torch::optim::SGD's p.add_(v, -lr) may fuse
// the multiply into the add).
// An in-place edit of a net's parameters that a loss function makes at the
// start of step i (or none).
using Edit = std::function<void(TorchNet&, int64_t)>;

std::vector<torch::Tensor> TorchAlone(const Data& data, int64_t batch, const Edit& edit = nullptr) {
  TorchNet net = SeededNet(false);
  std::vector<torch::Tensor> velocity;
  for (const auto& p : net->parameters()) velocity.push_back(torch::zeros_like(p));
  for (int64_t i = 0; i < kSteps; ++i) {
    auto [x, y] = data.Slice(i * batch, batch);
    if (edit) edit(net, i);
    net->zero_grad();
    torch::nll_loss(net->forward(x), y).backward();
    torch::NoGradGuard no_grad;
    auto params = net->parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      velocity[k].mul_(kMomentum).add_(params[k].grad());
      params[k].add_(velocity[k].mul(-kLr));
    }
  }
  return Parameters(net);
}

// The same through libgeeps: `workers` workers, each step's batch of
// workers x batch split among them in rank order.
struct GeepsRun {
  std::vector<torch::Tensor> params;
};
GeepsRun ThroughGeepsOrDie(const Data& data, int workers, int64_t batch,
                           const Edit& edit = nullptr) {
  std::vector<TorchNet> nets;
  for (int w = 0; w < workers; ++w) nets.push_back(SeededNet(false));
  geeps::Config config;
  config.tables = geeps_torch::TablesFor(*nets[0], /*max_width=*/1000);
  config.num_workers = workers;
  config.timeout = std::chrono::milliseconds(20000);
  auto cluster = geeps::EmbeddedCluster::Start(config);
  EXPECT_TRUE(cluster.ok()) << cluster.status().ToString();
  if (!cluster.ok()) return {};
  GeepsRun run;
  geeps::Status st = (*cluster)->RunWorkers([&](geeps::GeePS& ps) -> geeps::Status {
    TorchNet& net = nets[ps.rank()];
    GEEPS_ASSIGN_OR_RETURN(auto trainer, geeps_torch::Trainer::Create(ps, *net, {kLr, kMomentum}));
    GEEPS_RETURN_IF_ERROR(trainer->Run(kSteps, [&](int64_t i) {
      auto [x, y] = data.Slice((i * workers + ps.rank()) * batch, batch);
      if (edit) edit(net, i);
      return torch::nll_loss(net->forward(x), y);
    }));
    return geeps::Status::OK();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  run.params = Parameters(nets[0]);
  return run;
}

TEST(TorchTablesTest, EachParameterGetsATableInOrder) {
  TorchNet net = SeededNet(true);
  const std::vector<geeps::TableSpec> specs = geeps_torch::TablesFor(*net, 1000);
  const auto named = net->named_parameters();
  ASSERT_EQ(specs.size(), named.size());
  ASSERT_EQ(specs.size(), 12u) << "conv1, bn1, conv2, bn2, fc1, fc2: weight and bias each";
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto numel = static_cast<uint64_t>(named[k].value().numel());
    EXPECT_EQ(specs[k].name, named[k].key());
    EXPECT_FALSE(specs[k].local);
    EXPECT_EQ(specs[k].row_width, std::min<uint64_t>(numel, 1000)) << specs[k].name;
    EXPECT_EQ(specs[k].num_rows, (numel + specs[k].row_width - 1) / specs[k].row_width)
        << specs[k].name;
  }
  EXPECT_EQ(specs[0].name, "conv1.weight");
  EXPECT_EQ(specs[0].num_rows * specs[0].row_width, 400u);  // 16 x 1 x 5 x 5, one row
}

TEST(TorchTablesTest, TablesThatDoNotMatchTheModuleAreAClearError) {
  TorchNet net = SeededNet(false);
  geeps::Config config;
  config.tables = geeps_torch::TablesFor(*net);
  config.tables[2].num_rows += 1;  // conv2.weight: one row too many
  auto cluster = geeps::EmbeddedCluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto trainer = geeps_torch::Trainer::Create(*(*cluster)->worker(0), *net, {});
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), geeps::StatusCode::kInvalidArgument);
  EXPECT_NE(trainer.status().message().find("'conv2.weight'"), std::string::npos)
      << trainer.status().ToString();
  config.tables.pop_back();
  config.tables[2].num_rows -= 1;
  auto fewer = geeps::EmbeddedCluster::Start(config);
  ASSERT_TRUE(fewer.ok());
  auto short_of_one = geeps_torch::Trainer::Create(*(*fewer)->worker(0), *net, {});
  ASSERT_FALSE(short_of_one.ok());
  EXPECT_NE(short_of_one.status().message().find("'fc2.bias' has no table"), std::string::npos)
      << short_of_one.status().ToString();
}

// An exception of libtorch in the loss function ends the run with its text,
// not the process.
TEST(TorchTrainerTest, AnExceptionInTheLossFunctionIsAnError) {
  TorchNet net = SeededNet(false);
  geeps::Config config;
  config.tables = geeps_torch::TablesFor(*net);
  config.timeout = std::chrono::milliseconds(5000);
  auto cluster = geeps::EmbeddedCluster::Start(config);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  geeps::Status st = (*cluster)->RunWorkers([&](geeps::GeePS& ps) -> geeps::Status {
    GEEPS_ASSIGN_OR_RETURN(auto trainer, geeps_torch::Trainer::Create(ps, *net, {}));
    return trainer->Run(2, [&](int64_t) {
      return net->forward(torch::ones({2, 5})).sum();
    });  // wrong shape
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the loss function or backward"), std::string::npos) << st.ToString();
}

// One worker, BSP: bitwise the parameters a libtorch loop alone reaches
// with the adapter's SGD with momentum (the delta -lr * v rounded to float,
// then added: torch::optim::SGD fuses the two, so it is not bitwise),
// with the host backend's host alias and without it (the no-alias mode, as
// with CUDA buffers).
TEST(TorchTrainerTest, OneWorkerIsBitwiseTorchAlone) {
  torch::set_num_threads(1);
  const Data data(kSteps * 16);
  const std::vector<torch::Tensor> alone = TorchAlone(data, 16);
  for (const char* no_alias : {"0", "1"}) {
    geeps::testing::ScopedEnv env("GEEPS_HOST_NO_ALIAS", no_alias);
    const GeepsRun run = ThroughGeepsOrDie(data, 1, 16);
    ASSERT_EQ(run.params.size(), alone.size());
    for (size_t k = 0; k < alone.size(); ++k)
      EXPECT_TRUE(torch::equal(run.params[k], alone[k]))
          << "parameter " << k << ", no-alias " << no_alias;
  }
}

// Two workers of 8 examples against one worker of 16: the same step up to
// the order of the float sums (the gradient of a mean over 16 against the
// sum of two halves of means over 8). Tolerance: 1e-5 absolute plus 1e-4
// relative, after three steps with momentum.
TEST(TorchTrainerTest, TwoWorkersMatchOneWorkerWithTheSummedBatch) {
  torch::set_num_threads(1);
  const Data data(kSteps * 16);
  const GeepsRun one = ThroughGeepsOrDie(data, 1, 16);
  const GeepsRun two = ThroughGeepsOrDie(data, 2, 8);
  ASSERT_EQ(one.params.size(), two.params.size());
  for (size_t k = 0; k < one.params.size(); ++k) {
    EXPECT_TRUE(torch::allclose(two.params[k], one.params[k], /*rtol=*/1e-4, /*atol=*/1e-5))
        << "parameter " << k << ": max difference "
        << (two.params[k] - one.params[k]).abs().max().item<double>();
    EXPECT_FALSE(torch::equal(two.params[k], SeededNet(false)->parameters()[k]))
        << "trained at all";
  }
}

// A loss function that edits parameters in place (under NoGradGuard, as
// plain libtorch code does: a weight zeroed, a small bias clamped) at step
// 1 on every worker: the edit joins each worker's delta (over
// num_workers), so two workers of 8 end where libtorch alone with the same
// edits ends (within the tolerance above), and not where they end without
// the edits. (Before, the parameters were views of the read buffers: the
// edits changed those and were dropped from the deltas, or, on a table of
// 2 MiB, reached the other worker.)
TEST(TorchTrainerTest, AnInPlaceEditInTheLossFunctionJoinsTheDelta) {
  torch::set_num_threads(1);
  const Data data(kSteps * 16);
  const Edit edit = [](TorchNet& net, int64_t step) {
    if (step != 1) return;
    torch::NoGradGuard no_grad;
    auto params = net->parameters();
    params.front().mul_(0);               // a weight of many rows
    params.back().clamp_(-0.001, 0.001);  // a bias of one row
  };
  const std::vector<torch::Tensor> alone = TorchAlone(data, 16, edit);
  const GeepsRun edited = ThroughGeepsOrDie(data, 2, 8, edit);
  const GeepsRun plain = ThroughGeepsOrDie(data, 2, 8);
  ASSERT_EQ(edited.params.size(), alone.size());
  for (size_t k : {size_t{0}, alone.size() - 1}) {
    EXPECT_TRUE(torch::allclose(edited.params[k], alone[k], /*rtol=*/1e-4, /*atol=*/1e-5))
        << "parameter " << k << ": max difference "
        << (edited.params[k] - alone[k]).abs().max().item<double>();
    EXPECT_FALSE(torch::allclose(edited.params[k], plain.params[k], 1e-4, 1e-5))
        << "parameter " << k << ": the edit was dropped";
  }
}

// ---- docs/api.md, "With libtorch" ---------------------------------------

// Batches of 8 synthetic examples.
struct DocData {
  Data data{64};
  std::pair<torch::Tensor, torch::Tensor> Batch(int64_t i) const {
    return data.Slice((i % 8) * 8, 8);
  }
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The lines between "// BEGIN <name>" and "// END <name>" of doc_trainer.h.
std::vector<std::string> Section(const std::string& text, const std::string& name) {
  const std::string begin = "// BEGIN " + name + "\n", end = "// END " + name + "\n";
  const size_t from = text.find(begin), to = text.find(end);
  std::vector<std::string> lines;
  if (from == std::string::npos || to == std::string::npos) return lines;
  std::istringstream in(text.substr(from + begin.size(), to - from - begin.size()));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Lines of `b` not in a longest common subsequence with `a`: what turning
// a into b adds or changes.
size_t LinesAdded(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::vector<size_t>> lcs(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j)
      lcs[i][j] =
          a[i - 1] == b[j - 1] ? lcs[i - 1][j - 1] + 1 : std::max(lcs[i - 1][j], lcs[i][j - 1]);
  return b.size() - lcs[a.size()][b.size()];
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

TEST(TorchDocTest, BothLoopsOfTheGuideTrain) {
  torch::set_num_threads(1);
  const DocData data;
  TorchNet alone = SeededNet(false);
  const auto before = Parameters(alone);
  torch_doc::Train(alone, data, 4);
  EXPECT_FALSE(torch::equal(Parameters(alone)[0], before[0]));
  std::vector<TorchNet> nets{SeededNet(false), SeededNet(false)};
  ASSERT_OK(torch_doc::Train(nets, data, 4));
  const auto p0 = Parameters(nets[0]), p1 = Parameters(nets[1]);
  for (size_t k = 0; k < p0.size(); ++k) {
    EXPECT_TRUE(torch::equal(p0[k], p1[k])) << "every replica ends with the tables' values: " << k;
    EXPECT_FALSE(torch::equal(p0[k], before[k])) << "trained: " << k;
  }
}

TEST(TorchDocTest, TheGuideShowsTheTestedLoopsAndCountsTheLinesAdded) {
  const std::string code =
      ReadFile(std::string(GEEPS_SOURCE_DIR) + "/examples/torch/doc_trainer.h");
  const std::string guide = ReadFile(std::string(GEEPS_SOURCE_DIR) + "/docs/api.md");
  const std::vector<std::string> plain = Section(code, "plain"), geeps = Section(code, "geeps");
  ASSERT_GT(plain.size(), 5u);
  ASSERT_GT(geeps.size(), 5u);
  EXPECT_NE(guide.find("```cpp\n" + Joined(plain) + "```\n"), std::string::npos)
      << "docs/api.md must show the plain loop of examples/torch/doc_trainer.h as it is";
  EXPECT_NE(guide.find("```cpp\n" + Joined(geeps) + "```\n"), std::string::npos)
      << "docs/api.md must show the libgeeps loop of examples/torch/doc_trainer.h as it is";
  const size_t added = LinesAdded(plain, geeps);
  EXPECT_LE(added, 15u);
  EXPECT_NE(guide.find("adds or changes " + std::to_string(added) + " lines"), std::string::npos)
      << "docs/api.md must give the count: " << added;
}

// ---- The example binary (examples/torch/torch_fmnist.cc) -----------------

#ifdef TORCH_FMNIST
// Runs `command` with its stderr in its stdout; its output and exit status.
std::pair<std::string, int> RunCommand(const std::string& command) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {"popen failed", -1};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

const char kData[] = "/usr/share/datasets/fashion-mnist";
const char kShort[] = " --epochs 1 --train-limit 512 --batch 32";

// On real data (Debian's dataset-fashion-mnist, which scripts/setup.sh
// installs): 2 workers of an embedded cluster, the baseline, and two
// processes under geeps_launch each train and report.
TEST(TorchExampleTest, EmbeddedBaselineAndProcessesTrainAndReport) {
  ASSERT_TRUE(std::filesystem::exists(std::string(kData) + "/train-images-idx3-ubyte.gz"))
      << "the data set is missing: bash scripts/setup.sh installs dataset-fashion-mnist";
  const std::string program = geeps::testing::Program(TORCH_FMNIST);
  auto [embedded, rc] = RunCommand(program + kShort);
  ASSERT_EQ(rc, 0) << embedded;
  EXPECT_NE(embedded.find("workers: 2\n"), std::string::npos) << embedded;
  EXPECT_NE(embedded.find("training: "), std::string::npos) << embedded;
  EXPECT_NE(embedded.find("test accuracy: 0."), std::string::npos) << embedded;
  auto [baseline, brc] = RunCommand(program + kShort + " --baseline");
  ASSERT_EQ(brc, 0) << baseline;
  EXPECT_NE(baseline.find("baseline: libtorch alone, batch 64"), std::string::npos) << baseline;
  EXPECT_NE(baseline.find("test accuracy: 0."), std::string::npos) << baseline;
#ifdef GEEPS_LAUNCH
  auto [processes, prc] = RunCommand(geeps::testing::Program(GEEPS_LAUNCH) + " -n 2 " + program +
                                     kShort + " --processes");
  ASSERT_EQ(prc, 0) << processes;
  EXPECT_NE(processes.find("workers: 2\n"), std::string::npos) << processes;
  EXPECT_NE(processes.find("test accuracy: 0."), std::string::npos) << processes;
#endif
}

TEST(TorchExampleTest, BadFlagsAreAUsageError) {
  const std::string program = geeps::testing::Program(TORCH_FMNIST);
  for (const char* flags : {" --workers 0", " --no-such-flag", " --lr -1"}) {
    auto [out, rc] = RunCommand(program + flags);
    EXPECT_EQ(rc, 2) << flags << ": " << out;
    EXPECT_NE(out.find("torch_fmnist: "), std::string::npos) << out;
  }
  auto [missing, rc] = RunCommand(program + " --data-dir /nonexistent");
  EXPECT_EQ(rc, 1) << missing;
  EXPECT_NE(missing.find("/nonexistent"), std::string::npos) << missing;
}
#endif  // TORCH_FMNIST

}  // namespace
