// softmax_fmnist: distributed softmax regression on Fashion-MNIST with
// libgeeps, on an embedded cluster (one thread per worker, one per shard).
//
//   softmax_fmnist [--workers 2] [--epochs 3] [--batch-size 64] [--lr 0.15]
//                  [--slack 0] [--data-dir DIR] [--train-limit N] ...
//
// Exit status: 0 trained; 1 the data could not be loaded or libgeeps failed;
// 2 bad command line.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

#include <boost/program_options.hpp>

#include "softmax_model.h"
#include "softmax_trainer.h"

namespace po = boost::program_options;

namespace {

constexpr int kExitRuntimeError = 1;
constexpr int kExitUsage = 2;

struct Flags {
  fmnist::TrainOptions train;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t train_limit = 0;
  int64_t timeout_ms = 30000;
};

// Parses the command line into *flags. Returns -1 to go on, else the exit
// status (0 after --help).
int ParseFlags(int argc, char** argv, Flags* flags) {
  fmnist::TrainOptions& t = flags->train;
  po::options_description desc(
      "Distributed softmax regression on Fashion-MNIST with libgeeps.\n"
      "Options");
  // clang-format off
  desc.add_options()
      ("help,h", "print this help and exit")
      ("workers", po::value(&t.workers)->default_value(t.workers),
       "workers (one thread each); each trains on its own shard of the data")
      ("shards", po::value(&t.shards)->default_value(t.shards),
       "parameter server shards")
      ("channels", po::value(&t.channels)->default_value(t.channels),
       "channels (sockets + threads) per shard and worker")
      ("epochs", po::value(&t.epochs)->default_value(t.epochs),
       "passes over the training data")
      ("batch-size", po::value(&t.batch_size)->default_value(t.batch_size),
       "mini-batch size per worker")
      ("lr", po::value(&t.learning_rate)->default_value(t.learning_rate),
       "learning rate (of the step on the workers' average gradient)")
      ("lr-decay", po::value(&t.lr_decay)->default_value(t.lr_decay),
       "learning rate factor per epoch: lr * lr-decay^epoch")
      ("momentum", po::value(&t.momentum)->default_value(t.momentum),
       "momentum (kept by each worker, applied before sending; 0 = plain SGD)")
      ("slack", po::value(&t.slack)->default_value(t.slack),
       "staleness bound of the reads in clocks (0 = BSP)")
      ("read-my-writes", po::bool_switch(&t.read_my_writes),
       "a worker sees its own updates at once (useful with --slack > 0)")
      ("data-dir", po::value(&flags->data_dir)->default_value(flags->data_dir),
       "folder of {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz")
      ("seed", po::value(&t.seed)->default_value(t.seed),
       "seed of the initial weights and of the shuffles")
      ("train-limit", po::value(&flags->train_limit)->default_value(0),
       "use only the first N training examples (0 = all)")
      ("timeout-ms", po::value(&flags->timeout_ms)->default_value(flags->timeout_ms),
       "longest wait for a peer before libgeeps gives up");
  // clang-format on
  po::variables_map vm;
  try {
    // No positional arguments: a stray word is an error, not ignored.
    po::positional_options_description none;
    po::store(po::command_line_parser(argc, argv)
                  .options(desc)
                  .positional(none)
                  .run(),
              vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "softmax_fmnist: " << e.what() << "\n"
              << "Try 'softmax_fmnist --help'.\n";
    return kExitUsage;
  }
  if (vm.count("help") != 0) {
    std::cout << desc << "\n";
    return 0;
  }
  if (flags->train_limit < 0) {
    std::cerr << "softmax_fmnist: --train-limit must be >= 0\n"
              << "Try 'softmax_fmnist --help'.\n";
    return kExitUsage;
  }
  if (flags->timeout_ms <= 0) {
    std::cerr << "softmax_fmnist: --timeout-ms must be > 0\n"
              << "Try 'softmax_fmnist --help'.\n";
    return kExitUsage;
  }
  t.timeout = std::chrono::milliseconds(flags->timeout_ms);
  geeps::Status valid = fmnist::ValidateTrainOptions(t);
  if (!valid.ok()) {
    std::cerr << "softmax_fmnist: " << valid.message() << "\n"
              << "Try 'softmax_fmnist --help'.\n";
    return kExitUsage;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  const int parsed = ParseFlags(argc, argv, &flags);
  if (parsed >= 0) return parsed;
  const fmnist::TrainOptions& opt = flags.train;

  const auto load_start = std::chrono::steady_clock::now();
  fmnist::Dataset train, test;
  geeps::Status s = fmnist::LoadFashionMnist(
      flags.data_dir, static_cast<uint64_t>(flags.train_limit), &train, &test);
  if (!s.ok()) {
    std::cerr << "softmax_fmnist: cannot load Fashion-MNIST: " << s.ToString()
              << "\n";
    return kExitRuntimeError;
  }
  const double load_seconds = std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - load_start)
                                  .count();
  if (train.size() < opt.workers) {
    std::cerr << "softmax_fmnist: " << train.size()
              << " training examples are too few for " << opt.workers
              << " workers\n";
    return kExitUsage;
  }
  std::printf(
      "loaded %lld training and %lld test images of %d pixels in %.2f s\n"
      "training: %d workers, %d shards, %d channels, slack %d%s, batch %d per "
      "worker, lr %g (decay %g/epoch), momentum %g, %d epochs\n",
      static_cast<long long>(train.size()), static_cast<long long>(test.size()),
      train.dim, load_seconds, opt.workers, opt.shards, opt.channels, opt.slack,
      opt.read_my_writes ? " (read-my-writes)" : "", opt.batch_size,
      opt.learning_rate, opt.lr_decay, opt.momentum, opt.epochs);
  std::fflush(stdout);

  fmnist::TrainOptions run_options = opt;
  run_options.log = &std::cout;
  fmnist::TrainReport report;
  s = fmnist::TrainSoftmax(run_options, train, test, &report);
  if (!s.ok()) {
    std::cerr << "softmax_fmnist: training failed: " << s.ToString() << "\n";
    if (!report.worker0_stats_json.empty()) {
      std::cerr << "worker 0 stats: " << report.worker0_stats_json << "\n";
    }
    return kExitRuntimeError;
  }
  const double accuracy = report.epochs.empty()
                              ? report.initial_test.accuracy
                              : report.epochs.back().test.accuracy;
  std::printf("training took %.2f s (cluster start to shutdown)\n",
              report.total_seconds);
  std::printf("worker 0 stats: %s\n", report.worker0_stats_json.c_str());
  std::printf("final test accuracy: %.4f\n", accuracy);
  return 0;
}
