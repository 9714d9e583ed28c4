#include "net_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <utility>

#include "annotate.h"
#include "geeps/step.h"
#include "net_layout.h"
#include "progress_bar.h"

namespace fmnist {
namespace {

using geeps::RowIndex;
using geeps::Status;
using geeps::StatusCode;
using geeps::StatusOr;
using Clock = std::chrono::steady_clock;
using geeps::ConstRows;
using geeps::MutableRows;

// A Status as the layer backend's error text: empty when OK.
std::string ErrorText(const Status& s) { return s.ok() ? std::string() : s.ToString(); }

constexpr int kImageSide = 28;
constexpr int kClasses = 10;

// Is act[i] read again in the backward pass?
bool NeededInBackward(const nn::Network& net, int i) {
  const bool by_producer = i > 0 && net.layer(i - 1).BackwardNeedsOutput();
  const bool by_consumer = i < net.size() && net.layer(i).BackwardNeedsInput();
  return by_producer || by_consumer;
}

// The inputs of one real iteration of one worker.
struct Batch {
  const float* images = nullptr;  // n images
  const int32_t* labels = nullptr;
  int n = 0;
  float lr = 0;
};

// One iteration of one worker (its accesses and its compute), for both of
// the Step's passes (include/geeps/step.h): while recording it only makes
// the accesses; in a real iteration it trains on `batch` and adds its loss
// sum to *loss. The caller ends it with Clock().
Status Iteration(geeps::Step& s, const NetOptions& opt, const nn::Network& net, const Layout& lay,
                 nn::Backend* be, const Batch& batch, double* loss) {
  const int n = net.size();
  const bool real = !s.recording();
  const float grad_scale = 1.0f / static_cast<float>(opt.batch_size);
  std::vector<ConstRows> params(n);

  // ---- Forward. The images: an output buffer (fetch=false), kept for the
  // first layer's backward pass if it needs them.
  GEEPS_ASSIGN_OR_RETURN(MutableRows in, s.LocalAccess(lay.local_table, lay.act[0], false));
  if (real) {
    // The LocalAccess buffer is device memory on CUDA: the backend copies.
    be->CopyFromHost(in.data, batch.images, batch.n * net.input_shape().size());
  }
  GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(in, NeededInBackward(net, 0)));
  for (int i = 0; i < n; ++i) {
    const nn::Layer& layer = net.layer(i);
    // The parameters stay open until this layer's backward pass, so that
    // both passes use the same version of them.
    if (!lay.params[i].empty()) {
      GEEPS_ASSIGN_OR_RETURN(params[i], s.Read(lay.param_table[i], lay.params[i], opt.slack));
    }
    GEEPS_ASSIGN_OR_RETURN(MutableRows x, s.LocalAccess(lay.local_table, lay.act[i], true));
    GEEPS_ASSIGN_OR_RETURN(MutableRows y, s.LocalAccess(lay.local_table, lay.act[i + 1], false));
    MutableRows scratch;
    if (layer.ScratchFloats(1) > 0) {  // not batch.n: 0 when recording
      GEEPS_ASSIGN_OR_RETURN(scratch, s.LocalAccess(lay.local_table, lay.scratch, false));
    }
    if (real) {
      layer.Forward(*be, params[i].data, x.data, batch.n, y.data, scratch.data);
    }
    if (opt.reread_params && params[i].position >= 0) {
      GEEPS_RETURN_IF_ERROR(s.PostRead(params[i]));  // read again backward
    }
    if (scratch.position >= 0) GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(scratch, false));
    GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(y, true));  // the next layer's input
    GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(x, NeededInBackward(net, i)));
  }

  // ---- Loss: softmax cross-entropy; its gradient (scaled by 1 / global
  // batch) starts the backward pass.
  GEEPS_ASSIGN_OR_RETURN(MutableRows logits, s.LocalAccess(lay.local_table, lay.act[n], true));
  GEEPS_ASSIGN_OR_RETURN(MutableRows dlogits, s.LocalAccess(lay.local_table, lay.grad[n], false));
  if (real) {
    *loss += be->SoftmaxCrossEntropy(logits.data, batch.labels, batch.n, kClasses, grad_scale,
                                     dlogits.data);
  }
  GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(dlogits, true));
  GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(logits, NeededInBackward(net, n)));

  // ---- Backward, last layer first.
  for (int i = n - 1; i >= 0; --i) {
    const nn::Layer& layer = net.layer(i);
    const bool has_params = !lay.params[i].empty();
    if (opt.reread_params && has_params) {
      GEEPS_ASSIGN_OR_RETURN(params[i], s.Read(lay.param_table[i], lay.params[i], opt.slack));
    }
    GEEPS_ASSIGN_OR_RETURN(MutableRows dy, s.LocalAccess(lay.local_table, lay.grad[i + 1], true));
    MutableRows x, y, dx, wgrad, scratch;
    if (layer.BackwardNeedsInput()) {
      GEEPS_ASSIGN_OR_RETURN(x, s.LocalAccess(lay.local_table, lay.act[i], true));
    }
    if (layer.BackwardNeedsOutput()) {
      GEEPS_ASSIGN_OR_RETURN(y, s.LocalAccess(lay.local_table, lay.act[i + 1], true));
    }
    if (i > 0) {
      GEEPS_ASSIGN_OR_RETURN(dx, s.LocalAccess(lay.local_table, lay.grad[i], false));
    }
    if (has_params) {  // transient: consumed by the update below
      GEEPS_ASSIGN_OR_RETURN(wgrad, s.LocalAccess(lay.local_table, lay.wgrad[i], false));
    }
    if (layer.ScratchFloats(1) > 0) {  // not batch.n: 0 when recording
      GEEPS_ASSIGN_OR_RETURN(scratch, s.LocalAccess(lay.local_table, lay.scratch, false));
    }
    if (real) {
      layer.Backward(*be, params[i].data, x.data, y.data, dy.data, batch.n, dx.data, wgrad.data,
                     scratch.data);
    }
    if (scratch.position >= 0) GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(scratch, false));
    if (has_params) {
      // Momentum: kept by this worker (fetch and keep). The delta sent to
      // the servers is -lr * velocity. Weight decay reads the parameters,
      // so then their Read closes after it (else first: a smaller peak of
      // open buffers for the memory manager).
      const bool decay = opt.weight_decay > 0;
      if (!decay) GEEPS_RETURN_IF_ERROR(s.PostRead(params[i]));
      GEEPS_ASSIGN_OR_RETURN(MutableRows v, s.LocalAccess(lay.local_table, lay.velocity[i], true));
      GEEPS_ASSIGN_OR_RETURN(MutableRows delta, s.PreUpdate(lay.param_table[i], lay.params[i]));
      if (real) {
        be->MomentumDelta(wgrad.data, decay ? params[i].data : nullptr, layer.num_params(),
                          batch.lr, opt.momentum, opt.weight_decay, v.data, delta.data);
      }
      if (decay) GEEPS_RETURN_IF_ERROR(s.PostRead(params[i]));
      GEEPS_RETURN_IF_ERROR(s.Update(delta));
      GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(v, true));
      GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(wgrad, false));
    }
    if (dx.position >= 0) GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(dx, true));
    // act[i] is read once more only by layer i-1's backward pass.
    if (x.position >= 0) {
      GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(x, i > 0 && net.layer(i - 1).BackwardNeedsOutput()));
    }
    if (y.position >= 0) GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(y, false));
    GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(dy, false));
  }
  return Status::OK();
}

}  // namespace

