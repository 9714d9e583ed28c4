// A network larger than the device memory budget, trained through libgeeps'
// memory manager on synthetic data (issue 6): the big-mlp model
// (net_trainer.h) with its parameters, activations, gradients and momentum
// several times the budget, trained once under the budget and once without
// one, in the same process. The big_net binary prints the figures;
// tests/big_net_test.cc checks the budgeted run against the free one.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_BIG_NET_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_BIG_NET_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "geeps/config.h"  // DeviceKind
#include "geeps/status.h"
#include "net_trainer.h"

namespace fmnist {

struct BigNetOptions {
  std::string model = "big-mlp";
  int iterations = 60;  // of one global batch, in one epoch
  int batch_size = 256;
  int workers = 1;
  double oversubscription = 4;  // (parameter + local bytes) / budget
  double copy_gbs = 12;         // emulated host<->device bandwidth, 0 = off
                                // (host backend only: a GPU copies for real)
  // The workers' device (NetOptions::device): kCuda trains with the CUDA
  // layer backend on libgeeps' compute stream (TrainNetWorker picks it from
  // the worker's device), and fails at start where there is no GPU; kAuto
  // takes the GPU where there is one.
  geeps::DeviceKind device = geeps::DeviceKind::kHost;
  float learning_rate = 0.01f;
  float momentum = 0.9f;
  int test_size = 512;  // synthetic examples evaluated before and after
  uint64_t seed = 1;
  std::ostream* log = nullptr;  // progress; null = silent
};

// One training run's figures.
struct BigNetRun {
  uint64_t budget = 0;  // 0: none
  double seconds = 0;   // training time (evaluation excluded)
  double samples_per_second = 0;
  double stall_seconds = 0;  // WorkerStats::memory_stall_seconds (worker 0)
  int64_t bytes_host_to_device = 0, bytes_device_to_host = 0;
  uint64_t pool_bytes = 0, pool_high_water = 0;
  double loss_before = 0, loss_after = 0;  // synthetic test set
  NetReport report;
  double stall_fraction() const { return seconds > 0 ? stall_seconds / seconds : 0; }
};

struct BigNetResult {
  std::string model;  // Network::Describe()
  size_t num_params = 0;
  uint64_t param_bytes = 0;       // shared tables "params*" (rows x width x 4)
  uint64_t local_bytes = 0;       // local table "local", per worker
  uint64_t activation_bytes = 0;  // of which activations and their gradients
  uint64_t optimizer_bytes = 0;   // weight gradients and momentum
  uint64_t scratch_bytes = 0;     // layers' scratch space
  BigNetRun budgeted, unbudgeted;
  bool weights_identical = false;  // bitwise, budgeted vs unbudgeted
  double oversubscription() const {
    return budgeted.budget ? static_cast<double>(param_bytes + local_bytes) /
                                 static_cast<double>(budgeted.budget)
                           : 0;
  }
  double relative_throughput() const {
    return unbudgeted.samples_per_second > 0
               ? budgeted.samples_per_second / unbudgeted.samples_per_second
               : 0;
  }
};

// Trains options.model on synthetic data with the device memory budget
// (param_bytes + local_bytes) / oversubscription, then without a budget.
geeps::Status RunBigNet(const BigNetOptions& options, BigNetResult* result);

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_BIG_NET_H_
