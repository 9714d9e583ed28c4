// The memory manager under oversubscription: a model whose local data (the
// activations of `layers` layers) plus parameters are 1x, 2x, 4x and 8x the
// device memory budget, with emulated compute per layer that dominates the
// emulated host<->device copies (host backend, 12 GB/s by default).
// Throughput is relative to the unconstrained run (no budget) measured in the
// same process; the stall fraction is the share of wall time the application
// thread waited for the memory manager.
//   memory_bench [--out results.json] [--csv results.csv] [--layers 32] [--layer-mb 1]
//                [--compute-ms 3] [--iterations 10] [--bandwidth-gbs 12]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "flags.h"
#include "geeps/embedded_cluster.h"

namespace {

using geeps::Status;

struct Options {
  std::string out = "memory_bench.json";
  std::string csv;  // optional: oversubscription,relative_throughput,stall_fraction
  int layers = 32;
  double layer_mb = 1;
  double compute_ms = 3;
  int iterations = 10;
  double bandwidth_gbs = 12;
};

struct Result {
  double factor = 0;  // oversubscription: (params + local) / budget
  uint64_t budget = 0;
  double seconds = 0;
  double stall_seconds = 0;
  int64_t h2d = 0, d2h = 0;
};

constexpr uint32_t kWidth = 1024;  // floats per row

Status Train(geeps::GeePS& ps, const Options& o, Result* r) {
  const uint64_t act_rows = static_cast<uint64_t>(o.layer_mb * (1 << 20) / (kWidth * 4));
  std::vector<geeps::LocalHandle> fwd, bwd;
  GEEPS_ASSIGN_OR_RETURN(geeps::ReadHandle read, ps.VirtualRead(0, geeps::RowRange(0, 16)));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(read));
  for (int l = 0; l < o.layers; ++l) {  // forward: write activations
    GEEPS_ASSIGN_OR_RETURN(auto h,
                           ps.VirtualLocalAccess(1 + l, geeps::RowRange(0, act_rows), false));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(h, true));
    fwd.push_back(h);
  }
  for (int l = o.layers - 1; l >= 0; --l) {  // backward: read them back
    GEEPS_ASSIGN_OR_RETURN(auto h,
                           ps.VirtualLocalAccess(1 + l, geeps::RowRange(0, act_rows), true));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(h, false));
    bwd.push_back(h);
  }
  GEEPS_ASSIGN_OR_RETURN(geeps::UpdateHandle upd, ps.VirtualPreUpdate(0, geeps::RowRange(0, 16)));
  GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(upd));
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  GEEPS_RETURN_IF_ERROR(ps.StartIterations());
  const auto compute = std::chrono::microseconds(static_cast<int64_t>(o.compute_ms * 1000));
  auto step = [&](int i) -> Status {
    GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(read));
    (void)w;
    GEEPS_RETURN_IF_ERROR(ps.PostRead(read));
    for (auto h : fwd) {
      GEEPS_ASSIGN_OR_RETURN(float* a, ps.LocalAccess(h));
      const float mark = static_cast<float>(i);
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(a, &mark, 1));  // touch; the "layer" is the sleep
      std::this_thread::sleep_for(compute);
      GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(h));
    }
    for (auto h : bwd) {
      GEEPS_ASSIGN_OR_RETURN(float* a, ps.LocalAccess(h));
      float mark = -1;
      GEEPS_RETURN_IF_ERROR(ps.CopyToHost(&mark, a, 1));
      if (mark != static_cast<float>(i)) return geeps::InternalError("activation lost");
      std::this_thread::sleep_for(compute);
      GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(h));
    }
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(upd));
    const float one = 1;
    GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, &one, 1));
    GEEPS_RETURN_IF_ERROR(ps.Update(upd));
    return ps.Clock();
  };
  GEEPS_RETURN_IF_ERROR(step(0));  // warm-up
  const auto start = std::chrono::steady_clock::now();
  const double stall0 = ps.GetStats().memory_stall_seconds;
  for (int i = 1; i <= o.iterations; ++i) GEEPS_RETURN_IF_ERROR(step(i));
  r->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  geeps::WorkerStats s = ps.GetStats();
  r->stall_seconds = s.memory_stall_seconds - stall0;
  r->h2d = s.bytes_host_to_device;
  r->d2h = s.bytes_device_to_host;
  return Status::OK();
}

