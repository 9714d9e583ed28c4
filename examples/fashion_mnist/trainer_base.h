// What the example trainers (softmax_trainer and net_trainer) share: the
// options of the cluster's shape and of the optimiser's schedule, their
// checks and command-line flags, the board on which the workers of one
// process post their epoch losses, and the run of a training function on
// every worker of an embedded cluster.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_TRAINER_BASE_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_TRAINER_BASE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "geeps/config.h"
#include "geeps/geeps.h"
#include "geeps/stats.h"
#include "geeps/status.h"

namespace fmnist {

// kStep: lr * lr_decay^epoch, the same for every iteration of an epoch.
// kCosine: per iteration, from lr at the first one down to 0 after the last,
// along half a cosine (lr_decay must stay 1).
enum class LrSchedule { kStep, kCosine };

// The options every trainer has. Each trainer's options derive from it and
// set their own defaults; batch_size is per worker for the softmax trainer
// and global for the net trainer (their headers say which).
struct TrainerOptions {
  int workers = 2;
  int shards = 1;
  int channels = 1;
  int epochs = 3;
  int batch_size = 64;
  float learning_rate = 0.05f;
  float lr_decay = 1.0f;
  LrSchedule lr_schedule = LrSchedule::kStep;
  float momentum = 0.9f;  // 0 = plain SGD
  int slack = 0;          // 0 = BSP
  uint64_t seed = 1;
  std::chrono::milliseconds timeout{60000};  // longest wait for a peer
  std::ostream* log = nullptr;               // progress and epoch lines; null = silent
};

// kInvalidArgument naming the first bad option of `options`.
geeps::Status ValidateTrainerOptions(const TrainerOptions& options);

// The learning rate of iteration t (from 0) of epoch `epoch` (from 0), each
// epoch having `steps` iterations, under options.lr_schedule.
float LearningRate(const TrainerOptions& options, int epoch, int64_t t, int64_t steps);

// "step" or "cosine" into *schedule; false (and *schedule unchanged) for
// another name.
bool ParseLrSchedule(const std::string& name, LrSchedule* schedule);
// "decay 0.7 per epoch" or "cosine to 0", for a trainer's first line.
std::string DescribeLrSchedule(const TrainerOptions& options);

// Where the workers of one process post their per-epoch loss so that worker
// 0 can report the mean over all of them. A worker that fails aborts the
// board, so that worker 0 never waits for a report that will not come.
class EpochBoard {
 public:
  EpochBoard(int workers, int epochs);
  void Report(int epoch, double loss_sum, int64_t samples);
  void Abort();
  // Waits until every worker has reported `epoch` (from 0): the sums of
  // their losses and samples. kCancelled after Abort(), kDeadlineExceeded
  // after `timeout`.
  geeps::Status Wait(int epoch, std::chrono::milliseconds timeout, double* loss_sum,
                     int64_t* samples);

 private:
  const int workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<double> loss_sum_;  // GUARDED_BY(mu_)
  std::vector<int64_t> samples_;  // GUARDED_BY(mu_)
  std::vector<int> reported_;     // GUARDED_BY(mu_)
  bool aborted_ = false;          // GUARDED_BY(mu_)
};

// Worker 0's mean loss of epoch `epoch`: over every worker's examples when
// the workers share `board` (each of them, worker 0 too, has Reported its
// own first), else over its own (`loss_sum` over `samples` examples).
// *all_workers says which.
geeps::Status EpochMeanLoss(EpochBoard* board, int epoch, std::chrono::milliseconds timeout,
                            double loss_sum, int64_t samples, double* mean, bool* all_workers);

// Starts an embedded cluster with `config`, runs `train(ps, board)` on each
// of its workers (they share one EpochBoard of config.num_workers workers
// and `epochs` epochs, aborted when a worker fails), takes worker 0's
// stats into *worker0_stats, and shuts the cluster down. The first worker's
// error, else the shutdown's; each prefixed with what failed.
geeps::Status RunOnEmbeddedCluster(
    const geeps::Config& config, int epochs,
    const std::function<geeps::Status(geeps::GeePS& ps, EpochBoard* board)>& train,
    geeps::WorkerStats* worker0_stats);

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_TRAINER_BASE_H_
