// The Fashion-MNIST trainer as one process of a multi-process libgeeps job
// (geeps::Process, started by geeps_launch, mpirun or srun): the same
// per-worker loop (TrainWorker) as the embedded cluster, one worker per
// process. Worker r trains on examples r, r + W, ... as in TrainSoftmax, so
// under BSP the math is the same as an embedded run with W workers.
//
// Each process knows only its own losses: worker 0 reports its own mean
// train loss per epoch ("worker 0 train loss"), evaluates the test set after
// every epoch and keeps the final parameters.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_PROCESS_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_PROCESS_H_

#include <string>

#include "geeps/config.h"
#include "geeps/process.h"
#include "geeps/status.h"
#include "softmax_model.h"
#include "softmax_trainer.h"

namespace fmnist {

struct ProcessReport {
  int rank = -1;  // this process's rank in the job (-1: Join failed)
  int world_size = 0;
  int worker = -1;      // its worker's rank among the workers; -1: none (a
                        // server-only process, GEEPS_ROLE=server)
  int num_workers = 0;  // of the job, from the processes' roles
  int num_shards = 0;
  WorkerReport worker_report;     // when worker >= 0
  std::string worker_stats_json;  // WorkerStats::ToJson() of this worker
  double total_seconds = 0;       // Join to Shutdown
};

// Joins the job (geeps::Process::Join(config, process_options)), trains this
// process's worker with TrainWorker, then leaves (Process::Shutdown, which
// waits for the other processes). config is as from MakeConfig; its
// num_workers and num_shards are ignored (the job's come from the roles),
// and options' channels, slack, read_my_writes and timeout are taken from it.
// Worker 0 writes a line about the job and one per epoch to options.log.
// Errors: Join's, ValidateDatasets' for the job's worker count, and
// TrainWorker's, prefixed with the rank.
geeps::Status TrainInProcess(const TrainOptions& options, const geeps::Config& config,
                             const geeps::ProcessOptions& process_options, const Dataset& train,
                             const Dataset& test, ProcessReport* report);

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_PROCESS_H_
