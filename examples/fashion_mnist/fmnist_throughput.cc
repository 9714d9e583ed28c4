// fmnist_throughput: training throughput of the Fashion-MNIST CNN (issue 7)
// with the same layers (examples/layers) and the same global batch
//   no_ps:    no parameter server at all: a plain loop over nn::Network on
//             host buffers, SGD with momentum applied in place;
//   libgeeps: through libgeeps (net_trainer, embedded cluster) with 1 and
//             with 2 workers;
// and the overhead of libgeeps on one worker against no_ps.
//
//   fmnist_throughput [--out training.json] [--csv training.csv]
//                     [--iterations 150] [--repeats 3] [--batch-size 64]
//                     [--model cnn]
//                     [--data-dir /usr/share/datasets/fashion-mnist]
//
// `repeats` rounds, each running every configuration in turn for two passes
// over the same iterations x batch examples: the first warms up (threads,
// caches, allocations), the second is timed. Each configuration reports its
// best round (the least disturbed by other load on the machine). One worker and no_ps use the same
// OpenBLAS thread count (the cores); two workers get half each, as fmnist_train does. Without the
// data set the run uses synthetic images (said in the output). CSV columns:
// config,workers,samples_per_second,relative_to_no_ps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net_layout.h"
#include "net_trainer.h"
#include "softmax_model.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kClasses = 10;

struct Options {
  std::string out = "training.json";
  std::string csv;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string model = "cnn";
  int iterations = 150;
  int repeats = 3;
  int batch_size = 64;
  float lr = 0.05f;
  float momentum = 0.9f;
  uint64_t seed = 1;
};

struct Row {
  std::string config;
  int workers = 1;
  double samples_per_second = 0;  // the best timed pass
  std::vector<double> passes;     // every timed pass
};

Row Best(const std::string& config, int workers, std::vector<double> passes) {
  Row r{config, workers, 0, std::move(passes)};
  for (double p : r.passes) r.samples_per_second = std::max(r.samples_per_second, p);
  return r;
}

