// Data-parallel training of a feed-forward network (examples/layers) on
// libgeeps, the way GeePS trainers work. docs/examples.md walks through it.
//
// Tables (MakeNetConfig, MakeLayout):
//   0..P-1 "params0".."params<P-1>" (shared, row width kParamRowWidth): one
//     per layer with parameters, RowsFor(num_params, width) rows holding its
//     weights, then its biases. One table per layer makes each layer's
//     Update the only one of its table per clock: a direct update.
//   P "local" (local, row width kLocalRowWidth): this worker's activations,
//     their gradients, the weight gradients, the momentum and the layers'
//     scratch space, each a range of rows.
//
// One iteration = one global mini-batch of options.batch_size examples;
// worker r of W takes the r-th slice of batch_size / W examples, and the
// loss gradient is scaled by 1 / batch_size. Each worker keeps its momentum
// v and sends -lr * v; the servers add the W deltas, so under BSP W workers
// take exactly the steps of one worker with the whole global batch (up to
// float rounding).
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_NET_TRAINER_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_NET_TRAINER_H_

#include <chrono>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "geeps/config.h"
#include "geeps/geeps.h"
#include "geeps/process.h"
#include "geeps/stats.h"
#include "geeps/status.h"
#include "layers.h"
#include "net_layout.h"
#include "softmax_model.h"  // Dataset, LoadFashionMnist
#include "trainer_base.h"

