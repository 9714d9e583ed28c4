// big_net: a network several times larger than the device memory budget,
// trained through libgeeps' memory manager on synthetic data, then the same
// network without a budget (docs/examples.md, "A network larger than the
// device").
//
//   big_net [--iterations 60] [--batch-size 256] [--oversubscription 4]
//           [--copy-gbs 12] [--workers 1] [--lr 0.01] [--seed 1]
//           [--device host|cuda|auto] [--out F.json]
//
// --device cuda trains with the CUDA layer backend on the GPU (and fails at
// start without one); the emulated copy bandwidth (--copy-gbs) applies to
// the host backend only.
//
// Prints the model's parameter and local-data bytes, the budget and the
// oversubscription factor, samples/s with and without the budget, the
// memory stall time and fraction, the bytes swapped, and whether the
// weights of the two runs are bitwise identical. Exit status: 0 done (and
// identical weights), 1 a run failed or the weights differ, 2 bad flags.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "big_net.h"

namespace {

int Usage(const std::string& message) {
  std::cerr << "big_net: " << message << "\n"
            << "flags: --iterations N --batch-size N --oversubscription F "
               "--copy-gbs G --workers N --lr X --seed N "
               "--device host|cuda|auto --out F.json\n";
  return 2;
}

double MB(uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

const char* DeviceName(geeps::DeviceKind d) {
  switch (d) {
    case geeps::DeviceKind::kHost:
      return "host";
    case geeps::DeviceKind::kCuda:
      return "cuda";
    default:
      return "auto";
  }
}

}  // namespace

int main(int argc, char** argv) {
  fmnist::BigNetOptions o;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") {
      std::cout << "big_net: trains big-mlp on synthetic data with and without "
                   "a device memory budget (docs/examples.md)\n";
      return 0;
    }
    if (i + 1 >= argc) return Usage("missing value for " + f);
    const char* v = argv[++i];
    if (f == "--iterations")
      o.iterations = std::atoi(v);
    else if (f == "--batch-size")
      o.batch_size = std::atoi(v);
    else if (f == "--oversubscription")
      o.oversubscription = std::atof(v);
    else if (f == "--copy-gbs")
      o.copy_gbs = std::atof(v);
    else if (f == "--workers")
      o.workers = std::atoi(v);
    else if (f == "--lr")
      o.learning_rate = static_cast<float>(std::atof(v));
    else if (f == "--seed")
      o.seed = std::strtoull(v, nullptr, 10);
    else if (f == "--out")
      out = v;
    else if (f == "--device") {
      const std::string d = v;
      if (d == "host")
        o.device = geeps::DeviceKind::kHost;
      else if (d == "cuda")
        o.device = geeps::DeviceKind::kCuda;
      else if (d == "auto")
        o.device = geeps::DeviceKind::kAuto;
      else
        return Usage("--device must be host, cuda or auto");
    } else
      return Usage("unknown flag " + f);
  }
  o.log = &std::cout;
  fmnist::BigNetResult r;
  geeps::Status s = fmnist::RunBigNet(o, &r);
  if (s.code() == geeps::StatusCode::kInvalidArgument) return Usage(s.message());
  if (!s.ok()) {
    std::cerr << "big_net: " << s.ToString() << "\n";
    return 1;
  }
  const fmnist::BigNetRun& b = r.budgeted;
  const fmnist::BigNetRun& u = r.unbudgeted;
  std::printf(
      "model %s (%zu parameters), synthetic data, %d worker(s), batch %d, "
      "%d iterations, device %s\n"
      "parameter bytes:  %12llu (%.1f MB)\n"
      "local data bytes: %12llu (%.1f MB per worker: activations+gradients "
      "%.1f, weight gradients+momentum %.1f, scratch %.1f)\n"
      "device budget:    %12llu (%.1f MB per worker)\n"
      "oversubscription: %.2fx ((parameters + local data) / budget)\n"
      "pool:             %.1f MB (high water %.1f MB)\n"
      "with the budget:    %8.1f samples/s, %.2f s, memory stall %.3f s "
      "(fraction %.3f), host->device %.1f MB, device->host %.1f MB\n"
      "without a budget:   %8.1f samples/s, %.2f s\n"
      "relative throughput: %.3f\n"
      "test loss: %.4f -> %.4f (budget), %.4f -> %.4f (none)\n"
      "weights bitwise identical to the run without a budget: %s\n",
      r.model.c_str(), r.num_params, o.workers, o.batch_size, o.iterations, DeviceName(o.device),
      static_cast<unsigned long long>(r.param_bytes), MB(r.param_bytes),
      static_cast<unsigned long long>(r.local_bytes), MB(r.local_bytes), MB(r.activation_bytes),
      MB(r.optimizer_bytes), MB(r.scratch_bytes), static_cast<unsigned long long>(b.budget),
      MB(b.budget), r.oversubscription(), MB(b.pool_bytes), MB(b.pool_high_water),
      b.samples_per_second, b.seconds, b.stall_seconds, b.stall_fraction(),
      MB(b.bytes_host_to_device), MB(b.bytes_device_to_host), u.samples_per_second, u.seconds,
      r.relative_throughput(), b.loss_before, b.loss_after, u.loss_before, u.loss_after,
      r.weights_identical ? "yes" : "NO");
  if (!out.empty()) {
    std::ofstream f(out);
    f << "{\"benchmark\":\"big_net\",\"model\":\"" << r.model << "\",\"device\":\""
      << DeviceName(o.device) << "\",\"parameters\":" << r.num_params
      << ",\"workers\":" << o.workers << ",\"batch_size\":" << o.batch_size
      << ",\"iterations\":" << o.iterations << ",\"param_bytes\":" << r.param_bytes
      << ",\"local_bytes\":" << r.local_bytes << ",\"budget_bytes\":" << b.budget
      << ",\"oversubscription\":" << r.oversubscription()
      << ",\"samples_per_second_budget\":" << b.samples_per_second
      << ",\"samples_per_second_no_budget\":" << u.samples_per_second
      << ",\"relative_throughput\":" << r.relative_throughput()
      << ",\"memory_stall_seconds\":" << b.stall_seconds
      << ",\"stall_fraction\":" << b.stall_fraction()
      << ",\"bytes_host_to_device\":" << b.bytes_host_to_device
      << ",\"bytes_device_to_host\":" << b.bytes_device_to_host
      << ",\"weights_identical\":" << (r.weights_identical ? "true" : "false") << "}\n";
    if (!f.good()) {
      std::cerr << "big_net: cannot write " << out << "\n";
      return 1;
    }
  }
  return r.weights_identical ? 0 : 1;
}
