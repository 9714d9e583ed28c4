// fmnist_train: trains an MLP or a CNN (examples/layers) on Fashion-MNIST
// with libgeeps, on an embedded cluster (one thread per worker and per
// shard) or, with --processes, as one process of a multi-process job
// (geeps_launch, mpirun, srun; see docs/operations.md).
//
//   fmnist_train [--model cnn] [--workers 2] [--epochs 3] [--batch-size 64]
//                [--lr 0.05] [--momentum 0.9] [--curve-csv curve.csv] ...
//
// Prints a progress bar per epoch, the test accuracy after each epoch and
// "final test accuracy: A". --curve-csv writes one line per epoch:
// time_s,epoch,train_loss,test_loss,test_accuracy (epoch 0: before
// training); examples/fashion_mnist/plot_curve.sh plots it.
//
// Exit status: 0 trained; 1 libgeeps failed; 2 bad command line, or the
// data set is missing or unreadable.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <string>

#include <boost/program_options.hpp>

#include "command_line.h"
#include "geeps/config.h"
#include "geeps/process.h"
#include "net_trainer.h"
#include "softmax_model.h"

namespace po = boost::program_options;

namespace {

using fmnist::kExitRuntimeError;
using fmnist::kExitUsage;

struct Flags : fmnist::CommonFlags {
  Flags() { timeout_ms = 60000; }
  fmnist::NetOptions net;
  std::string curve_csv;
  std::string device = "host";
  bool test_every_epoch = false;
};

int Usage(const std::string& message) { return fmnist::UsageError("fmnist_train", message); }

// -1 to go on, else the exit status.
int ParseFlags(int argc, char** argv, Flags* flags) {
  fmnist::NetOptions& n = flags->net;
  po::options_description desc("Trains an MLP or a CNN on Fashion-MNIST with libgeeps.\nOptions");
  // clang-format off
  desc.add_options()
      ("help,h", "print this help and exit")
      ("model", po::value(&n.model)->default_value(n.model),
       "mlp, cnn, cnn-gn, cnn-wide or big-mlp (net_trainer.h)")
      ("workers", po::value(&n.workers)->default_value(n.workers),
       "workers of the embedded cluster (one thread each)")
      ("shards", po::value(&n.shards)->default_value(n.shards),
       "parameter server shards")
      ("weight-decay", po::value(&n.weight_decay)->default_value(n.weight_decay),
       "L2 weight decay: weight_decay * w added to each gradient (0 = none)")
      ("dropout", po::value(&n.dropout)->default_value(n.dropout),
       "dropout rate before the last layer, in [0, 1) (0 = none)")
      ("augment-flip", po::bool_switch(&n.augment_flip),
       "mirror each training image left-right with probability 1/2")
      ("augment-shift", po::value(&n.augment_shift)->default_value(n.augment_shift),
       "shift each training image by up to this many pixels each way (0 = none)")
      ("test-mirror", po::bool_switch(&n.test_mirror_average),
       "test each image together with its mirror image: the prediction is the "
       "mean of the two images' logits")
      ("device-memory-budget",
       po::value(&n.device_memory_budget)->default_value(0),
       "device memory per worker in bytes (0 = no limit); local data that "
       "does not fit lives in host memory (docs/memory-manager.md)")
      ("device", po::value(&flags->device)->default_value(flags->device),
       "host, cuda or auto: the workers' device; on cuda the layers compute "
       "with the CUDA layer backend (not yet run on a GPU: docs/cuda.md)")
      ("test-every-epoch", po::bool_switch(&flags->test_every_epoch),
       "test after every epoch (and print the accuracy), not only after the "
       "last; implied by --curve-csv")
      ("curve-csv", po::value(&flags->curve_csv),
       "write the training curve (time_s,epoch,train_loss,test_loss,"
       "test_accuracy) to this CSV file (tests before training and after "
       "every epoch)");
  // clang-format on
  po::options_description_easy_init add = desc.add_options();
  fmnist::AddCommonFlags(add, flags,
                         "join a multi-process job instead (one worker per process; "
                         "--workers and --shards are ignored)");
  fmnist::AddTrainerFlags(add, &n, "global mini-batch, split evenly over the workers",
                          &flags->lr_schedule);
  if (const int status =
          fmnist::ParseTrainerCommandLine("fmnist_train", desc, argc, argv, flags, &n);
      status >= 0) {
    return status;
  }
  if (flags->device == "host") {
    n.device = geeps::DeviceKind::kHost;
  } else if (flags->device == "cuda") {
    n.device = geeps::DeviceKind::kCuda;
  } else if (flags->device == "auto") {
    n.device = geeps::DeviceKind::kAuto;
  } else {
    return Usage("--device must be host, cuda or auto");
  }
  // The test before training is only seen in the curve (its epoch 0), or as
  // the result of --epochs 0.
  n.evaluate_before = !flags->curve_csv.empty() || n.epochs == 0;
  // The tests after the other epochs cost about a tenth of the job: only
  // when asked, or for the curve.
  n.evaluate_each_epoch = flags->test_every_epoch || !flags->curve_csv.empty();
  fmnist::NetOptions check = n;
  if (flags->processes) check.workers = 1;  // known only after joining
  geeps::Status valid = fmnist::ValidateNetOptions(check);
  if (!valid.ok()) return Usage(valid.message());
  return -1;
}

bool WriteCurve(const std::string& path, const fmnist::NetReport& r) {
  std::ofstream out(path);
  out << "time_s,epoch,train_loss,test_loss,test_accuracy\n";
  out << "0,0,," << r.initial_test.loss << "," << r.initial_test.accuracy << "\n";
  for (const fmnist::NetEpoch& e : r.epochs) {
    out << e.seconds << "," << e.epoch << "," << e.train_loss << "," << e.test.loss << ","
        << e.test.accuracy << "\n";
  }
  return out.good();
}

int Report(const Flags& flags, const fmnist::NetReport& r) {
  const double accuracy =
      r.epochs.empty() ? r.initial_test.accuracy : r.epochs.back().test.accuracy;
  const double train_seconds = r.epochs.empty() ? 0 : r.epochs.back().seconds;
  std::printf("training took %.1f s (%.1f s from start to shutdown)\n", train_seconds,
              r.total_seconds);
  std::printf("final test accuracy: %.4f\n", accuracy);
  if (!flags.curve_csv.empty()) {
    if (!WriteCurve(flags.curve_csv, r)) {
      std::cerr << "fmnist_train: cannot write " << flags.curve_csv << "\n";
      return kExitRuntimeError;
    }
    std::printf("training curve: %s\n", flags.curve_csv.c_str());
  }
  return 0;
}

int RunProcess(const Flags& flags, const fmnist::Dataset& train, const fmnist::Dataset& test) {
  fmnist::WarnIgnoredWithProcesses("fmnist_train", flags);
  fmnist::NetOptions opt = flags.net;
  geeps::StatusOr<nn::Network> net = fmnist::BuildModel(opt.model, opt.dropout);
  if (!net.ok()) return Usage(net.status().message());
  // The layout of the local table depends on the per-worker batch, so the
  // world size must be known before the config: it comes from the launcher.
  geeps::ProcessOptions process_options;
  geeps::Status s = geeps::ApplyEnvironment(&process_options);
  int world = process_options.world_size;
  if (world < 1) {
    const char* env = std::getenv("GEEPS_WORLD_SIZE");
    if (env == nullptr) env = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (env == nullptr) env = std::getenv("SLURM_NTASKS");
    world = env != nullptr ? std::atoi(env) : 1;
  }
  opt.workers = std::max(1, world);
  geeps::Config config = fmnist::MakeNetConfig(opt, *net);
  if (s.ok()) s = geeps::ApplyEnvironment(&config);
  if (!s.ok()) {
    std::cerr << "fmnist_train: " << s.ToString() << "\n";
    return kExitRuntimeError;
  }
  if (flags.given.count("channels") != 0) config.num_channels = opt.channels;
  if (flags.given.count("slack") != 0) config.default_slack = opt.slack;
  if (flags.given.count("timeout-ms") != 0) config.timeout = opt.timeout;
  config.device = opt.device;
  opt.log = &std::cout;
  fmnist::NetReport report;
  bool is_worker0 = false;
  s = fmnist::TrainNetInProcess(opt, config, process_options, train, test, &report, &is_worker0);
  if (!s.ok()) {
    std::cerr << "fmnist_train: training failed: " << s.ToString() << "\n";
    return kExitRuntimeError;
  }
  if (!is_worker0) {
    std::printf("done\n");
    return 0;
  }
  return Report(flags, report);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  const int parsed = ParseFlags(argc, argv, &flags);
  if (parsed >= 0) return parsed;
  const fmnist::NetOptions& opt = flags.net;

  fmnist::Dataset train, test;
  geeps::Status s = fmnist::LoadFashionMnist(
      flags.data_dir, static_cast<uint64_t>(flags.train_limit), &train, &test);
  if (!s.ok()) {
    std::cerr << "fmnist_train: cannot load Fashion-MNIST from " << flags.data_dir << ": "
              << s.message() << "\n"
              << "(install the Debian package dataset-fashion-mnist, or give "
                 "--data-dir)\n";
    return kExitUsage;
  }
  if (train.size() < opt.batch_size) {
    return Usage("only " + std::to_string(train.size()) + " training examples for a batch of " +
                 std::to_string(opt.batch_size));
  }
  if (flags.processes) return RunProcess(flags, train, test);

  geeps::StatusOr<nn::Network> net = fmnist::BuildModel(opt.model, opt.dropout);
  std::printf(
      "model %s (%zu parameters); %lld training, %lld test images\n"
      "%d workers, %d shards, slack %d, global batch %d, lr %g (%s), "
      "momentum %g, %d epochs\n",
      net->Describe().c_str(), net->num_params(), static_cast<long long>(train.size()),
      static_cast<long long>(test.size()), opt.workers, opt.shards, opt.slack, opt.batch_size,
      opt.learning_rate, fmnist::DescribeLrSchedule(opt).c_str(), opt.momentum, opt.epochs);
  std::fflush(stdout);
  fmnist::NetOptions run = opt;
  run.log = &std::cout;
  fmnist::NetReport report;
  s = fmnist::TrainNet(run, train, test, &report);
  if (!s.ok()) {
    std::cerr << "fmnist_train: training failed: " << s.ToString() << "\n";
    return kExitRuntimeError;
  }
  return Report(flags, report);
}