Status RunOne(const Options& o, double factor, Result* r) {
  geeps::Config c;
  c.tables.push_back({"params", 16, kWidth});
  const uint64_t act_rows = static_cast<uint64_t>(o.layer_mb * (1 << 20) / (kWidth * 4));
  for (int l = 0; l < o.layers; ++l)
    c.tables.push_back({"act" + std::to_string(l), act_rows, kWidth, true});
  const uint64_t total = (16 + o.layers * act_rows) * kWidth * 4;
  r->factor = factor;
  r->budget = factor > 0 ? static_cast<uint64_t>(total / factor) : 0;
  c.device_memory_budget = r->budget;
  c.memory_guarantee = geeps::MemoryGuarantee::kDoubleBuffering;
  c.emulated_copy_bandwidth = static_cast<uint64_t>(o.bandwidth_gbs * 1e9);
  GEEPS_RETURN_IF_ERROR(geeps::ApplyEnvironment(&c));  // e.g. GEEPS_PREFETCH_DEPTH
  c.device_memory_budget = r->budget;
  auto cluster = geeps::EmbeddedCluster::Start(c);
  if (!cluster.ok()) return cluster.status();
  return (*cluster)->RunWorkers([&](geeps::GeePS& ps) { return Train(ps, o, r); });
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  geeps::bench::Flags flags("memory_bench");
  flags.Add("--out", &o.out, "JSON results")
      .Add("--csv", &o.csv, "CSV results (oversubscription,relative_throughput,stall_fraction)")
      .Add("--layers", &o.layers, "layers of the emulated network")
      .Add("--layer-mb", &o.layer_mb, "MB of parameters per layer")
      .Add("--compute-ms", &o.compute_ms, "emulated compute per layer pass")
      .Add("--iterations", &o.iterations, "timed iterations per budget")
      .Add("--bandwidth-gbs", &o.bandwidth_gbs, "emulated host<->device bandwidth, GB/s");
  if (const int status = flags.Parse(argc, argv); status >= 0) return status;
  if (o.layers < 1 || o.iterations < 1 || !(o.layer_mb > 0) || o.compute_ms < 0 ||
      !(o.bandwidth_gbs > 0)) {
    return flags.Fail("--layers, --iterations, --layer-mb and --bandwidth-gbs must be > 0");
  }
  std::vector<Result> results;
  for (double factor : {0.0, 1.0, 2.0, 4.0, 8.0}) {
    Result r;
    Status st = RunOne(o, factor, &r);
    if (!st.ok()) {
      std::fprintf(stderr, "memory_bench: %gx: %s\n", factor, st.ToString().c_str());
      return 1;
    }
    results.push_back(r);
    std::printf(
        "%-14s budget %12llu B: %.3f s for %d iterations, stall %.3f s, h2d %lld B\n",
        factor == 0 ? "unconstrained" : (std::to_string(static_cast<int>(factor)) + "x").c_str(),
        static_cast<unsigned long long>(r.budget), r.seconds, o.iterations, r.stall_seconds,
        static_cast<long long>(r.h2d));
  }
  std::ofstream out(o.out);
  out << "{\"benchmark\":\"memory_oversubscription\",\"layers\":" << o.layers
      << ",\"layer_mb\":" << o.layer_mb << ",\"compute_ms_per_layer_pass\":" << o.compute_ms
      << ",\"iterations\":" << o.iterations << ",\"emulated_bandwidth_gbs\":" << o.bandwidth_gbs
      << ",\"runs\":[";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    out << (i ? "," : "") << "{\"oversubscription\":" << r.factor
        << ",\"budget_bytes\":" << r.budget << ",\"seconds\":" << r.seconds
        << ",\"relative_throughput\":" << results[0].seconds / r.seconds
        << ",\"stall_fraction\":" << r.stall_seconds / r.seconds
        << ",\"bytes_host_to_device\":" << r.h2d << ",\"bytes_device_to_host\":" << r.d2h << "}";
    std::printf("%gx: relative throughput %.3f, stall fraction %.3f\n", r.factor,
                results[0].seconds / r.seconds, r.stall_seconds / r.seconds);
  }
  out << "]}\n";
  if (!o.csv.empty()) {
    std::ofstream csv(o.csv);
    csv << "oversubscription,relative_throughput,stall_fraction\n";
    for (const Result& r : results)
      csv << r.factor << "," << results[0].seconds / r.seconds << "," << r.stall_seconds / r.seconds
          << "\n";
  }
  return 0;
}