Status ValidateNetOptions(const NetOptions& o) {
  auto bad = [](const std::string& what) { return Status(StatusCode::kInvalidArgument, what); };
  if (o.model != "mlp" && o.model != "cnn" && o.model != "cnn-gn" && o.model != "cnn-wide" &&
      o.model != "big-mlp") {
    return bad("unknown model '" + o.model + "' (mlp, cnn, cnn-gn, cnn-wide or big-mlp)");
  }
  GEEPS_RETURN_IF_ERROR(ValidateTrainerOptions(o));
  if (o.batch_size % o.workers != 0) {
    return bad("batch size " + std::to_string(o.batch_size) + " is not a multiple of the " +
               std::to_string(o.workers) + " workers (it is the global batch)");
  }
  if (!std::isfinite(o.weight_decay) || o.weight_decay < 0 || o.weight_decay >= 1) {
    return bad("weight decay must be in [0, 1)");
  }
  if (!(o.dropout >= 0.0f && o.dropout < 1.0f)) return bad("dropout rate must be in [0, 1)");
  if (o.augment_shift < 0 || o.augment_shift > 8) return bad("augment shift must be in [0, 8]");
  return Status::OK();
}

void Augment(const float* in, std::mt19937_64& rng, bool flip, int shift, float* out) {
  const bool mirror = flip && (rng() & 1) != 0;
  const int span = 2 * shift + 1;
  const int dx = shift > 0 ? static_cast<int>(rng() % span) - shift : 0;
  const int dy = shift > 0 ? static_cast<int>(rng() % span) - shift : 0;
  for (int y = 0; y < kImageSide; ++y) {
    const int sy = y - dy;
    for (int x = 0; x < kImageSide; ++x) {
      int sx = x - dx;
      if (mirror) sx = kImageSide - 1 - sx;
      const bool inside = sy >= 0 && sy < kImageSide && sx >= 0 && sx < kImageSide;
      out[y * kImageSide + x] = inside ? in[sy * kImageSide + sx] : 0.0f;
    }
  }
}