// The same network trained with no parameter server: one pass over `train`
// (shuffled) per epoch, `epochs` epochs; returns each epoch's samples/s.
std::vector<double> TrainWithoutPs(const Options& o, const nn::Network& net,
                                   const fmnist::Dataset& train, int epochs, double* final_loss) {
  std::unique_ptr<nn::Backend> be = nn::MakeHostBackend();
  const int n = net.size();
  const int b = o.batch_size;
  const fmnist::Layout lay = fmnist::MakeLayout(net, b);
  // Parameters initialised as the trainer's worker 0 does (same seed).
  std::vector<float> params(lay.param_rows * fmnist::kParamRowWidth, 0.0f);
  std::mt19937_64 rng(o.seed);
  for (int i = 0; i < n; ++i) {
    net.layer(i).InitParams(rng, params.data() + lay.param_offset[i]);
  }
  std::vector<std::vector<float>> act(n + 1), grad(n + 1), wgrad(n), velocity(n);
  size_t scratch_floats = 1, widest_params = 1;
  act[0].resize(static_cast<size_t>(b) * net.input_shape().size());
  for (int i = 0; i < n; ++i) {
    const nn::Layer& l = net.layer(i);
    act[i + 1].resize(static_cast<size_t>(b) * l.out_shape().size());
    grad[i + 1].resize(act[i + 1].size());
    wgrad[i].resize(l.num_params());
    velocity[i].resize(l.num_params());
    scratch_floats = std::max(scratch_floats, l.ScratchFloats(b));
    widest_params = std::max(widest_params, l.num_params());
  }
  std::vector<float> scratch(scratch_floats), delta(widest_params);
  std::vector<int32_t> labels(b);
  const float grad_scale = 1.0f / static_cast<float>(b);

  const int64_t steps = train.size() / b;
  std::vector<int64_t> perm(train.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 shuffle_rng(o.seed ^ 0x5eedULL);
  std::vector<double> samples_per_second;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::shuffle(perm.begin(), perm.end(), shuffle_rng);
    double loss = 0;
    const Clock::time_point start = Clock::now();
    for (int64_t t = 0; t < steps; ++t) {
      for (int j = 0; j < b; ++j) {
        const int64_t e = perm[t * b + j];
        std::copy(train.example(e), train.example(e) + train.dim,
                  act[0].begin() + static_cast<size_t>(j) * train.dim);
        labels[j] = train.labels[e];
      }
      for (int i = 0; i < n; ++i) {
        net.layer(i).Forward(*be, params.data() + lay.param_offset[i], act[i].data(), b,
                             act[i + 1].data(), scratch.data());
      }
      loss += be->SoftmaxCrossEntropy(act[n].data(), labels.data(), b, kClasses, grad_scale,
                                      grad[n].data());
      for (int i = n - 1; i >= 0; --i) {
        const nn::Layer& l = net.layer(i);
        float* p = params.data() + lay.param_offset[i];
        l.Backward(*be, p, act[i].data(), act[i + 1].data(), grad[i + 1].data(), b,
                   i > 0 ? grad[i].data() : nullptr, wgrad[i].data(), scratch.data());
        if (l.num_params() == 0) continue;
        be->MomentumDelta(wgrad[i].data(), nullptr, l.num_params(), o.lr, o.momentum, 0.0f,
                          velocity[i].data(), delta.data());
        for (size_t k = 0; k < l.num_params(); ++k) p[k] += delta[k];
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    samples_per_second.push_back(static_cast<double>(steps * b) / seconds);
    *final_loss = loss / static_cast<double>(steps * b);
  }
  return samples_per_second;
}

int Fail(const std::string& message, int code) {
  std::cerr << "fmnist_throughput: " << message << "\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") {
      std::cout << "fmnist_throughput [--out F.json] [--csv F.csv] [--iterations N] "
                   "[--batch-size N] [--model cnn] [--data-dir DIR]\n";
      return 0;
    }
    if (i + 1 >= argc) return Fail("missing value for " + f, 2);
    const std::string v = argv[++i];
    if (f == "--out")
      o.out = v;
    else if (f == "--csv")
      o.csv = v;
    else if (f == "--data-dir")
      o.data_dir = v;
    else if (f == "--model")
      o.model = v;
    else if (f == "--iterations")
      o.iterations = std::atoi(v.c_str());
    else if (f == "--repeats")
      o.repeats = std::atoi(v.c_str());
    else if (f == "--batch-size")
      o.batch_size = std::atoi(v.c_str());
    else
      return Fail("unknown flag " + f, 2);
  }
  if (o.iterations < 1) return Fail("--iterations must be >= 1", 2);
  if (o.repeats < 1) return Fail("--repeats must be >= 1", 2);
  if (o.batch_size < 2 || o.batch_size % 2 != 0) {
    return Fail("--batch-size must be even (it is split over 2 workers)", 2);
  }
  geeps::StatusOr<nn::Network> net = fmnist::BuildModel(o.model);
  if (!net.ok()) return Fail(net.status().message(), 2);

  const uint64_t examples = static_cast<uint64_t>(o.iterations) * o.batch_size;
  fmnist::Dataset train, test;
  std::string data = "fashion-mnist";
  if (!fmnist::LoadFashionMnist(o.data_dir, examples, &train, &test).ok() ||
      static_cast<uint64_t>(train.size()) < examples) {
    data = "synthetic";
    fmnist::MakeSyntheticData(static_cast<int64_t>(examples), 1, o.seed, &train, &test);
  }
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  std::printf(
      "model %s, global batch %d, best of %d rounds of %d timed "
      "iterations (after as many of warm-up), %s data, %d cores\n",
      net->Describe().c_str(), o.batch_size, o.repeats, o.iterations, data.c_str(), cores);
  std::fflush(stdout);

  // Rounds of (1) no parameter server, with the OpenBLAS threads of one
  // libgeeps worker, (2) and (3) libgeeps with 1 and 2 workers (TrainNet
  // gives each max(1, cores / workers) threads): interleaved, so that load
  // from elsewhere on the machine hits every configuration alike.
  std::vector<Row> rows = {{"no_ps", 1, 0, {}}, {"libgeeps", 1, 0, {}}, {"libgeeps", 2, 0, {}}};
  for (int round = 0; round < o.repeats; ++round) {
    nn::SetHostBlasThreads(cores);
    double loss = 0;
    rows[0].passes.push_back(TrainWithoutPs(o, *net, train, 2, &loss).back());
    std::printf("round %d: no_ps       %8.1f samples/s (train loss %.4f)\n", round + 1,
                rows[0].passes.back(), loss);
    std::fflush(stdout);
    for (int workers : {1, 2}) {
      fmnist::NetOptions n;
      n.model = o.model;
      n.workers = workers;
      n.epochs = 2;
      n.batch_size = o.batch_size;
      n.learning_rate = o.lr;
      n.momentum = o.momentum;
      n.seed = o.seed;
      n.evaluate = false;
      fmnist::NetReport report;
      geeps::Status s = fmnist::TrainNet(n, train, test, &report);
      if (!s.ok()) return Fail(s.ToString(), 1);
      rows[workers].passes.push_back(report.epochs.back().samples_per_second);
      std::printf("round %d: libgeeps x%d %8.1f samples/s (train loss %.4f)\n", round + 1, workers,
                  rows[workers].passes.back(), report.epochs.back().train_loss);
      std::fflush(stdout);
    }
  }
  for (Row& r : rows) r = Best(r.config, r.workers, r.passes);
  std::printf(
      "best of %d: no_ps %.1f, libgeeps x1 %.1f, libgeeps x2 %.1f "
      "samples/s\n",
      o.repeats, rows[0].samples_per_second, rows[1].samples_per_second,
      rows[2].samples_per_second);
  const double base = rows[0].samples_per_second;
  const double overhead = 1.0 - rows[1].samples_per_second / base;
  std::printf(
      "libgeeps overhead on 1 worker vs no parameter server: %.1f%% "
      "(goal < 5%%); 2 workers: %.2fx no_ps\n",
      100 * overhead, rows[2].samples_per_second / base);

  std::ofstream json(o.out);
  json << "{\"benchmark\":\"training_throughput\",\"model\":\"" << net->Describe()
       << "\",\"batch_size\":" << o.batch_size << ",\"iterations\":" << o.iterations
       << ",\"repeats\":" << o.repeats << ",\"data\":\"" << data << "\",\"cores\":" << cores
       << ",\"overhead_1_worker\":" << overhead << ",\"runs\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    json << (i ? "," : "") << "{\"config\":\"" << rows[i].config
         << "\",\"workers\":" << rows[i].workers
         << ",\"samples_per_second\":" << rows[i].samples_per_second
         << ",\"relative_to_no_ps\":" << rows[i].samples_per_second / base << ",\"passes\":[";
    for (size_t p = 0; p < rows[i].passes.size(); ++p) {
      json << (p ? "," : "") << rows[i].passes[p];
    }
    json << "]}";
  }
  json << "]}\n";
  if (!json.good()) return Fail("cannot write " + o.out, 1);
  if (!o.csv.empty()) {
    std::ofstream csv(o.csv);
    csv << "config,workers,samples_per_second,relative_to_no_ps\n";
    for (const Row& r : rows) {
      csv << r.config << "," << r.workers << "," << r.samples_per_second << ","
          << r.samples_per_second / base << "\n";
    }
    if (!csv.good()) return Fail("cannot write " + o.csv, 1);
  }
  return 0;
}
