// torch_fmnist: a libtorch CNN (torch_net.h) trained on Fashion-MNIST with
// its parameters in libgeeps tables (geeps_torch.h), on an embedded cluster
// of --workers workers (default 2), or one worker per process under
// geeps_launch or mpirun (--processes); --baseline trains the same model on
// the same examples, seed and schedule with libtorch alone in one process.
// Prints "workers: N", per-epoch progress, the training time and
// "test accuracy: X". docs/examples.md has the figures.
#include <torch/torch.h>
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "geeps/geeps_all.h"
#include "geeps_torch.h"
#include "softmax_model.h"
#include "torch_net.h"

namespace {

using Clock = std::chrono::steady_clock;
using torch_example::TorchNet;

struct Options {
  int workers = 2;
  int epochs = 4;
  int64_t batch = 64;  // per worker
  double lr = 0.05;
  double momentum = 0.9;
  uint64_t seed = 1;
  int64_t train_limit = 0;
  int threads = 0;  // libtorch threads per worker; 0 = cores / workers
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  bool baseline = false;
  bool processes = false;
};

// Returns -1 to go on, else the exit status (0 for --help, 2 for a bad line).
int Parse(int argc, char** argv, Options* o) {
  namespace po = boost::program_options;
  po::options_description d("torch_fmnist options");
  d.add_options()("help", "this text")("workers", po::value(&o->workers)->default_value(o->workers),
                                       "workers of the embedded cluster")(
      "epochs", po::value(&o->epochs)->default_value(o->epochs), "passes over the training set")(
      "batch", po::value(&o->batch)->default_value(o->batch), "examples per worker per step")(
      "lr", po::value(&o->lr)->default_value(o->lr),
      "learning rate (a tenth of it for the last fifth)")(
      "momentum", po::value(&o->momentum)->default_value(o->momentum), "SGD momentum")(
      "seed", po::value(&o->seed)->default_value(o->seed), "seed of the model and the shuffles")(
      "train-limit", po::value(&o->train_limit)->default_value(o->train_limit),
      "training examples (0 = all)")("threads", po::value(&o->threads)->default_value(o->threads),
                                     "libtorch threads per worker (0 = cores / workers)")(
      "data-dir", po::value(&o->data_dir)->default_value(o->data_dir), "Fashion-MNIST's .gz files")(
      "baseline", po::bool_switch(&o->baseline),
      "train with libtorch alone, in one process, one batch of workers x batch")(
      "processes", po::bool_switch(&o->processes), "one worker per process (geeps_launch, mpirun)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, d), vm);
    po::notify(vm);
    if (vm.count("help") != 0) {
      std::cout << d << "\n";
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "torch_fmnist: " << e.what() << "\nTry 'torch_fmnist --help'.\n";
    return 2;
  }
  if (o->workers < 1 || o->epochs < 1 || o->batch < 1 || o->lr <= 0 || o->threads < 0) {
    std::cerr << "torch_fmnist: --workers, --epochs, --batch and --lr must be positive\n";
    return 2;
  }
  return -1;
}

// The examples `rows` of `data` as (batch, 784) and (batch) tensors.
std::pair<torch::Tensor, torch::Tensor> Gather(const fmnist::Dataset& data,
                                               const std::vector<int64_t>& rows) {
  torch::Tensor x = torch::empty({static_cast<int64_t>(rows.size()), data.dim});
  torch::Tensor y = torch::empty({static_cast<int64_t>(rows.size())}, torch::kLong);
  for (size_t k = 0; k < rows.size(); ++k) {
    std::copy_n(data.example(rows[k]), data.dim, x.data_ptr<float>() + k * data.dim);
    y.data_ptr<int64_t>()[k] = data.labels[rows[k]];
  }
  return {x, y};
}

double Accuracy(TorchNet& net, const fmnist::Dataset& test) {
  torch::NoGradGuard no_grad;
  net->eval();
  int64_t right = 0;
  for (int64_t first = 0; first < test.size(); first += 1000) {
    std::vector<int64_t> rows(static_cast<size_t>(std::min<int64_t>(1000, test.size() - first)));
    std::iota(rows.begin(), rows.end(), first);
    auto [x, y] = Gather(test, rows);
    right += net->forward(x).argmax(1).eq(y).sum().item<int64_t>();
  }
  net->train();
  return static_cast<double>(right) / static_cast<double>(test.size());
}

int Threads(const Options& o, int workers) {
  if (o.threads > 0) return o.threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / workers);
}

// One worker's training: the Trainer's loop over the schedule; rank 0
// prints progress and, at the end, evaluates.
geeps::Status TrainWorker(geeps::GeePS& ps, TorchNet& net, const Options& o,
                          const fmnist::Dataset& train, const fmnist::Dataset& test,
                          double* accuracy) {
  torch::set_num_threads(Threads(o, ps.num_workers()));
  torch_example::Schedule schedule(train.size(), ps.num_workers(), o.batch, o.seed);
  const int64_t steps = schedule.steps_per_epoch() * o.epochs;
  geeps_torch::Sgd sgd{o.lr, o.momentum,
                       [&](int64_t i) { return torch_example::LrAt(o.lr, i, steps); }};
  GEEPS_ASSIGN_OR_RETURN(auto trainer, geeps_torch::Trainer::Create(ps, *net, sgd));
  const Clock::time_point start = Clock::now();
  GEEPS_RETURN_IF_ERROR(trainer->Run(steps, [&](int64_t i) {
    auto [x, y] = Gather(train, schedule.Batch(i, ps.rank()));
    torch::Tensor loss = torch::nll_loss(net->forward(x), y);
    if (ps.rank() == 0 && (i + 1) % schedule.steps_per_epoch() == 0)
      std::printf("epoch %lld/%d: loss %.4f, %.1f s\n",
                  static_cast<long long>((i + 1) / schedule.steps_per_epoch()), o.epochs,
                  loss.item<double>(), std::chrono::duration<double>(Clock::now() - start).count());
    return loss;
  }));
  if (ps.rank() == 0) {
    std::printf("training: %.1f s\n", std::chrono::duration<double>(Clock::now() - start).count());
    *accuracy = Accuracy(net, test);
  }
  return geeps::Status::OK();
}

// The same model, examples and schedule with libtorch alone: one batch of
// workers x batch per step, torch::optim::SGD.
int RunBaseline(const Options& o, const fmnist::Dataset& train, const fmnist::Dataset& test) {
  torch::manual_seed(o.seed);
  TorchNet net;
  torch::set_num_threads(Threads(o, 1));
  torch_example::Schedule schedule(train.size(), 1, o.batch * o.workers, o.seed);
  const int64_t steps = schedule.steps_per_epoch() * o.epochs;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(o.lr).momentum(o.momentum));
  std::printf("baseline: libtorch alone, batch %lld\n",
              static_cast<long long>(o.batch * o.workers));
  const Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    static_cast<torch::optim::SGDOptions&>(opt.param_groups()[0].options())
        .lr(torch_example::LrAt(o.lr, i, steps));
    auto [x, y] = Gather(train, schedule.Batch(i, 0));
    opt.zero_grad();
    torch::Tensor loss = torch::nll_loss(net->forward(x), y);
    loss.backward();
    opt.step();
    if ((i + 1) % schedule.steps_per_epoch() == 0)
      std::printf("epoch %lld/%d: loss %.4f, %.1f s\n",
                  static_cast<long long>((i + 1) / schedule.steps_per_epoch()), o.epochs,
                  loss.item<double>(), std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::printf("training: %.1f s\n", std::chrono::duration<double>(Clock::now() - start).count());
  std::printf("test accuracy: %.4f\n", Accuracy(net, test));
  return 0;
}

// The nets of all workers, made in rank order after seeding (worker 0's is
// the baseline's: it writes the initial values).
std::vector<TorchNet> MakeNets(const Options& o, int count) {
  torch::manual_seed(o.seed);
  std::vector<TorchNet> nets;
  for (int w = 0; w < count; ++w) nets.emplace_back();
  return nets;
}

int RunEmbedded(const Options& o, const fmnist::Dataset& train, const fmnist::Dataset& test) {
  std::vector<TorchNet> nets = MakeNets(o, o.workers);
  geeps::Config config;
  config.tables = geeps_torch::TablesFor(*nets[0]);
  geeps::Status s = geeps::ApplyEnvironment(&config);
  config.num_workers = o.workers;  // one worker per net, whatever GEEPS_NUM_WORKERS says
  auto cluster = s.ok() ? geeps::EmbeddedCluster::Start(config)
                        : geeps::StatusOr<std::unique_ptr<geeps::EmbeddedCluster>>(s);
  if (!cluster.ok()) {
    std::cerr << "torch_fmnist: " << cluster.status().ToString() << "\n";
    return 1;
  }
  std::printf("workers: %d\n", o.workers);
  double accuracy = 0;
  s = (*cluster)->RunWorkers([&](geeps::GeePS& ps) {
    return TrainWorker(ps, nets[ps.rank()], o, train, test, &accuracy);
  });
  if (!s.ok()) {
    std::cerr << "torch_fmnist: training failed: " << s.ToString() << "\n";
    return 1;
  }
  std::printf("test accuracy: %.4f\n", accuracy);
  return 0;
}

// One worker per process: the job's size comes from the launcher.
int RunProcess(const Options& o, const fmnist::Dataset& train, const fmnist::Dataset& test) {
  geeps::ProcessOptions options;
  geeps::Status s = geeps::ApplyEnvironment(&options);
  std::vector<TorchNet> nets = MakeNets(o, 1);
  geeps::Config config;
  config.tables = geeps_torch::TablesFor(*nets[0]);
  if (s.ok()) s = geeps::ApplyEnvironment(&config);
  auto process = s.ok() ? geeps::Process::Join(config, options)
                        : geeps::StatusOr<std::unique_ptr<geeps::Process>>(s);
  if (!process.ok()) {
    std::cerr << "torch_fmnist: " << process.status().ToString() << "\n";
    return 1;
  }
  geeps::GeePS* ps = (*process)->worker();
  double accuracy = 0;
  if (ps != nullptr) {
    if (ps->rank() == 0) std::printf("workers: %d\n", ps->num_workers());
    s = TrainWorker(*ps, nets[0], o, train, test, &accuracy);
  }
  geeps::Status shutdown = (*process)->Shutdown();
  if (s.ok()) s = shutdown;
  if (!s.ok()) {
    std::cerr << "torch_fmnist: rank " << (*process)->rank() << ": " << s.ToString() << "\n";
    return 1;
  }
  if (ps != nullptr && ps->rank() == 0) std::printf("test accuracy: %.4f\n", accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines as they come, also into a pipe
  Options o;
  const int parsed = Parse(argc, argv, &o);
  if (parsed >= 0) return parsed;
  fmnist::Dataset train, test;
  geeps::Status s =
      fmnist::LoadFashionMnist(o.data_dir, static_cast<uint64_t>(o.train_limit), &train, &test);
  if (!s.ok()) {
    std::cerr << "torch_fmnist: " << s.ToString() << "\n";
    return 1;
  }
  if (train.dim != 784 || train.size() < o.workers * o.batch) {
    std::cerr << "torch_fmnist: need 28x28 images and at least workers x batch training examples\n";
    return 2;
  }
  if (o.baseline) return RunBaseline(o, train, test);
  return o.processes ? RunProcess(o, train, test) : RunEmbedded(o, train, test);
}