namespace fmnist {

// TrainerOptions (trainer_base.h: the cluster's shape, the learning rate and
// its schedule, momentum, slack, seed, timeout, log) and this trainer's own;
// batch_size is global: split over the workers.
struct NetOptions : TrainerOptions {
  std::string model = "cnn";  // "mlp", "cnn", "cnn-gn", "cnn-wide" or "big-mlp" (BuildModel)
  float weight_decay = 0.0f;  // L2: weight_decay * w added to each gradient
  float dropout = 0.0f;       // BuildModel's dropout rate (0 = none)
  uint64_t device_memory_budget = 0;  // bytes per worker, 0 = none
  // Config::device of MakeNetConfig. The worker computes with the CUDA layer
  // backend (nn::MakeCudaBackend) when libgeeps gives it a CUDA device, else
  // with the host backend. kHost by default: the CUDA layer backend has not
  // yet run on a GPU (docs/cuda.md).
  geeps::DeviceKind device = geeps::DeviceKind::kHost;
  // Config::memory_guarantee and Config::emulated_copy_bandwidth (bytes/s,
  // 0 = off) of the job.
  geeps::MemoryGuarantee memory_guarantee = geeps::MemoryGuarantee::kDoubleBuffering;
  uint64_t emulated_copy_bandwidth = 0;
  // false: a layer's parameters are read once, at its forward pass, and the
  // Read stays open until its backward pass (all parameters are in flight at
  // the turn). true: the forward Read is closed at once and the backward pass
  // reads them again, so that only a few layers' parameters are open at any
  // time: a much smaller peak for the memory manager's pool (the same values
  // under BSP: the table's clock only advances after its last Update).
  bool reread_params = false;
  bool deterministic_bsp = false;  // Config::deterministic_bsp
  // Data augmentation of the training images: each example, each time it is
  // drawn, mirrored left-right with probability 1/2 and shifted by up to
  // `augment_shift` pixels in each direction (zeros come in). 0 and false:
  // the images as they are. The draws follow the seed, the epoch and the
  // worker's rank (reproducible).
  bool augment_flip = false;
  int augment_shift = 0;
  // Test accuracy and loss from the mean of each test image's logits and
  // its mirror image's (EvaluateNet's mirror_average).
  bool test_mirror_average = false;
  // Worker 0 evaluates the test set after the last epoch when `evaluate`;
  // after every epoch too when `evaluate_each_epoch` (a test of the CNN
  // with test_mirror_average costs about a tenth of an epoch on 2 cores);
  // and before the first when `evaluate_before` (NetReport::initial_test).
  bool evaluate = true;
  bool evaluate_each_epoch = true;
  bool evaluate_before = true;
};

// kInvalidArgument naming the first bad option (unknown model, batch size
// not a multiple of the workers, ...).
geeps::Status ValidateNetOptions(const NetOptions& options);

// One 28x28 training image `in`, mirrored left-right (if `flip` and a coin
// of `rng` says so) and shifted by up to `shift` pixels each way (drawn
// from `rng`), zeros coming in, into `out`.
void Augment(const float* in, std::mt19937_64& rng, bool flip, int shift, float* out);

// Builds the named model for 28x28 grey images and 10 classes:
//   mlp: fc256-relu-fc128-relu-fc10
//   cnn: conv3x3x16-relu-maxpool2-conv3x3x32-relu-maxpool2-fc128-relu-fc10
//   cnn-gn: cnn with group normalisation after each convolution:
//           conv3x3x16-gn4-relu-maxpool2-conv3x3x32-gn8-relu-maxpool2-fc128-relu-fc10
//   cnn-wide: conv3x3x32-relu-maxpool2-conv3x3x64-relu-maxpool2-fc256-relu-fc10
//   big-mlp: 12 x (fc512-relu), then fc10 (for big_net: its activations,
//            gradients and momentum outgrow a small device budget)
// With `dropout` > 0, a Dropout layer at that rate before the last fully
// connected layer (on the hidden features it reads; not for big-mlp).
// kInvalidArgument for another name or a rate outside [0, 1).
geeps::StatusOr<nn::Network> BuildModel(const std::string& name, float dropout = 0.0f);

// The job's config: the two tables above for `net` with
// batch_size / workers examples per worker, and the options' cluster fields.
geeps::Config MakeNetConfig(const NetOptions& options, const nn::Network& net);

struct NetEpoch {
  int epoch = 0;                  // from 1
  double train_loss = 0;          // mean over all workers' examples (embedded
                                  // runs) or worker 0's (one worker per process)
  double seconds = 0;             // training time so far (evaluation excluded)
  double samples_per_second = 0;  // of this epoch
  bool tested = false;            // whether `test` was run (NetOptions::evaluate*)
  Evaluation test;                // after the epoch
};

struct NetReport {
  std::string model;  // Network::Describe()
  size_t num_params = 0;
  Evaluation initial_test;          // before training (when evaluate and evaluate_before)
  std::vector<NetEpoch> epochs;     // worker 0's view
  double total_seconds = 0;         // start to shutdown
  std::vector<float> final_params;  // all rows of table 0, as worker 0 saw them
  std::string worker0_stats_json;
  geeps::WorkerStats worker0_stats;  // the same, as a struct
};

// Trains one worker `ps` (rank among options.workers or the job's workers)
// of a job configured by MakeNetConfig. Worker 0 writes the initial weights
// in the prologue, evaluates and reports. `board` (optional) lets worker 0
// report the loss over all workers of this process. Errors are prefixed with
// the worker and the call.
geeps::Status TrainNetWorker(const NetOptions& options, const nn::Network& net,
                             const Dataset& train, const Dataset& test, geeps::GeePS& ps,
                             NetReport* report, EpochBoard* board = nullptr);

// Trains on an embedded cluster of options.workers workers.
geeps::Status TrainNet(const NetOptions& options, const Dataset& train, const Dataset& test,
                       NetReport* report);

// One process of a multi-process job (geeps::Process::Join with `config`
// from MakeNetConfig, GEEPS_* applied): trains its worker, then leaves.
// *is_worker0 tells whether this process reports.
geeps::Status TrainNetInProcess(const NetOptions& options, const geeps::Config& config,
                                const geeps::ProcessOptions& process_options, const Dataset& train,
                                const Dataset& test, NetReport* report, bool* is_worker0);

// Synthetic data for 28x28 "images" and 10 classes: pixels drawn from
// N(0, 1), labels the argmax of a fixed random linear teacher (10 x 784,
// from `seed`), so that a network can learn them. Deterministic in `seed`;
// train and test share the teacher.
void MakeSyntheticData(int64_t train_size, int64_t test_size, uint64_t seed, Dataset* train,
                       Dataset* test);

// Loss and accuracy of `net` with parameters `params` (every layer's rows
// back to back, Layout::param_offset) on `data` (28x28 images), on the host.
// With `mirror_average`, each example's logits are the mean of the logits
// of the image and of its left-right mirror image (test-time augmentation,
// for a network trained with mirrored images too); ignored unless the
// examples have 28 x 28 values. The examples are split over `threads`
// threads (0: one per core; the other workers wait at their next Read while
// worker 0 evaluates), each with its own host backend.
Evaluation EvaluateNet(const nn::Network& net, const std::vector<float>& params,
                       const Dataset& data, bool mirror_average = false, int threads = 0);

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_NET_TRAINER_H_
