#include "softmax_process.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <utility>

#include "annotate.h"

namespace fmnist {
namespace {

using geeps::Status;
using Clock = std::chrono::steady_clock;

Status WithRank(const Status& s, int rank) {
  if (s.ok()) return s;
  return Status(s.code(), "rank " + std::to_string(rank) + ": " + s.message());
}

}  // namespace

Status TrainInProcess(const TrainOptions& options, const geeps::Config& config,
                      const geeps::ProcessOptions& process_options, const Dataset& train,
                      const Dataset& test, ProcessReport* report) {
  *report = ProcessReport();
  TrainOptions opt = options;
  opt.channels = config.num_channels;
  opt.slack = config.default_slack;
  opt.read_my_writes = config.read_my_writes;
  opt.timeout = config.timeout;
  GEEPS_RETURN_IF_ERROR(ValidateTrainOptions(opt));
  const Clock::time_point start = Clock::now();

  GEEPS_ASSIGN_OR_RETURN(std::unique_ptr<geeps::Process> process,
                         Context(geeps::Process::Join(config, process_options), "Process::Join"));
  const int rank = process->rank();
  report->rank = rank;
  report->world_size = process->world_size();
  report->num_workers = process->config().num_workers;
  report->num_shards = process->config().num_shards;

  Status run = ValidateDatasets(train, test, report->num_workers);
  geeps::GeePS* ps = process->worker();
  if (run.ok() && ps != nullptr) {
    report->worker = ps->rank();
    if (ps->rank() == 0 && opt.log != nullptr) {
      char line[512];
      std::snprintf(line, sizeof(line),
                    "joined a job of %d processes as rank %d (worker 0): %d workers, %d "
                    "shards, %d channels\n"
                    "training on %lld examples (test: %lld): slack %d%s, batch %d per "
                    "worker, lr %g (%s), momentum %g, %d epochs\n",
                    report->world_size, rank, report->num_workers, report->num_shards,
                    config.num_channels, static_cast<long long>(train.size()),
                    static_cast<long long>(test.size()), opt.slack,
                    opt.read_my_writes ? " (read-my-writes)" : "", opt.batch_size,
                    opt.learning_rate, DescribeLrSchedule(opt).c_str(), opt.momentum, opt.epochs);
      *opt.log << line << std::flush;
    }
    run = TrainWorker(opt, train, test, *ps, report->num_workers, &report->worker_report);
    report->worker_stats_json = ps->GetStats().ToJson();
  }
  // Leave the job even after an error, so that the others learn of it.
  Status shutdown = process->Shutdown();
  report->total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!run.ok()) return WithRank(run, rank);
  return WithRank(Context(shutdown, "Process::Shutdown"), rank);
}

}  // namespace fmnist
