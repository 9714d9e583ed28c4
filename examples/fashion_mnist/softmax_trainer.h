// Distributed softmax regression on libgeeps: data-parallel SGD with the
// model in one shared table. TrainSoftmax runs it on an EmbeddedCluster (one
// thread per worker); TrainWorker is the loop of one worker, for any GeePS
// object (an embedded cluster's or a geeps::Process's, see
// softmax_process.h). Used by the softmax_fmnist binary and by the tests.
//
// Table layout: table 0, NumParams(dim, classes) / classes rows of row_width
// num_classes (see softmax_model.h): row i < dim = weights of pixel i, row
// dim = biases.
//
// Per worker, the recorded (virtual) iteration is
//   Read(all rows, slack) ; PostRead ; PreUpdate(all rows) ; Update ; Clock
// and worker 0's prologue (after VirtualClock) is PreUpdate + Update of all
// rows, which writes the initial values. In each real iteration a worker
// computes the gradient of its mini-batch from the rows it read, and sends
// -lr * v / num_workers, where v = momentum * v + gradient is kept by the
// worker (momentum 0: plain SGD). The server-side sum over the workers is
// then one step on the average gradient.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_TRAINER_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_TRAINER_H_

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "geeps/config.h"
#include "geeps/geeps.h"
#include "geeps/status.h"
#include "softmax_model.h"
#include "trainer_base.h"

namespace fmnist {

// TrainerOptions (trainer_base.h) with this trainer's defaults; batch_size
// is per worker.
struct TrainOptions : TrainerOptions {
  TrainOptions() {
    learning_rate = 0.15f;
    lr_decay = 0.2f;
    timeout = std::chrono::milliseconds(30000);
  }
  bool read_my_writes = false;  // Config::read_my_writes
  float init_stddev = 0.01f;    // initial weights ~ N(0, stddev); biases 0
};

// Checks the options; kInvalidArgument naming the first bad one.
geeps::Status ValidateTrainOptions(const TrainOptions& options);

// Checks that the data sets are non-empty, agree in dim and num_classes, and
// that there are at least `workers` training examples; kInvalidArgument.
geeps::Status ValidateDatasets(const Dataset& train, const Dataset& test, int workers);

// The job's config for `options` on `train`: table 0 (see above), shards,
// channels, slack, read_my_writes, timeout, and the host device (the
// gradient is computed on the host, straight from the Read buffer).
geeps::Config MakeConfig(const TrainOptions& options, const Dataset& train);

struct EpochReport {
  int epoch = 0;  // from 1
  // Mean mini-batch loss over all workers' examples when the workers share an
  // EpochBoard (TrainSoftmax); over worker 0's own examples otherwise
  // (all_workers_loss false, e.g. one worker per process).
  double train_loss = 0;
  bool all_workers_loss = true;
  double seconds = 0;             // wall time of the epoch's iterations (worker 0)
  double samples_per_second = 0;  // all workers' examples / seconds
  Evaluation test;                // of the parameters after the epoch
};

struct TrainReport {
  Evaluation initial_test;  // of the initial parameters
  std::vector<EpochReport> epochs;
  double total_seconds = 0;         // cluster start to shutdown
  std::string worker0_stats_json;   // WorkerStats::ToJson() of worker 0
  std::vector<float> final_params;  // as worker 0 saw them after the last epoch
};

// What one worker's TrainWorker saw. The evaluations are worker 0's only.
struct WorkerReport {
  int worker = -1;                     // its rank among the workers
  std::vector<double> own_train_loss;  // per epoch, over its own examples
  // Worker 0 only (empty elsewhere):
  Evaluation initial_test;          // of the initial parameters
  std::vector<EpochReport> epochs;  // after each epoch
  std::vector<float> final_params;  // as worker 0 saw them after the last
                                    // epoch (the initial ones with 0 epochs)
};

// The training loop of one worker `ps` of a job of `num_workers` workers
// whose config is MakeConfig(options, train) (up to shards and channels):
// records the virtual iteration (and worker 0's prologue, which writes the
// initial parameters), then trains options.epochs epochs on its shard,
// examples ps.rank(), ps.rank() + num_workers, ... Worker 0 evaluates `test`
// before training and after every epoch (Sync, CopyRows) and prints one line
// per epoch to options.log. With `board` (every worker of the job in this
// process posts there), worker 0's epoch loss is the mean over all workers;
// without, over its own examples. Errors are prefixed with the worker and
// the call. REQUIRES: ValidateDatasets(train, test, num_workers) is OK.
geeps::Status TrainWorker(const TrainOptions& options, const Dataset& train, const Dataset& test,
                          geeps::GeePS& ps, int num_workers, WorkerReport* out,
                          EpochBoard* board = nullptr);

// Trains on `train` (worker r gets examples r, r + workers, ...; each worker
// shuffles its shard every epoch) on an embedded cluster of options.workers
// workers, evaluating on `test` after every epoch. Every libgeeps error is
// returned, prefixed with the worker and the call.
// REQUIRES: train.size() >= options.workers; train and test have the same
// dim and num_classes.
geeps::Status TrainSoftmax(const TrainOptions& options, const Dataset& train, const Dataset& test,
                           TrainReport* report);

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_TRAINER_H_