StatusOr<nn::Network> BuildModel(const std::string& name, float dropout) {
  if (!(dropout >= 0.0f && dropout < 1.0f)) {
    return Status(StatusCode::kInvalidArgument, "dropout rate must be in [0, 1)");
  }
  nn::Network net(nn::Shape{1, kImageSide, kImageSide});
  auto head = [&net, dropout]() {  // [dropout-]fc10
    if (dropout > 0.0f) net.Dropout(dropout);
    net.FullyConnected(kClasses);
  };
  if (name == "mlp") {
    net.FullyConnected(256).Relu().FullyConnected(128).Relu();
    head();
  } else if (name == "cnn") {
    net.Conv(16, 3, 1).Relu().MaxPool(2, 2);
    net.Conv(32, 3, 1).Relu().MaxPool(2, 2);
    net.FullyConnected(128).Relu();
    head();
  } else if (name == "cnn-gn") {
    net.Conv(16, 3, 1).GroupNorm(4).Relu().MaxPool(2, 2);
    net.Conv(32, 3, 1).GroupNorm(8).Relu().MaxPool(2, 2);
    net.FullyConnected(128).Relu();
    head();
  } else if (name == "cnn-wide") {
    net.Conv(32, 3, 1).Relu().MaxPool(2, 2);
    net.Conv(64, 3, 1).Relu().MaxPool(2, 2);
    net.FullyConnected(256).Relu();
    head();
  } else if (name == "big-mlp") {
    for (int i = 0; i < 12; ++i) net.FullyConnected(512).Relu();
    net.FullyConnected(kClasses);
  } else {
    return Status(StatusCode::kInvalidArgument,
                  "unknown model '" + name + "' (mlp, cnn, cnn-gn, cnn-wide or big-mlp)");
  }
  return net;
}

geeps::Config MakeNetConfig(const NetOptions& options, const nn::Network& net) {
  const Layout lay = MakeLayout(net, options.batch_size / options.workers);
  geeps::Config config;
  for (size_t t = 0; t < lay.param_table_rows.size(); ++t) {
    config.tables.push_back(geeps::TableSpec{"params" + std::to_string(t), lay.param_table_rows[t],
                                             kParamRowWidth, false});
  }
  config.tables.push_back(geeps::TableSpec{"local", lay.local_rows, kLocalRowWidth, true});
  config.num_workers = options.workers;
  config.num_shards = options.shards;
  config.num_channels = options.channels;
  config.default_slack = options.slack;
  config.device = options.device;
  config.device_memory_budget = options.device_memory_budget;
  config.memory_guarantee = options.memory_guarantee;
  config.emulated_copy_bandwidth = options.emulated_copy_bandwidth;
  config.deterministic_bsp = options.deterministic_bsp;
  config.timeout = options.timeout;
  return config;
}

