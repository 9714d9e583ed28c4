#include "softmax_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <utility>

#include "annotate.h"
#include "geeps/step.h"

namespace fmnist {
namespace {

using geeps::Status;
using geeps::StatusCode;
using Clock = std::chrono::steady_clock;

constexpr geeps::TableId kTable = 0;

std::vector<float> InitialParams(const TrainOptions& options, int dim, int classes) {
  std::vector<float> params(NumParams(dim, classes), 0.0f);
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<float> normal(0.0f, options.init_stddev);
  const size_t weights = static_cast<size_t>(dim) * classes;
  if (options.init_stddev > 0) {
    for (size_t j = 0; j < weights; ++j) params[j] = normal(rng);
  }
  return params;
}

}  // namespace

Status ValidateTrainOptions(const TrainOptions& o) {
  GEEPS_RETURN_IF_ERROR(ValidateTrainerOptions(o));
  if (!std::isfinite(o.init_stddev) || o.init_stddev < 0) {
    return Status(StatusCode::kInvalidArgument, "init stddev must be >= 0");
  }
  return Status::OK();
}

Status ValidateDatasets(const Dataset& train, const Dataset& test, int workers) {
  if (train.dim < 1 || train.num_classes < 2 || train.dim != test.dim ||
      train.num_classes != test.num_classes || test.size() < 1) {
    return Status(StatusCode::kInvalidArgument,
                  "the training and test sets must be non-empty and agree in "
                  "dim and num_classes");
  }
  if (workers < 1 || train.size() < workers) {
    return Status(StatusCode::kInvalidArgument, "only " + std::to_string(train.size()) +
                                                    " training examples for " +
                                                    std::to_string(workers) + " workers");
  }
  return Status::OK();
}

geeps::Config MakeConfig(const TrainOptions& options, const Dataset& train) {
  geeps::Config config;
  const uint64_t num_rows = static_cast<uint64_t>(train.dim) + 1;
  config.tables.push_back(geeps::TableSpec{"softmax_params", num_rows,
                                           static_cast<uint32_t>(train.num_classes),
                                           /*local=*/false});
  config.num_workers = options.workers;
  config.num_shards = options.shards;
  config.num_channels = options.channels;
  config.default_slack = options.slack;
  config.read_my_writes = options.read_my_writes;
  config.device = geeps::DeviceKind::kHost;
  config.timeout = options.timeout;
  return config;
}

Status TrainWorker(const TrainOptions& opt, const Dataset& train, const Dataset& test,
                   geeps::GeePS& ps, int workers, WorkerReport* out, EpochBoard* board) {
  const int rank = ps.rank();
  *out = WorkerReport();
  out->worker = rank;
  if (workers != ps.num_workers()) {
    return Status(StatusCode::kInvalidArgument, "worker " + std::to_string(rank) +
                                                    ": TrainWorker for " + std::to_string(workers) +
                                                    " workers, but the job has " +
                                                    std::to_string(ps.num_workers()));
  }
  const size_t num_params = NumParams(train.dim, train.num_classes);
  const std::vector<geeps::RowIndex> rows =
      geeps::RowRange(0, static_cast<uint64_t>(train.dim) + 1);

  // ---- This worker's shard: examples rank, rank + workers, ... ----
  std::vector<int64_t> shard;
  for (int64_t i = rank; i < train.size(); i += workers) shard.push_back(i);
  // Every worker must run the same number of iterations (clocks), so the
  // count comes from the smallest shard; the last batch takes the rest. So
  // every worker goes over its whole shard: train.size() examples per epoch
  // over all workers.
  const int64_t smallest_shard = train.size() / workers;
  const int64_t iterations = (smallest_shard + opt.batch_size - 1) / opt.batch_size;
  std::seed_seq seeds{opt.seed, static_cast<uint64_t>(rank), uint64_t{0x5eed}};
  std::mt19937_64 rng(seeds);

  std::vector<float> grad(num_params);
  std::vector<float> velocity(num_params, 0.0f);
  // This model computes on the host: the read parameters and the deltas
  // cross between host and device memory (a GPU's, on CUDA) through the
  // worker's copies, inside Step::Compute (skipped while the Step records).
  std::vector<float> current(num_params), delta(num_params);
  std::vector<float> params;  // worker 0: copies for evaluation

  // ---- Worker 0's prologue (initial values) and the iteration, written
  // once each: the Step records them, then runs them (include/geeps/step.h).
  auto prologue = [&](geeps::Step& s) -> Status {
    if (rank != 0) return Status::OK();
    EX_ASSIGN(geeps::MutableRows init, s.PreUpdate(kTable, rows), "PreUpdate (prologue)");
    EX_CHECK(s.Compute([&] {
      params = InitialParams(opt, train.dim, train.num_classes);
      out->initial_test = Evaluate(params.data(), test);
      // Device memory (GPU memory on CUDA): filled through the worker.
      return ps.CopyFromHost(init.data, params.data(), params.size());
    }),
             "CopyFromHost (prologue)");
    return Annotate(s.Update(init), rank, "Update (prologue)");
  };
  // The batch of the next iteration (examples shard[begin, begin + n)), its
  // update's scale, and the epoch's sums so far.
  int64_t begin = 0;
  size_t n = 0;
  float scale = 0;
  double loss_sum = 0;
  int64_t samples = 0;
  auto iteration = [&](geeps::Step& s) -> Status {
    EX_ASSIGN(geeps::ConstRows read, s.Read(kTable, rows, opt.slack), "Read");
    EX_CHECK(s.Compute([&]() -> Status {
      GEEPS_RETURN_IF_ERROR(ps.CopyToHost(current.data(), read.data, num_params));
      loss_sum += n * LossAndGradient(current.data(), train, shard.data() + begin, n, grad.data());
      samples += static_cast<int64_t>(n);
      return Status::OK();
    }),
             "CopyToHost");
    EX_CHECK(s.PostRead(read), "PostRead");
    EX_ASSIGN(geeps::MutableRows update, s.PreUpdate(kTable, rows), "PreUpdate");
    EX_CHECK(s.Compute([&] {
      for (size_t j = 0; j < num_params; ++j) {
        velocity[j] = opt.momentum * velocity[j] + grad[j];
        delta[j] = scale * velocity[j];
      }
      return ps.CopyFromHost(update.data, delta.data(), num_params);
    }),
             "CopyFromHost");
    EX_CHECK(s.Update(update), "Update");
    return Annotate(s.Clock(), rank, "Clock");
  };
  // The Step reads the tables' widths from the config (the job's is the
  // same: MakeConfig's tables).
  geeps::Step step(ps, MakeConfig(opt, train));
  EX_CHECK(step.Start(prologue, iteration), "Step::Start");

  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    std::shuffle(shard.begin(), shard.end(), rng);
    const float lr = LearningRate(opt, epoch, 0, iterations);  // its first iteration's
    const Clock::time_point start = Clock::now();
    loss_sum = 0;
    samples = 0;
    for (int64_t it = 0; it < iterations; ++it) {
      begin = it * opt.batch_size;
      const int64_t end =
          it + 1 == iterations ? static_cast<int64_t>(shard.size()) : begin + opt.batch_size;
      n = static_cast<size_t>(end - begin);
      scale = -LearningRate(opt, epoch, it, iterations) / static_cast<float>(workers);
      EX_CHECK(step.RunIteration(), "iteration");
    }
    out->own_train_loss.push_back(loss_sum / static_cast<double>(samples));
    if (board != nullptr) board->Report(epoch, loss_sum, samples);
    if (rank != 0) continue;

    // Worker 0: the epoch's loss (over all workers when they share a board),
    // then the test set on the parameters after every worker's last update
    // of the epoch.
    EpochReport er;
    er.epoch = epoch + 1;
    EX_CHECK(EpochMeanLoss(board, epoch, opt.timeout, loss_sum, samples, &er.train_loss,
                           &er.all_workers_loss),
             "waiting for the epoch's losses");
    er.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const int64_t epoch_samples = train.size();  // over all workers
    er.samples_per_second = static_cast<double>(epoch_samples) / er.seconds;
    EX_CHECK(ps.Sync(), "Sync");
    EX_CHECK(ps.CopyRows(kTable, rows, params.data()), "CopyRows");
    er.test = Evaluate(params.data(), test);
    out->epochs.push_back(er);
    if (opt.log != nullptr) {
      char line[256];
      std::snprintf(line, sizeof(line),
                    "epoch %d/%d: %lld samples in %.2f s (%.0f samples/s), "
                    "lr %.4g, %s train loss %.4f, test loss %.4f, "
                    "test accuracy %.4f\n",
                    er.epoch, opt.epochs, static_cast<long long>(epoch_samples), er.seconds,
                    er.samples_per_second, lr, er.all_workers_loss ? "mean" : "worker 0",
                    er.train_loss, er.test.loss, er.test.accuracy);
      *opt.log << line << std::flush;
    }
  }
  if (rank == 0) out->final_params = std::move(params);
  return Status::OK();
}

Status TrainSoftmax(const TrainOptions& options, const Dataset& train, const Dataset& test,
                    TrainReport* report) {
  GEEPS_RETURN_IF_ERROR(ValidateTrainOptions(options));
  GEEPS_RETURN_IF_ERROR(ValidateDatasets(train, test, options.workers));
  *report = TrainReport();
  const Clock::time_point start = Clock::now();

  std::vector<WorkerReport> workers(options.workers);
  geeps::WorkerStats stats;
  Status run = RunOnEmbeddedCluster(
      MakeConfig(options, train), options.epochs,
      [&](geeps::GeePS& ps, EpochBoard* board) {
        return TrainWorker(options, train, test, ps, options.workers, &workers[ps.rank()], board);
      },
      &stats);
  report->worker0_stats_json = stats.ToJson();
  report->total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  report->initial_test = workers[0].initial_test;
  report->epochs = std::move(workers[0].epochs);
  report->final_params = std::move(workers[0].final_params);
  GEEPS_RETURN_IF_ERROR(run);
  if (report->final_params.empty()) {
    report->final_params = InitialParams(options, train.dim, train.num_classes);
  }
  return Status::OK();
}

}  // namespace fmnist
