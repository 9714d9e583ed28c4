// Scaling with emulated compute: 1, 2, 4 and 8 processes on one machine,
// each a worker and a server shard (as GeePS runs one of each per machine),
// training a model of `--params` floats over `--tables` tables. Each
// iteration emulates a network's layers: forward, per table in order, Read
// then compute; backward, per table in reverse, compute then PreUpdate/
// Update; then Clock. Compute is a sleep (standing in for the GPU, so it
// takes no CPU from the communication). Throughput = workers / time per
// iteration; efficiency = throughput(N) / (N x throughput(1)), under BSP
// (slack 0) and SSP (slack 1).
//
// The baseline users would pick instead: the same emulated compute, then
// MPI_Allreduce of all the gradients each iteration with no overlap
// (benchmarks/allreduce_bench, started with mpirun), measured in the same
// run when mpirun and allreduce_bench are present.
//
//   scale_bench [--out scale_bench.json] [--csv scale_bench.csv]
//               [--workers 1,2,4,8] [--params 2000000] [--tables 4]
//               [--compute-ms 200] [--iterations 20] [--slacks 0,1]
//               [--allreduce PATH|none]
// Internal mode (started by the driver): --child
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "geeps/process.h"

namespace {

using geeps::bench::Collect;
using geeps::bench::Self;
using geeps::testing::Child;
using geeps::testing::Env;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kWidth = 1024;

struct Options {
  std::string out = "scale_bench.json", csv = "scale_bench.csv";
  std::vector<int> workers = {1, 2, 4, 8};
  std::vector<int> slacks = {0, 1};
  uint64_t params = 2000000;
  int tables = 4;
  double compute_ms = 200;
  int iterations = 20;
  std::string allreduce;  // path of allreduce_bench; "none" = skip
  bool child = false;
  int slack = 0;
};

std::vector<int> ParseList(const std::string& v) {
  std::vector<int> out;
  std::stringstream in(v);
  for (std::string s; std::getline(in, s, ',');) out.push_back(std::stoi(s));
  return out;
}

uint64_t RowsPerTable(const Options& o) {
  return std::max<uint64_t>(1, o.params / o.tables / kWidth);
}

void Compute(double ms) {
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
}

int RunChild(const Options& o) {
  geeps::Config c;
  const uint64_t rows = RowsPerTable(o);
  for (int t = 0; t < o.tables; ++t) c.tables.push_back({"layer" + std::to_string(t), rows, kWidth});
  c.timeout = std::chrono::milliseconds(120000);
  geeps::ProcessOptions po;
  geeps::Status st = geeps::ApplyEnvironment(&po);
  auto p = st.ok() ? geeps::Process::Join(c, po)
                   : geeps::StatusOr<std::unique_ptr<geeps::Process>>(st);
  if (!p.ok()) {
    std::fprintf(stderr, "join: %s\n", p.status().ToString().c_str());
    return 1;
  }
  geeps::GeePS* ps = (*p)->worker();
  auto run = [&]() -> geeps::Status {
    const auto all = geeps::RowRange(0, rows);
    std::vector<geeps::ReadHandle> reads;
    std::vector<geeps::UpdateHandle> updates(o.tables);
    for (int t = 0; t < o.tables; ++t) {
      GEEPS_ASSIGN_OR_RETURN(auto h, ps->VirtualRead(t, all, o.slack));
      GEEPS_RETURN_IF_ERROR(ps->VirtualPostRead(h));
      reads.push_back(h);
    }
    for (int t = o.tables - 1; t >= 0; --t) {
      GEEPS_ASSIGN_OR_RETURN(updates[t], ps->VirtualPreUpdate(t, all));
      GEEPS_RETURN_IF_ERROR(ps->VirtualUpdate(updates[t]));
    }
    GEEPS_RETURN_IF_ERROR(ps->VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps->FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps->StartIterations());
    const double per_layer = o.compute_ms / (2.0 * o.tables);
    const int warm = 3;
    const float scale = 1.0f / static_cast<float>(c.num_workers);
    // The application's deltas, written into the (device) buffers through
    // the worker's copies, as on a GPU.
    const std::vector<float> deltas(static_cast<size_t>(rows) * kWidth, scale);
    Clock::time_point start;
    for (int i = 0; i < warm + o.iterations; ++i) {
      if (i == warm) start = Clock::now();
      for (int t = 0; t < o.tables; ++t) {
        GEEPS_ASSIGN_OR_RETURN(const float* w, ps->Read(reads[t]));
        (void)w;
        Compute(per_layer);
        GEEPS_RETURN_IF_ERROR(ps->PostRead(reads[t]));
      }
      for (int t = o.tables - 1; t >= 0; --t) {
        Compute(per_layer);
        GEEPS_ASSIGN_OR_RETURN(float* d, ps->PreUpdate(updates[t]));
        GEEPS_RETURN_IF_ERROR(ps->CopyFromHost(d, deltas.data(), deltas.size()));
        GEEPS_RETURN_IF_ERROR(ps->Update(updates[t]));
      }
      GEEPS_RETURN_IF_ERROR(ps->Clock());
    }
    const double t = std::chrono::duration<double>(Clock::now() - start).count() / o.iterations;
    std::printf("RESULT %.9f\n", t);
    return geeps::Status::OK();
  };
  st = ps ? run() : geeps::Status::OK();
  if (!st.ok()) std::fprintf(stderr, "worker: %s\n", st.ToString().c_str());
  geeps::Status down = (*p)->Shutdown();
  if (!down.ok()) std::fprintf(stderr, "shutdown: %s\n", down.ToString().c_str());
  return st.ok() && down.ok() ? 0 : 1;
}

std::vector<std::string> ChildArgs(const Options& o, int slack) {
  return {"--params", std::to_string(o.params), "--tables", std::to_string(o.tables),
          "--compute-ms", std::to_string(o.compute_ms), "--iterations",
          std::to_string(o.iterations), "--slack", std::to_string(slack)};
}

double RunGeeps(const Options& o, int n, int slack) {
  std::vector<Child> children;
  const std::string coord = "127.0.0.1:" + std::to_string(geeps::testing::FreePort());
  for (int r = 0; r < n; ++r) {
    Env env = {{"GEEPS_RANK", std::to_string(r)},
               {"GEEPS_WORLD_SIZE", std::to_string(n)},
               {"GEEPS_COORDINATOR", coord}};
    std::vector<std::string> argv = {Self(), "--child"};
    for (const std::string& a : ChildArgs(o, slack)) argv.push_back(a);
    children.push_back(geeps::testing::Spawn(argv, env));
  }
  return Collect(children, "libgeeps job");
}

// The MPI_Allreduce baseline through mpirun; < 0 if it cannot run.
double RunAllreduce(const Options& o, int n) {
  std::vector<std::string> argv = {"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe",
                                   "--bind-to", "none", "-np", std::to_string(n), o.allreduce};
  for (const std::string& a : ChildArgs(o, 0)) argv.push_back(a);
  std::vector<Child> children = {geeps::testing::Spawn(argv, {})};
  return Collect(children, "allreduce baseline");
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "scale_bench: %s\nusage: scale_bench [--out F.json] [--csv F.csv] "
               "[--workers 1,2,4,8] [--params N] [--tables T] [--compute-ms MS] "
               "[--iterations I] [--slacks 0,1] [--allreduce PATH|none]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--child") {
      o.child = true;
      continue;
    }
    if (i + 1 >= argc) return Usage(("missing value of " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--out") o.out = v;
    else if (a == "--csv") o.csv = v;
    else if (a == "--workers") o.workers = ParseList(v);
    else if (a == "--slacks") o.slacks = ParseList(v);
    else if (a == "--slack") o.slack = std::stoi(v);
    else if (a == "--params") o.params = std::stoull(v);
    else if (a == "--tables") o.tables = std::stoi(v);
    else if (a == "--compute-ms") o.compute_ms = std::stod(v);
    else if (a == "--iterations") o.iterations = std::stoi(v);
    else if (a == "--allreduce") o.allreduce = v;
    else return Usage(("unknown flag " + a).c_str());
  }
  if (o.tables < 1 || o.iterations < 1 || o.compute_ms < 0 || o.params < 1)
    return Usage("--tables, --iterations and --params must be >= 1, --compute-ms >= 0");
  if (o.child) return RunChild(o);
  if (o.allreduce.empty()) {
    const std::string self = Self();
    o.allreduce = self.substr(0, self.rfind('/') + 1) + "allreduce_bench";
  }
  const bool baseline = o.allreduce != "none" && access(o.allreduce.c_str(), X_OK) == 0 &&
                        access("/usr/bin/mpirun", X_OK) == 0;
  if (!baseline)
    std::printf("(no MPI_Allreduce baseline: %s or /usr/bin/mpirun missing)\n",
                o.allreduce.c_str());

  std::ofstream json(o.out), csv(o.csv);
  const uint64_t params = RowsPerTable(o) * o.tables * kWidth;
  json << "{\"benchmark\":\"scale_bench\",\"params\":" << params << ",\"tables\":" << o.tables
       << ",\"compute_ms\":" << o.compute_ms << ",\"iterations\":" << o.iterations
       << ",\"results\":[";
  csv << "system,slack,workers,seconds_per_iteration,throughput,efficiency\n";
  std::printf("%d parameters in %d tables, %.0f ms emulated compute per iteration\n",
              static_cast<int>(params), o.tables, o.compute_ms);
  std::printf("%-10s %5s %7s %10s %12s %10s\n", "system", "slack", "workers", "s/iter",
              "iter/s total", "efficiency");
  bool first = true, failed = false;
  auto report = [&](const std::string& system, int slack, int n, double t, double base) {
    const double thr = n / t, eff = base > 0 ? thr / (n * (1.0 / base)) : 1.0;
    std::printf("%-10s %5d %7d %10.4f %12.2f %10.3f\n", system.c_str(), slack, n, t, thr, eff);
    std::fflush(stdout);
    json << (first ? "" : ",") << "{\"system\":\"" << system << "\",\"slack\":" << slack
         << ",\"workers\":" << n << ",\"seconds_per_iteration\":" << t
         << ",\"throughput\":" << thr << ",\"efficiency\":" << eff << "}";
    csv << system << "," << slack << "," << n << "," << t << "," << thr << "," << eff << "\n";
    first = false;
  };
  for (int slack : o.slacks) {
    double base = -1;
    for (int n : o.workers) {
      const double t = RunGeeps(o, n, slack);
      if (t <= 0) {
        failed = true;
        continue;
      }
      if (base < 0) base = n == 1 ? t : -1;
      report("libgeeps", slack, n, t, base);
    }
  }
  if (baseline) {
    double base = -1;
    for (int n : o.workers) {
      const double t = RunAllreduce(o, n);
      if (t <= 0) {
        failed = true;
        continue;
      }
      if (base < 0) base = n == 1 ? t : -1;
      report("allreduce", 0, n, t, base);
    }
  }
  json << "]}\n";
  return failed ? 1 : 0;
}
