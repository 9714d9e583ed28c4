// Distributed softmax regression on libgeeps: data-parallel SGD with the
// model in one shared table, run on an EmbeddedCluster (one thread per
// worker). Used by the softmax_fmnist binary and by the tests.
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

#include "geeps/status.h"
#include "softmax_model.h"

namespace fmnist {

struct TrainOptions {
  int workers = 2;
  int shards = 1;
  int channels = 1;
  int epochs = 3;
  int batch_size = 64;  // per worker
  float learning_rate = 0.15f;
  float lr_decay = 0.2f;  // learning rate of epoch e (from 0): lr * decay^e
  float momentum = 0.9f;
  int slack = 0;                // 0 = BSP
  bool read_my_writes = false;  // Config::read_my_writes
  uint64_t seed = 1;
  float init_stddev = 0.01f;  // initial weights ~ N(0, stddev); biases 0
  std::chrono::milliseconds timeout{30000};
  // Progress lines (one per epoch) go here; nullptr = silent.
  std::ostream* log = nullptr;
};

// Checks the options; kInvalidArgument naming the first bad one.
geeps::Status ValidateTrainOptions(const TrainOptions& options);

struct EpochReport {
  int epoch = 0;          // from 1
  double train_loss = 0;  // mean mini-batch loss over all workers' examples
  double seconds = 0;     // wall time of the epoch's iterations (worker 0)
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

// Trains on `train` (worker r gets examples r, r + workers, ...; each worker
// shuffles its shard every epoch), evaluating on `test` after every epoch.
// Every libgeeps error is returned, prefixed with the worker and the call.
// REQUIRES: train.size() >= options.workers; train and test have the same
// dim and num_classes.
geeps::Status TrainSoftmax(const TrainOptions& options, const Dataset& train,
                           const Dataset& test, TrainReport* report);

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_SOFTMAX_TRAINER_H_
