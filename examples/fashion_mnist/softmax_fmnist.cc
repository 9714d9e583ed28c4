// softmax_fmnist: distributed softmax regression on Fashion-MNIST with
// libgeeps, on an embedded cluster (one thread per worker, one per shard),
// or with --processes as one process of a multi-process job.
//
//   softmax_fmnist [--workers 2] [--epochs 3] [--batch-size 64] [--lr 0.15]
//                  [--slack 0] [--data-dir DIR] [--train-limit N] ...
//   geeps_launch -n 2 softmax_fmnist --processes [--epochs 3] ...
//
// With --processes, the process joins the job of its launcher (geeps_launch,
// mpirun, srun: rank and world size from GEEPS_RANK/GEEPS_WORLD_SIZE,
// OpenMPI's or Slurm's variables, the coordinator from GEEPS_COORDINATOR; see
// docs/operations.md) and trains its one worker; --workers and --shards are
// then ignored (one worker and one shard per process, or as GEEPS_ROLE says).
// The GEEPS_* config variables apply (GEEPS_TIMEOUT_MS, ...), except where
// the command line gives --channels, --slack, --read-my-writes or
// --timeout-ms. The process of worker 0 prints the per-epoch lines and the
// final test accuracy; every other one prints "rank R: worker W done".
//
// Exit status: 0 trained; 1 the data could not be loaded or libgeeps failed;
// 2 bad command line.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <set>
#include <string>

#include <boost/program_options.hpp>

#include "command_line.h"
#include "geeps/config.h"
#include "geeps/process.h"
#include "softmax_model.h"
#include "softmax_process.h"
#include "softmax_trainer.h"

namespace po = boost::program_options;

namespace {

using fmnist::kExitRuntimeError;
using fmnist::kExitUsage;

struct Flags : fmnist::CommonFlags {
  Flags() { timeout_ms = 30000; }
  fmnist::TrainOptions train;
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
       "workers (one thread each); each trains on its own shard of the data "
       "(ignored with --processes: one worker per process)")
      ("shards", po::value(&t.shards)->default_value(t.shards),
       "parameter server shards (ignored with --processes: one per process)")
      ("read-my-writes", po::bool_switch(&t.read_my_writes),
       "a worker sees its own updates at once (useful with --slack > 0)");
  // clang-format on
  po::options_description_easy_init add = desc.add_options();
  fmnist::AddCommonFlags(add, flags,
                         "join a multi-process job (geeps_launch, mpirun, srun) and train one "
                         "worker in this process; --workers and --shards are ignored");
  fmnist::AddTrainerFlags(add, &t, "mini-batch size per worker", &flags->lr_schedule);
  if (const int status =
          fmnist::ParseTrainerCommandLine("softmax_fmnist", desc, argc, argv, flags, &t);
      status >= 0) {
    return status;
  }
  geeps::Status valid = fmnist::ValidateTrainOptions(t);
  if (!valid.ok()) return fmnist::UsageError("softmax_fmnist", valid.message());
  return -1;
}

// --processes: joins the job, trains this process's worker, reports.
int RunProcess(const Flags& flags, const fmnist::Dataset& train, const fmnist::Dataset& test) {
  fmnist::WarnIgnoredWithProcesses("softmax_fmnist", flags);
  fmnist::TrainOptions opt = flags.train;
  geeps::Config config = fmnist::MakeConfig(opt, train);
  geeps::Status s = geeps::ApplyEnvironment(&config);
  geeps::ProcessOptions process_options;
  if (s.ok()) s = geeps::ApplyEnvironment(&process_options);
  if (!s.ok()) {
    std::cerr << "softmax_fmnist: " << s.ToString() << "\n";
    return kExitRuntimeError;
  }
  // The command line wins over GEEPS_* variables; the gradient is computed
  // on the host, straight from the Read buffers.
  if (flags.given.count("channels") != 0) config.num_channels = opt.channels;
  if (flags.given.count("slack") != 0) config.default_slack = opt.slack;
  if (flags.given.count("read-my-writes") != 0) {
    config.read_my_writes = opt.read_my_writes;
  }
  if (flags.given.count("timeout-ms") != 0) config.timeout = opt.timeout;
  config.device = geeps::DeviceKind::kHost;

  opt.log = &std::cout;
  fmnist::ProcessReport report;
  s = fmnist::TrainInProcess(opt, config, process_options, train, test, &report);
  if (!s.ok()) {
    std::cerr << "softmax_fmnist: training failed: " << s.ToString() << "\n";
    if (!report.worker_stats_json.empty()) {
      std::cerr << "worker " << report.worker << " stats: " << report.worker_stats_json << "\n";
    }
    return kExitRuntimeError;
  }
  if (report.worker != 0) {
    if (report.worker > 0) {
      std::printf("rank %d: worker %d done\n", report.rank, report.worker);
    } else {
      std::printf("rank %d: shard only, done\n", report.rank);
    }
    return 0;
  }
  const fmnist::WorkerReport& w = report.worker_report;
  const double accuracy =
      w.epochs.empty() ? w.initial_test.accuracy : w.epochs.back().test.accuracy;
  std::printf("training took %.2f s (join to shutdown)\n", report.total_seconds);
  std::printf("worker 0 stats: %s\n", report.worker_stats_json.c_str());
  std::printf("final test accuracy: %.4f\n", accuracy);
  return 0;
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
    std::cerr << "softmax_fmnist: cannot load Fashion-MNIST: " << s.ToString() << "\n";
    return kExitRuntimeError;
  }
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  if (flags.processes) return RunProcess(flags, train, test);
  if (train.size() < opt.workers) {
    std::cerr << "softmax_fmnist: " << train.size() << " training examples are too few for "
              << opt.workers << " workers\n";
    return kExitUsage;
  }
  std::printf(
      "loaded %lld training and %lld test images of %d pixels in %.2f s\n"
      "training: %d workers, %d shards, %d channels, slack %d%s, batch %d per "
      "worker, lr %g (%s), momentum %g, %d epochs\n",
      static_cast<long long>(train.size()), static_cast<long long>(test.size()), train.dim,
      load_seconds, opt.workers, opt.shards, opt.channels, opt.slack,
      opt.read_my_writes ? " (read-my-writes)" : "", opt.batch_size, opt.learning_rate,
      fmnist::DescribeLrSchedule(opt).c_str(), opt.momentum, opt.epochs);
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
  const double accuracy =
      report.epochs.empty() ? report.initial_test.accuracy : report.epochs.back().test.accuracy;
  std::printf("training took %.2f s (cluster start to shutdown)\n", report.total_seconds);
  std::printf("worker 0 stats: %s\n", report.worker0_stats_json.c_str());
  std::printf("final test accuracy: %.4f\n", accuracy);
  return 0;
}