void MakeSyntheticData(int64_t train_size, int64_t test_size, uint64_t seed, Dataset* train,
                       Dataset* test) {
  constexpr int kDim = kImageSide * kImageSide;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> teacher(static_cast<size_t>(kClasses) * kDim);
  for (float& w : teacher) w = normal(rng);
  for (auto [data, n] : {std::make_pair(train, train_size), std::make_pair(test, test_size)}) {
    data->dim = kDim;
    data->num_classes = kClasses;
    data->features.resize(static_cast<size_t>(n) * kDim);
    data->labels.resize(static_cast<size_t>(n));
    for (float& x : data->features) x = normal(rng);
    for (int64_t e = 0; e < n; ++e) {
      const float* x = data->example(e);
      int best = 0;
      double best_score = 0;
      for (int k = 0; k < kClasses; ++k) {
        const float* w = teacher.data() + static_cast<size_t>(k) * kDim;
        double score = 0;
        for (int j = 0; j < kDim; ++j) score += static_cast<double>(w[j]) * x[j];
        if (k == 0 || score > best_score) {
          best = k;
          best_score = score;
        }
      }
      data->labels[e] = static_cast<uint8_t>(best);
    }
  }
}

namespace {

// EvaluateNet over examples [begin, end): the sum of their losses and the
// number classified right.
struct EvaluationSums {
  double loss = 0;
  int64_t correct = 0;
};

EvaluationSums EvaluateRange(const nn::Network& net, const std::vector<float>& params,
                             const Dataset& data, bool mirror_average, int64_t begin, int64_t end) {
  constexpr int kChunk = 100;
  std::unique_ptr<nn::Backend> be = nn::MakeHostBackend();
  const int n = net.size();
  const Layout lay = MakeLayout(net, 1);
  size_t widest = net.input_shape().size(), scratch = 0;
  for (int i = 0; i < n; ++i) {
    widest = std::max(widest, net.layer(i).out_shape().size());
    scratch = std::max(scratch, net.layer(i).ScratchFloats(kChunk));
  }
  std::vector<float> a(widest * kChunk), b(widest * kChunk), tmp(scratch + 1);
  std::vector<float> mirrored_logits(static_cast<size_t>(kClasses) * kChunk);
  std::vector<int32_t> labels(kChunk);
  EvaluationSums sums;
  // The logits of examples [start, start + m), mirrored left-right or not,
  // end in `a`.
  auto forward = [&](int64_t start, int m, bool mirror) {
    for (int j = 0; j < m; ++j) {
      const float* in = data.example(start + j);
      float* out = a.data() + static_cast<size_t>(j) * data.dim;
      if (!mirror) {
        std::copy(in, in + data.dim, out);
        continue;
      }
      for (int y = 0; y < kImageSide; ++y)
        for (int x = 0; x < kImageSide; ++x)
          out[y * kImageSide + x] = in[y * kImageSide + kImageSide - 1 - x];
    }
    for (int i = 0; i < n; ++i) {
      net.layer(i).Forward(*be, params.data() + lay.param_offset[i], a.data(), m, b.data(),
                           tmp.data());
      std::swap(a, b);
    }
  };
  for (int64_t start = begin; start < end; start += kChunk) {
    const int m = static_cast<int>(std::min<int64_t>(kChunk, end - start));
    if (mirror_average) {
      forward(start, m, true);
      std::copy(a.begin(), a.begin() + static_cast<size_t>(m) * kClasses, mirrored_logits.begin());
    }
    forward(start, m, false);
    if (mirror_average) {
      for (size_t k = 0; k < static_cast<size_t>(m) * kClasses; ++k)
        a[k] = 0.5f * (a[k] + mirrored_logits[k]);
    }
    for (int j = 0; j < m; ++j) {
      labels[j] = data.labels[start + j];
      const float* z = a.data() + j * kClasses;
      if (std::max_element(z, z + kClasses) - z == labels[j]) ++sums.correct;
    }
    sums.loss += be->SoftmaxCrossEntropy(a.data(), labels.data(), m, kClasses, 1.0f, nullptr);
  }
  return sums;
}

}  // namespace

Evaluation EvaluateNet(const nn::Network& net, const std::vector<float>& params,
                       const Dataset& data, bool mirror_average, int threads) {
  mirror_average = mirror_average && data.dim == kImageSide * kImageSide;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Contiguous parts, one per thread; their sums are added in part order, so
  // the result depends on the thread count only by float rounding of the loss.
  const int64_t size = data.size();
  const int parts = static_cast<int>(std::clamp<int64_t>(size / 250, 1, threads));
  std::vector<EvaluationSums> sums(parts);
  std::vector<std::thread> helpers;
  for (int p = 1; p < parts; ++p) {
    helpers.emplace_back([&, p] {
      sums[p] = EvaluateRange(net, params, data, mirror_average, size * p / parts,
                              size * (p + 1) / parts);
    });
  }
  sums[0] = EvaluateRange(net, params, data, mirror_average, 0, size / parts);
  for (std::thread& t : helpers) t.join();
  EvaluationSums total;
  for (const EvaluationSums& s : sums) {
    total.loss += s.loss;
    total.correct += s.correct;
  }
  Evaluation e;
  e.loss = total.loss / static_cast<double>(size);
  e.accuracy = static_cast<double>(total.correct) / static_cast<double>(size);
  return e;
}

Status TrainNetWorker(const NetOptions& opt, const nn::Network& net, const Dataset& train,
                      const Dataset& test, geeps::GeePS& ps, NetReport* report, EpochBoard* board) {
  const int rank = ps.rank();
  const int workers = ps.num_workers();
  if (opt.batch_size % workers != 0 || train.size() < opt.batch_size) {
    return Status(StatusCode::kInvalidArgument,
                  "the global batch " + std::to_string(opt.batch_size) +
                      " must be a multiple of the " + std::to_string(workers) +
                      " workers and at most the " + std::to_string(train.size()) +
                      " training examples");
  }
  const int local_batch = opt.batch_size / workers;
  const Layout lay = MakeLayout(net, local_batch);
  std::unique_ptr<nn::Backend> be;  // made once the device is known

  // The worker's device is known from FinishVirtualIteration on (inside
  // Step::Start, before the real prologue): the CUDA layer backend, on
  // libgeeps' compute stream, for a CUDA worker; the host backend otherwise.
  auto make_backend = [&]() -> Status {
    if (be != nullptr) return Status::OK();
    if (ps.device_kind() == geeps::DeviceKind::kCuda) {
      std::string why;
      be = nn::MakeCudaBackend(ps.compute_stream().native_handle(), &why);
      if (be == nullptr) {
        return Annotate(Status(StatusCode::kDeviceError, why), rank, "MakeCudaBackend");
      }
    } else {
      // The host layers run on the worker's compute stream, as the CUDA ones
      // do: ordered with libgeeps' copies the same way (and delayed in the
      // asynchronous host mode, which then shows any missing ordering).
      be = nn::MakeQueuedBackend(
          nn::MakeHostBackend(),
          [&ps](std::function<void()> kernel) {
            return ErrorText(ps.EnqueueHostWork(std::move(kernel)));
          },
          [&ps] { return ErrorText(ps.SynchronizeComputeStream()); });
    }
    return Status::OK();
  };
  auto backend_status = [&](const char* call) {
    return be->ok() ? Status::OK()
                    : Annotate(Status(StatusCode::kDeviceError, be->error()), rank, call);
  };

  // ---- Worker 0's prologue: it writes the initial parameters once, as
  // unrepeated updates. The Step records it and the iteration (below), then
  // runs the prologue.
  std::vector<float> params;  // worker 0: a host copy, for evaluation
  auto prologue = [&](geeps::Step& s) -> Status {
    if (rank != 0) return Status::OK();
    if (!s.recording()) {
      GEEPS_RETURN_IF_ERROR(make_backend());
      params.assign(lay.param_rows * kParamRowWidth, 0.0f);
      std::mt19937_64 rng(opt.seed);
      for (int i = 0; i < net.size(); ++i) {
        net.layer(i).InitParams(rng, params.data() + lay.param_offset[i]);
      }
    }
    for (int i = 0; i < net.size(); ++i) {
      if (lay.params[i].empty()) continue;
      EX_ASSIGN(MutableRows w, s.PreUpdate(lay.param_table[i], lay.params[i]),
                "PreUpdate (prologue)");
      if (!s.recording()) {
        be->CopyFromHost(w.data, params.data() + lay.param_offset[i], net.layer(i).num_params());
        GEEPS_RETURN_IF_ERROR(backend_status("writing the initial parameters"));
      }
      EX_CHECK(s.Update(w), "Update (prologue)");
    }
    if (!s.recording() && opt.evaluate && opt.evaluate_before)
      report->initial_test = EvaluateNet(net, params, test, opt.test_mirror_average);
    return Status::OK();
  };
  // The inputs and the loss sum of the next real iteration (set below).
  Batch batch;
  double loss_sum = 0;
  auto iteration = [&](geeps::Step& s) -> Status {
    // Recording computes nothing: no backend yet.
    GEEPS_RETURN_IF_ERROR(Iteration(s, opt, net, lay, s.recording() ? nullptr : be.get(),
                                    s.recording() ? Batch() : batch, &loss_sum));
    if (!s.recording()) GEEPS_RETURN_IF_ERROR(backend_status("iteration (layer backend)"));
    return s.Clock();
  };
  geeps::Step step(ps, MakeNetConfig(opt, net));
  EX_CHECK(step.Start(prologue, iteration), "Step::Start");
  GEEPS_RETURN_IF_ERROR(make_backend());

  // ---- The real iterations. Every worker draws the same permutation per
  // epoch; iteration t's global batch is perm[t*B, (t+1)*B) and worker r
  // takes its r-th slice. The last incomplete global batch is left out.
  const int64_t steps = train.size() / opt.batch_size;
  std::vector<int64_t> perm(train.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 shuffle_rng(opt.seed ^ 0x5eedULL);
  std::vector<float> images(static_cast<size_t>(local_batch) * train.dim);
  std::vector<int32_t> labels(local_batch);
  double train_seconds = 0;
  const bool augmenting = opt.augment_flip || opt.augment_shift > 0;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    std::shuffle(perm.begin(), perm.end(), shuffle_rng);
    // Per worker and epoch: the worker's own examples get their own draws.
    std::mt19937_64 augment_rng(opt.seed * 1000003ULL + static_cast<uint64_t>(epoch) * 7919ULL +
                                static_cast<uint64_t>(rank));
    batch = Batch();
    batch.n = local_batch;
    batch.images = images.data();
    batch.labels = labels.data();
    ProgressBar bar(rank == 0 ? opt.log : nullptr, epoch + 1, opt.epochs, steps);
    const Clock::time_point start = Clock::now();
    loss_sum = 0;
    int64_t samples = 0;
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t first = t * opt.batch_size + rank * local_batch;
      for (int j = 0; j < local_batch; ++j) {
        const int64_t e = perm[first + j];
        float* out = images.data() + static_cast<size_t>(j) * train.dim;
        if (augmenting) {
          Augment(train.example(e), augment_rng, opt.augment_flip, opt.augment_shift, out);
        } else {
          std::copy(train.example(e), train.example(e) + train.dim, out);
        }
        labels[j] = train.labels[e];
      }
      // Each worker and iteration draws its own dropout masks.
      be->SetTraining(true, opt.seed * 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(rank) << 48) ^
                                static_cast<uint64_t>(epoch * steps + t));
      batch.lr = LearningRate(opt, epoch, t, steps);
      EX_CHECK(step.RunIteration(), "iteration");
      samples += local_batch;
      bar.Step(t, samples * workers, loss_sum / samples);
    }
    const double epoch_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (board != nullptr) board->Report(epoch, loss_sum, samples);
    if (rank != 0) continue;

    NetEpoch e;
    e.epoch = epoch + 1;
    bool all_workers = false;
    EX_CHECK(
        EpochMeanLoss(board, epoch, opt.timeout, loss_sum, samples, &e.train_loss, &all_workers),
        "waiting for the epoch's losses");
    train_seconds += epoch_seconds;
    e.seconds = train_seconds;
    e.samples_per_second = static_cast<double>(steps * opt.batch_size) / epoch_seconds;
    bar.Finish(samples * workers, e.train_loss);
    const bool last = epoch + 1 == opt.epochs;
    e.tested = opt.evaluate && (last || opt.evaluate_each_epoch);
    if (e.tested || last) {  // the weights for the test, or final_params
      EX_CHECK(ps.Sync(), "Sync");
      for (int i = 0; i < net.size(); ++i) {
        if (lay.params[i].empty()) continue;
        EX_CHECK(
            ps.CopyRows(lay.param_table[i], lay.params[i], params.data() + lay.param_offset[i]),
            "CopyRows");
      }
    }
    if (e.tested) e.test = EvaluateNet(net, params, test, opt.test_mirror_average);
    if (opt.evaluate && opt.log != nullptr) {
      char line[200];
      if (e.tested) {
        std::snprintf(line, sizeof(line),
                      "epoch %d/%d: train loss %.4f, %.1f s, test loss %.4f, "
                      "test accuracy %.4f\n",
                      e.epoch, opt.epochs, e.train_loss, epoch_seconds, e.test.loss,
                      e.test.accuracy);
      } else {
        std::snprintf(line, sizeof(line), "epoch %d/%d: train loss %.4f, %.1f s\n", e.epoch,
                      opt.epochs, e.train_loss, epoch_seconds);
      }
      *opt.log << line << std::flush;
    }
    report->epochs.push_back(e);
  }
  if (rank == 0) report->final_params = std::move(params);
  return Status::OK();
}

Status TrainNet(const NetOptions& options, const Dataset& train, const Dataset& test,
                NetReport* report) {
  GEEPS_RETURN_IF_ERROR(ValidateNetOptions(options));
  GEEPS_ASSIGN_OR_RETURN(nn::Network net, BuildModel(options.model, options.dropout));
  *report = NetReport();
  report->model = net.Describe();
  report->num_params = net.num_params();
  // The workers share the cores: one BLAS thread each when there are at
  // least as many workers as cores.
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  nn::SetHostBlasThreads(std::max(1, cores / options.workers));
  const Clock::time_point start = Clock::now();

  std::vector<NetReport> reports(options.workers);
  Status run = RunOnEmbeddedCluster(
      MakeNetConfig(options, net), options.epochs,
      [&](geeps::GeePS& ps, EpochBoard* board) {
        return TrainNetWorker(options, net, train, test, ps, &reports[ps.rank()], board);
      },
      &report->worker0_stats);
  report->worker0_stats_json = report->worker0_stats.ToJson();
  report->total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  report->initial_test = reports[0].initial_test;
  report->epochs = std::move(reports[0].epochs);
  report->final_params = std::move(reports[0].final_params);
  return run;
}

Status TrainNetInProcess(const NetOptions& options, const geeps::Config& config,
                         const geeps::ProcessOptions& process_options, const Dataset& train,
                         const Dataset& test, NetReport* report, bool* is_worker0) {
  *report = NetReport();
  *is_worker0 = false;
  GEEPS_ASSIGN_OR_RETURN(nn::Network net, BuildModel(options.model, options.dropout));
  report->model = net.Describe();
  report->num_params = net.num_params();
  const Clock::time_point start = Clock::now();
  GEEPS_ASSIGN_OR_RETURN(std::unique_ptr<geeps::Process> process,
                         Context(geeps::Process::Join(config, process_options), "Process::Join"));
  NetOptions opt = options;
  opt.workers = process->config().num_workers;
  Status run = ValidateNetOptions(opt);
  geeps::GeePS* ps = process->worker();
  if (run.ok() && ps != nullptr) {
    *is_worker0 = ps->rank() == 0;
    if (!*is_worker0) opt.log = nullptr;
    run = TrainNetWorker(opt, net, train, test, *ps, report);
    report->worker0_stats = ps->GetStats();
    report->worker0_stats_json = report->worker0_stats.ToJson();
  }
  // Leave the job even after an error, so that the others learn of it.
  Status shutdown = process->Shutdown();
  report->total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string who = "rank " + std::to_string(process->rank()) + ": ";
  if (!run.ok()) return Status(run.code(), who + run.message());
  return Context(shutdown, who + "Process::Shutdown");
}

}  // namespace fmnist
