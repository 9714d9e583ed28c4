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
// `--pipeline B` sets Config::pipeline_part_bytes (updates in parts of B
// bytes, pushes that start before the last part arrives; 0: off).
//
// `--repeat R` runs the largest worker count under BSP (and the allreduce
// baseline at that count) R times; every repetition is reported, and the
// median, each against the 1-worker throughput of the same run.
//
// `--netns` runs every process in a network namespace of its own (a
// "machine"), joined by veth pairs through a bridge, each machine's link
// limited to `--rate` (tc tbf, both directions; benchmarks/netns.h), all
// made and removed by this run. Ranks find each other as on several
// machines: GEEPS_COORDINATOR is machine 0's address, and each shard binds
// and advertises its machine's address (the one that routes to the
// coordinator). The allreduce baseline runs under mpirun in the same
// namespaces (mpirun in a namespace of its own, its daemons started in each
// machine's by this program as mpirun's rsh agent, `--mca btl tcp,self`);
// next to it, a computed ring allreduce at the measured link rate
// ("allreduce-computed": compute + 2(N-1)/N x model bytes / rate, no
// overhead, labelled as computed), and the ceiling of BSP at that rate when
// a table is sent whole ("bsp-bound-computed": compute + 2(N-1)/N x one
// table's bytes / rate: the update and then the push of the table read
// first, which nothing can hide). Skipped with one line naming the reason
// where namespaces cannot be made (not root, no permission, no iproute2).
//
// `--per-machine K` (with `--netns`) puts K ranks in each namespace (ranks
// r of machine r / K), so a machine's workers share its link, and
// `--aggregate` runs each libgeeps point a second time with machine-level
// aggregation (Config::aggregate_per_machine, GEEPS_MACHINE = the
// namespace): system "libgeeps-aggregated". In netns mode the first rank of
// each machine reads its namespace's eth0 counters (/sys/class/net/eth0/
// statistics) at the start and end of the timed iterations: the bytes each
// machine sent and received on the wire per iteration, averaged over the
// machines, go to the JSON's "wire" list.
//
// `--plain` also runs plain-zmq (plain_ps.h): the least a parameter server
// of this shape does over plain ZeroMQ, in the same processes and places,
// to tell what the machine costs from what libgeeps costs.
// `--push-in-read-order` sets Config::push_in_read_order (system
// libgeeps-read-order); `--as-ready` clears Config::adapt_push_order
// (system libgeeps-as-ready: pushes go as their clocks complete, the
// default before adaptation). Every run also reports where an iteration went
// (timeline.h: per rank and iteration, compute, each table's Read wait,
// Updates, Clock; the largest points' spans go to --timeline-csv), the CPU
// of its processes per iteration and the machine's busy share of its
// cores (overall, and in three parts of rank 0's iteration); in netns mode
// each machine's link's busy share.
//
//   scale_bench [--out scale_bench.json] [--csv scale_bench.csv]
//               [--workers 1,2,4,8] [--params 2000000] [--tables 4]
//               [--compute-ms 200] [--iterations 20] [--slacks 0,1]
//               [--repeat 1] [--allreduce PATH|none] [--pipeline BYTES]
//               [--netns [--rate 1gbit] [--per-machine K] [--aggregate]]
//               [--plain] [--push-in-read-order] [--timeline-csv FILE]
//               (outputs scale_bench_netns.*)
// On 2 cores shared with a CI build: 1 minute by default, 1 min 45 s with
// `--repeat 5` (4 more 8-worker BSP and allreduce runs); `--netns`: 1 min
// 15 s, 1 min 45 s with `--repeat 3`.
// Internal modes (started by the driver): --child; --probe recv|send (the
// link rate); --rsh-agent NAMESPACE COMMAND... (mpirun's launcher).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "flags.h"
#include "geeps/process.h"
#include "netns.h"
#include "plain_ps.h"
#include "timeline.h"

namespace {

using geeps::bench::Collect;
using geeps::bench::CpuTime;
using geeps::bench::MachineCpu;
using geeps::bench::NetnsCluster;
using geeps::bench::Phase;
using geeps::bench::Self;
using geeps::bench::Timeline;
using geeps::testing::Child;
using geeps::testing::Env;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kWidth = 1024;

struct Options {
  std::string out = "scale_bench.json", csv = "scale_bench.csv";
  bool out_set = false, csv_set = false;
  std::vector<int> workers = {1, 2, 4, 8};
  std::vector<int> slacks = {0, 1};
  uint64_t params = 2000000;
  int tables = 4;
  double compute_ms = 200;
  int iterations = 20;
  int repeat = 1;
  uint64_t pipeline = 0;  // Config::pipeline_part_bytes
  std::string allreduce;  // path of allreduce_bench; "none" = skip
  bool netns = false;
  std::string rate = "1gbit";
  int per_machine = 1;      // ranks per namespace
  bool aggregate = false;   // also run with machine-level aggregation
  int child_aggregate = 0;  // internal: the child's aggregate_per_machine
  int child_wire = 0;       // internal: read eth0's counters (first rank of a machine)
  bool child = false;
  bool plain = false;        // also run the plain ZeroMQ parameter server
  bool read_order = false;   // Config::push_in_read_order (system libgeeps-read-order)
  bool as_ready = false;     // !Config::adapt_push_order (system libgeeps-as-ready)
  std::string child_plain;   // internal: run a plain-zmq rank; every rank's endpoint
  std::string timeline_csv;  // the largest point's timelines (default: beside --csv)
  int slack = 0;
  std::string probe;  // "recv" or "send": internal link-rate probe
  std::string probe_host;
  uint64_t probe_bytes = 0;
};

uint64_t RowsPerTable(const Options& o) {
  return std::max<uint64_t>(1, o.params / o.tables / kWidth);
}

void Compute(double ms) {
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
}

// A rank of the plain ZeroMQ parameter server (plain_ps.h).
int RunPlainChild(const Options& o) {
  geeps::bench::PlainPsJob job;
  std::istringstream in(o.child_plain);
  for (std::string e; std::getline(in, e, ',');) job.endpoints.push_back(e);
  const char* rank = std::getenv("GEEPS_RANK");
  job.rank = rank ? std::atoi(rank) : -1;
  if (job.rank < 0 || job.rank >= job.world()) {
    std::fprintf(stderr, "plain-zmq: GEEPS_RANK out of range\n");
    return 1;
  }
  job.tables = o.tables;
  job.rows = RowsPerTable(o);
  job.width = kWidth;
  job.compute_ms = o.compute_ms;
  job.iterations = o.iterations;
  const double t = geeps::bench::RunPlainPs(job);
  if (t <= 0) return 1;
  std::printf("RESULT %.9f\n", t);
  return 0;
}

int RunChild(const Options& o) {
  geeps::Config c;
  const uint64_t rows = RowsPerTable(o);
  for (int t = 0; t < o.tables; ++t)
    c.tables.push_back({"layer" + std::to_string(t), rows, kWidth});
  c.timeout = std::chrono::milliseconds(120000);
  // GEEPS_* settings first (e.g. GEEPS_SEND_UPDATES_IN_PLACE=1); the flags'
  // below win.
  geeps::Status env = geeps::ApplyEnvironment(&c);
  if (!env.ok()) {
    std::fprintf(stderr, "environment: %s\n", env.ToString().c_str());
    return 1;
  }
  c.pipeline_part_bytes = o.pipeline;
  c.aggregate_per_machine = o.child_aggregate != 0;
  c.push_in_read_order = o.read_order;
  c.adapt_push_order = !o.as_ready;
  geeps::ProcessOptions po;
  geeps::Status st = geeps::ApplyEnvironment(&po);
  auto p =
      st.ok() ? geeps::Process::Join(c, po) : geeps::StatusOr<std::unique_ptr<geeps::Process>>(st);
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
    // This machine's link counters (netns: eth0 is the machine's veth end).
    auto wire = [](const char* which) -> long long {
      std::ifstream in(std::string("/sys/class/net/eth0/statistics/") + which);
      long long v = -1;
      in >> v;
      return v;
    };
    long long tx0 = 0, rx0 = 0;
    Timeline tl;
    // The machine's CPU in three parts of rank 0's iterations: waiting for
    // the first table, the rest of the forward pass, the backward pass.
    geeps::bench::MachinePhases phases(3);
    const bool first_rank = (*p)->rank() == 0;
    CpuTime cpu0;
    MachineCpu machine0;
    for (int i = 0; i < warm + o.iterations; ++i) {
      if (i == warm) {
        start = Clock::now();
        cpu0 = CpuTime::Now();
        machine0 = MachineCpu::Now();
        if (o.child_wire) {
          tx0 = wire("tx_bytes");
          rx0 = wire("rx_bytes");
        }
      }
      tl.StartIteration();
      if (first_rank) phases.Mark(0, i >= warm);
      for (int t = 0; t < o.tables; ++t) {
        auto a = Clock::now();
        GEEPS_ASSIGN_OR_RETURN(const float* w, ps->Read(reads[t]));
        (void)w;
        tl.Add(Phase::kRead, t, a, Clock::now());
        if (first_rank && t == 0) phases.Mark(1, i >= warm);
        a = Clock::now();
        Compute(per_layer);
        tl.Add(Phase::kForward, t, a, Clock::now());
        GEEPS_RETURN_IF_ERROR(ps->PostRead(reads[t]));
      }
      if (first_rank) phases.Mark(2, i >= warm);
      for (int t = o.tables - 1; t >= 0; --t) {
        auto a = Clock::now();
        Compute(per_layer);
        tl.Add(Phase::kBackward, t, a, Clock::now());
        a = Clock::now();
        GEEPS_ASSIGN_OR_RETURN(float* d, ps->PreUpdate(updates[t]));
        GEEPS_RETURN_IF_ERROR(ps->CopyFromHost(d, deltas.data(), deltas.size()));
        GEEPS_RETURN_IF_ERROR(ps->Update(updates[t]));
        tl.Add(Phase::kUpdate, t, a, Clock::now());
      }
      const auto a = Clock::now();
      GEEPS_RETURN_IF_ERROR(ps->Clock());
      tl.Add(Phase::kClock, -1, a, Clock::now());
      if (i >= warm) std::printf("%s\n", tl.Line((*p)->rank(), i - warm).c_str());
    }
    const double t = std::chrono::duration<double>(Clock::now() - start).count() / o.iterations;
    if (first_rank) {
      phases.Mark(0, true);
      std::printf("%s\n", phases.Line().c_str());
    }
    geeps::bench::PrintCpu(cpu0, machine0, (*p)->rank() == 0, o.iterations);
    if (o.child_wire) {
      const long long tx = wire("tx_bytes"), rx = wire("rx_bytes");
      if (tx >= 0 && rx >= 0 && tx0 >= 0 && rx0 >= 0)
        std::printf("WIREBYTES %.1f %.1f\n", static_cast<double>(tx - tx0) / o.iterations,
                    static_cast<double>(rx - rx0) / o.iterations);
    }
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
  std::vector<std::string> a = {
      "--params",     std::to_string(o.params),     "--tables",     std::to_string(o.tables),
      "--compute-ms", std::to_string(o.compute_ms), "--iterations", std::to_string(o.iterations),
      "--slack",      std::to_string(slack),        "--pipeline",   std::to_string(o.pipeline)};
  if (o.read_order) a.push_back("--push-in-read-order");
  if (o.as_ready) a.push_back("--as-ready");
  return a;
}

// A coordinator port per job in --netns mode (no other listeners there).
int NextNetnsPort() {
  static int job = 0;
  return 29500 + (job++ % 1000);
}

// Bytes per iteration on each machine's link, averaged over the machines
// (netns mode; -1 where not measured).
struct Wire {
  double tx = -1, rx = -1;
};

// What a run's ranks reported beside their RESULT lines.
struct Observed {
  Wire wire;
  std::vector<geeps::bench::RankTimeline> timelines;
  double cpu_user = 0, cpu_sys = 0;  // core-seconds per iteration, all processes
  double machine_busy = -1;          // the machine's busy share of its cores
  // The same in rank 0's wait for the first table, the rest of its forward
  // pass, its backward pass (libgeeps only; -1: not measured).
  double phase_busy[3] = {-1, -1, -1};
};

Observed Observe(const std::vector<std::string>& lines) {
  Observed ob;
  double tx = 0, rx = 0;
  int machines = 0;
  for (const std::string& line : lines) {
    double a = 0, b = 0;
    geeps::bench::RankTimeline tl;
    if (std::sscanf(line.c_str(), "WIREBYTES %lf %lf", &a, &b) == 2) {
      tx += a;
      rx += b;
      ++machines;
    } else if (std::sscanf(line.c_str(), "CPUTIME %lf %lf", &a, &b) == 2) {
      ob.cpu_user += a;
      ob.cpu_sys += b;
    } else if (std::sscanf(line.c_str(), "MACHINECPU %lf", &a) == 1) {
      ob.machine_busy = a;
    } else if (std::sscanf(line.c_str(), "MACHINEPHASES %lf %lf %lf", &ob.phase_busy[0],
                           &ob.phase_busy[1], &ob.phase_busy[2]) == 3) {
    } else if (geeps::bench::ParseTimeline(line, &tl)) {
      ob.timelines.push_back(std::move(tl));
    }
  }
  if (machines > 0) ob.wire = {tx / machines, rx / machines};
  return ob;
}

double RunGeeps(const Options& o, int n, int slack, const NetnsCluster* net, bool aggregate,
                Observed* observed) {
  std::vector<Child> children;
  const std::string coord = net ? NetnsCluster::Address(0) + ":" + std::to_string(NextNetnsPort())
                                : "127.0.0.1:" + std::to_string(geeps::testing::FreePort());
  for (int r = 0; r < n; ++r) {
    // The caller's GEEPS_* settings, then the job's.
    Env env = geeps::testing::GeepsVariables();
    env["GEEPS_RANK"] = std::to_string(r);
    env["GEEPS_WORLD_SIZE"] = std::to_string(n);
    env["GEEPS_COORDINATOR"] = coord;
    std::vector<std::string> argv = {Self(), "--child"};
    for (const std::string& a : ChildArgs(o, slack)) argv.push_back(a);
    const int machine = r / std::max(1, o.per_machine);
    if (aggregate) {
      argv.insert(argv.end(), {"--child-aggregate", "1"});
      env["GEEPS_MACHINE"] = "m" + std::to_string(machine);
      env["GEEPS_IPC_DIR"] = "/tmp";
    }
    if (net && r % std::max(1, o.per_machine) == 0) argv.insert(argv.end(), {"--child-wire", "1"});
    if (net) argv = net->Wrap(net->Namespace(machine), argv);
    children.push_back(geeps::testing::Spawn(argv, env));
  }
  std::vector<std::string> lines;
  const double t = Collect(children, "libgeeps job", &lines);
  *observed = Observe(lines);
  return t;
}

// The plain ZeroMQ parameter server (plain_ps.h), one rank per process in
// the same places as libgeeps' ranks.
double RunPlain(const Options& o, int n, const NetnsCluster* net, Observed* observed) {
  std::string endpoints;
  const int port = net ? NextNetnsPort() : 0;
  for (int r = 0; r < n; ++r) {
    const int machine = r / std::max(1, o.per_machine);
    const std::string host = net ? NetnsCluster::Address(machine) : "127.0.0.1";
    const int p = net ? port + 1000 + r % std::max(1, o.per_machine) : geeps::testing::FreePort();
    endpoints += (r ? "," : "") + ("tcp://" + host + ":" + std::to_string(p));
  }
  std::vector<Child> children;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> argv = {Self(), "--child-plain", endpoints};
    for (const std::string& a : ChildArgs(o, 0)) argv.push_back(a);
    if (net) argv = net->Wrap(net->Namespace(r / std::max(1, o.per_machine)), argv);
    children.push_back(geeps::testing::Spawn(argv, {{"GEEPS_RANK", std::to_string(r)}}));
  }
  std::vector<std::string> lines;
  const double t = Collect(children, "plain ZeroMQ job", &lines);
  *observed = Observe(lines);
  return t;
}

// The MPI_Allreduce baseline through mpirun; < 0 if it cannot run.
double RunAllreduce(const Options& o, int n, const NetnsCluster* net, Observed* observed) {
  std::vector<std::string> argv = {
      "/usr/bin/mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", std::to_string(n)};
  std::string hostfile;
  if (net) {
    hostfile = geeps::testing::TempFile("hosts");
    std::ofstream h(hostfile);
    const int k = std::max(1, o.per_machine);
    for (int m = 0; m * k < n; ++m)
      h << net->Namespace(m) << " slots=" << std::min(k, n - m * k) << "\n";
    for (const char* a : {"--hostfile", hostfile.c_str(), "--mca", "plm_rsh_agent"})
      argv.push_back(a);
    argv.push_back(Self() + " --rsh-agent");
    // mpi_yield_when_idle: the ranks of these "machines" share this host's
    // cores, and mpirun, seeing one slot per host, would let them spin
    // (3.5x slower at 8 ranks on 2 cores); on loopback --oversubscribe turns
    // the same yielding on.
    for (const char* a :
         {"--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "eth0", "--mca",
          "oob_tcp_if_include", "eth0", "--mca", "mpi_yield_when_idle", "1"})
      argv.push_back(a);
  } else {
    argv.push_back("--oversubscribe");
  }
  argv.push_back(o.allreduce);
  for (const std::string& a : ChildArgs(o, 0)) argv.push_back(a);
  if (net) argv = net->Wrap(net->MpiNamespace(), argv);
  std::vector<Child> children = {geeps::testing::Spawn(argv, {})};
  std::vector<std::string> lines;
  const double t = Collect(children, "allreduce baseline", &lines);
  *observed = Observe(lines);
  if (!hostfile.empty()) std::remove(hostfile.c_str());
  return t;
}

// Bytes per second of one TCP stream from machine 0 to machine 1; < 0 if
// the probe failed.
double ProbeLink(const NetnsCluster& net, double rate_bps) {
  const uint64_t bytes = std::max<uint64_t>(8u << 20, static_cast<uint64_t>(rate_bps / 8));
  std::vector<Child> children;
  children.push_back(
      geeps::testing::Spawn(net.Wrap(net.Namespace(1), {Self(), "--probe", "recv"}), {}));
  children.push_back(geeps::testing::Spawn(
      net.Wrap(net.Namespace(0),
               {Self(), "--probe", "send", "--probe-host", NetnsCluster::Address(1),
                "--probe-bytes", std::to_string(bytes)}),
      {}));
  return Collect(children, "link probe");
}

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string Num(double v) {
  if (v < 0 || !std::isfinite(v)) return "null";
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--rsh-agent") == 0)
    return geeps::bench::RunRshAgent(argc, argv);
  Options o;
  geeps::bench::Flags flags("scale_bench");
  flags
      .AddParser("--out", "FILE", "JSON results (scale_bench[_netns].json)",
                 [&o](const std::string& v) {
                   o.out = v;
                   o.out_set = true;
                   return true;
                 })
      .AddParser("--csv", "FILE", "CSV results (scale_bench[_netns].csv)",
                 [&o](const std::string& v) {
                   o.csv = v;
                   o.csv_set = true;
                   return true;
                 })
      .Add("--workers", &o.workers, "worker counts to run (1,2,4,8)")
      .Add("--slacks", &o.slacks, "slacks to run (0,1; 0 = BSP)")
      .Add("--params", &o.params, "parameters (floats) of the model")
      .Add("--tables", &o.tables, "tables the parameters are split over")
      .Add("--compute-ms", &o.compute_ms, "emulated compute per iteration")
      .Add("--iterations", &o.iterations, "timed iterations per point")
      .Add("--repeat", &o.repeat, "repetitions of the 8-worker BSP point")
      .Add("--pipeline", &o.pipeline, "Config::pipeline_part_bytes (0 = off)")
      .Add("--allreduce", &o.allreduce, "path of allreduce_bench, or none")
      .Add("--netns", &o.netns, "each process in its own network namespace, rate-limited")
      .Add("--rate", &o.rate, "the namespaces' rate (1gbit)")
      .Add("--per-machine", &o.per_machine, "netns: ranks per namespace (1)")
      .Add("--aggregate", &o.aggregate, "also run with machine-level aggregation")
      .Add("--child-aggregate", &o.child_aggregate, "internal: the child aggregates")
      .Add("--child-wire", &o.child_wire, "internal: the child reads eth0's counters")
      .Add("--plain", &o.plain, "also run a plain ZeroMQ parameter server (plain-zmq)")
      .Add("--push-in-read-order", &o.read_order,
           "Config::push_in_read_order (the system is then libgeeps-read-order)")
      .Add("--as-ready", &o.as_ready,
           "Config::adapt_push_order = false (the system is then libgeeps-as-ready)")
      .Add("--timeline-csv", &o.timeline_csv,
           "the largest points' per-iteration timelines (scale_bench[_netns]_timeline.csv)")
      .Add("--child-plain", &o.child_plain, "internal: run a plain-zmq rank (its endpoints)")
      .Add("--child", &o.child, "internal: run one worker or server")
      .Add("--slack", &o.slack, "internal: the child's slack")
      .Add("--probe", &o.probe, "internal: recv or send, a link-rate probe")
      .Add("--probe-host", &o.probe_host, "internal: the probe's peer")
      .Add("--probe-bytes", &o.probe_bytes, "internal: the probe's bytes");
  if (const int status = flags.Parse(argc, argv); status >= 0) return status;
  if (!o.probe.empty()) return geeps::bench::RunLinkProbe(o.probe, o.probe_host, o.probe_bytes);
  if (o.tables < 1 || o.iterations < 1 || o.compute_ms < 0 || o.params < 1 || o.repeat < 1)
    return flags.Fail(
        "--tables, --iterations, --params and --repeat must be >= 1, --compute-ms >= 0");
  if (o.workers.empty() || o.slacks.empty()) return flags.Fail("--workers and --slacks are lists");
  if (o.per_machine < 1 || (o.per_machine > 1 && !o.netns))
    return flags.Fail("--per-machine must be >= 1, and more than 1 only with --netns");
  if (o.child) return RunChild(o);
  if (!o.child_plain.empty()) return RunPlainChild(o);
  const double rate_bps = geeps::bench::ParseRate(o.rate);
  if (o.netns && rate_bps <= 0)
    return flags.Fail("--rate: a number and bit, kbit, mbit, gbit or tbit (e.g. 1gbit)");
  if (o.netns && !o.out_set) o.out = "scale_bench_netns.json";
  if (o.netns && !o.csv_set) o.csv = "scale_bench_netns.csv";
  if (o.timeline_csv.empty())
    o.timeline_csv = o.csv.substr(0, o.csv.rfind(".csv")) + "_timeline.csv";
  if (o.allreduce.empty()) {
    const std::string self = Self();
    o.allreduce = self.substr(0, self.rfind('/') + 1) + "allreduce_bench";
  }
  bool baseline = o.allreduce != "none" && access(o.allreduce.c_str(), X_OK) == 0 &&
                  access("/usr/bin/mpirun", X_OK) == 0;
  if (!baseline)
    std::printf("(no MPI_Allreduce baseline: %s or /usr/bin/mpirun missing)\n",
                o.allreduce.c_str());

  const int max_workers = *std::max_element(o.workers.begin(), o.workers.end());
  std::unique_ptr<NetnsCluster> net;
  double goodput = -1;  // bytes/s of one TCP stream over a limited link
  bool goodput_measured = false;
  if (o.netns) {
    std::string why;
    net = NetnsCluster::Create(std::max((max_workers + o.per_machine - 1) / o.per_machine, 2),
                               rate_bps, &why);
    if (!net) {
      std::printf("scale_bench: network-namespace variant skipped: %s\n", why.c_str());
      std::ofstream(o.out) << "{\"benchmark\":\"scale_bench\",\"network\":{\"mode\":\"netns\","
                              "\"rate\":\""
                           << o.rate << "\"},\"skipped\":\"" << why << "\",\"results\":[]}\n";
      std::remove(o.csv.c_str());
      return 0;
    }
    if (baseline && Self().find(' ') != std::string::npos) {
      std::printf("(no measured allreduce: mpirun's rsh agent cannot be a path with spaces)\n");
      baseline = false;
    }
    goodput = ProbeLink(*net, rate_bps);
    goodput_measured = goodput > 0;
    if (!goodput_measured) goodput = rate_bps / 8;
    std::printf("network namespaces: %d machines, %s each way (%s), one TCP stream %s %.1f MB/s\n",
                net->machines(), o.rate.c_str(), net->tbf().c_str(),
                goodput_measured ? "measured" : "(probe failed) nominal", goodput / 1e6);
  }

  std::ofstream json(o.out), csv(o.csv);
  const uint64_t params = RowsPerTable(o) * o.tables * kWidth;
  json << "{\"benchmark\":\"scale_bench\",\"params\":" << params << ",\"tables\":" << o.tables
       << ",\"compute_ms\":" << o.compute_ms << ",\"iterations\":" << o.iterations
       << ",\"repeat\":" << o.repeat << ",\"network\":";
  if (net) {
    json << "{\"mode\":\"netns\",\"rate\":\"" << o.rate << "\",\"rate_bits_per_s\":" << rate_bps
         << ",\"tc\":\"" << net->tbf() << " on both ends of each machine's veth\""
         << ",\"link_goodput_bytes_per_s\":" << goodput
         << ",\"link_goodput_measured\":" << (goodput_measured ? "true" : "false") << "}";
  } else {
    json << "{\"mode\":\"loopback\"}";
  }
  json << ",\"results\":[";
  csv << "system,slack,workers,seconds_per_iteration,throughput,efficiency,repetition\n";
  std::printf("%d parameters in %d tables, %.0f ms emulated compute per iteration\n",
              static_cast<int>(params), o.tables, o.compute_ms);
  std::printf("%-18s %5s %7s %6s %10s %12s %10s\n", "system", "slack", "workers", "rep", "s/iter",
              "iter/s total", "efficiency");
  bool first = true, failed = false;
  std::string repeated;   // the JSON of the repeated points
  std::string wires;      // the JSON of the wire counters
  std::string described;  // the JSON of the timelines' summaries and CPU
  std::ofstream timeline_csv(o.timeline_csv);
  timeline_csv << "system,slack,workers,rank,iteration,phase,table,start_ms,end_ms\n";
  // What a run's ranks observed: the wire, where the iteration went, CPU.
  auto describe = [&](const std::string& system, int slack, int n, double seconds,
                      const Observed& ob) {
    if (ob.wire.tx >= 0) {
      std::printf("%-18s %5d %7d   wire per machine per iteration: sent %.0f B, received %.0f B\n",
                  system.c_str(), slack, n, ob.wire.tx, ob.wire.rx);
      std::ostringstream j;
      j << (wires.empty() ? "" : ",") << "{\"system\":\"" << system << "\",\"slack\":" << slack
        << ",\"workers\":" << n << ",\"per_machine\":" << o.per_machine
        << ",\"tx_bytes_per_iteration_per_machine\":" << ob.wire.tx
        << ",\"rx_bytes_per_iteration_per_machine\":" << ob.wire.rx << "}";
      wires += j.str();
    }
    const auto sum = geeps::bench::Summarize(ob.timelines, o.tables);
    const double link_busy = ob.wire.tx >= 0 && seconds > 0 && goodput > 0
                                 ? std::max(ob.wire.tx, ob.wire.rx) / goodput / seconds
                                 : -1;
    if (sum.samples > 0)
      std::printf("%-18s %5d %7d   iteration %s\n", system.c_str(), slack, n, sum.Text().c_str());
    std::printf(
        "%-18s %5d %7d   CPU %.3f core-s per iteration (user %.3f, sys %.3f) over %d "
        "processes; machine busy %.0f%% of %u cores; link busy %.0f%%\n",
        system.c_str(), slack, n, ob.cpu_user + ob.cpu_sys, ob.cpu_user, ob.cpu_sys, n,
        100 * ob.machine_busy, std::thread::hardware_concurrency(), 100 * link_busy);
    if (ob.phase_busy[0] >= 0)
      std::printf(
          "%-18s %5d %7d   machine busy while rank 0 waits for table 0 %.0f%%, in the "
          "rest of its forward pass %.0f%%, in its backward pass %.0f%%\n",
          system.c_str(), slack, n, 100 * ob.phase_busy[0], 100 * ob.phase_busy[1],
          100 * ob.phase_busy[2]);
    std::ostringstream j;
    j << (described.empty() ? "" : ",") << "{\"system\":\"" << system << "\",\"slack\":" << slack
      << ",\"workers\":" << n << ",\"iteration_ms\":" << sum.iteration
      << ",\"compute_ms\":" << sum.compute << ",\"read_wait_ms\":" << sum.read_wait
      << ",\"update_ms\":" << sum.update << ",\"clock_ms\":" << sum.clock
      << ",\"read_wait_ms_by_table\":[";
    for (size_t t = 0; t < sum.read_wait_by_table.size(); ++t)
      j << (t ? "," : "") << sum.read_wait_by_table[t];
    j << "],\"cpu_user_core_seconds_per_iteration\":" << ob.cpu_user
      << ",\"cpu_sys_core_seconds_per_iteration\":" << ob.cpu_sys
      << ",\"machine_busy_fraction\":" << Num(ob.machine_busy)
      << ",\"link_busy_fraction\":" << Num(link_busy) << ",\"machine_busy_by_part\":{"
      << "\"waiting_for_the_first_table\":" << Num(ob.phase_busy[0])
      << ",\"rest_of_forward\":" << Num(ob.phase_busy[1])
      << ",\"backward\":" << Num(ob.phase_busy[2]) << "}}";
    described += j.str();
    if (n != max_workers) return;
    for (const auto& r : ob.timelines)
      for (const auto& x : r.spans)
        timeline_csv << system << "," << slack << "," << n << "," << r.rank << "," << r.iteration
                     << "," << x.phase << "," << x.table << "," << x.start_ms << "," << x.end_ms
                     << "\n";
  };
  auto efficiency = [](int n, double t, double base) {
    return base > 0 && t > 0 ? (n / t) / (n * (1.0 / base)) : -1.0;
  };
  auto report = [&](const std::string& system, int slack, int n, double t, double base,
                    const std::string& rep) {
    const double thr = n / t, eff = efficiency(n, t, base);
    std::printf("%-18s %5d %7d %6s %10.4f %12.2f %10s\n", system.c_str(), slack, n, rep.c_str(), t,
                thr, eff < 0 ? "n/a" : std::to_string(eff).substr(0, 5).c_str());
    std::fflush(stdout);
    if (rep != "median") {
      json << (first ? "" : ",") << "{\"system\":\"" << system << "\",\"slack\":" << slack
           << ",\"workers\":" << n << ",\"repetition\":" << rep
           << ",\"seconds_per_iteration\":" << t << ",\"throughput\":" << thr
           << ",\"efficiency\":" << Num(eff) << "}";
      first = false;
    }
    csv << system << "," << slack << "," << n << "," << t << "," << thr << ","
        << (eff < 0 ? "" : Num(eff)) << "," << rep << "\n";
  };
  // One point (R times where it is the repeated one): seconds per iteration
  // of each successful repetition; the median reported after them.
  // The 1-worker point sets *base (its first successful repetition).
  auto point = [&](const std::string& system, int slack, int n, int reps, double* base_io,
                   const std::function<double()>& run) {
    std::vector<double> times;
    for (int k = 1; k <= reps; ++k) {
      const double t = run();
      if (t <= 0) continue;
      times.push_back(t);
      if (n == 1 && *base_io < 0) *base_io = t;
      const double base = *base_io;
      report(system, slack, n, t, base, std::to_string(k));
    }
    const double base = *base_io;
    if (reps > 1 && !times.empty()) {
      const double med = Median(times);
      report(system, slack, n, med, base, "median");
      std::ostringstream r;
      r << (repeated.empty() ? "" : ",") << "{\"system\":\"" << system << "\",\"slack\":" << slack
        << ",\"workers\":" << n << ",\"repetitions\":" << reps << ",\"successful\":" << times.size()
        << ",\"seconds_per_iteration\":[";
      for (size_t k = 0; k < times.size(); ++k) r << (k ? "," : "") << times[k];
      r << "],\"efficiency\":[";
      for (size_t k = 0; k < times.size(); ++k)
        r << (k ? "," : "") << Num(efficiency(n, times[k], base));
      r << "],\"base_seconds_per_iteration\":" << Num(base)
        << ",\"median_seconds_per_iteration\":" << med
        << ",\"median_efficiency\":" << Num(efficiency(n, med, base)) << "}";
      repeated += r.str();
    }
    return times.empty() ? -1.0 : times.front();
  };
  const int repeat_slack =
      std::find(o.slacks.begin(), o.slacks.end(), 0) != o.slacks.end() ? 0 : o.slacks.front();
  for (const bool aggregate : {false, true}) {
    if (aggregate && !o.aggregate) continue;
    const std::string system =
        std::string(aggregate ? "libgeeps-aggregated" : "libgeeps") + (o.read_order ? "-read-order"
                                                                       : o.as_ready ? "-as-ready"
                                                                                    : "");
    for (int slack : o.slacks) {
      double base = -1;
      for (int n : o.workers) {
        const int reps = n == max_workers && slack == repeat_slack ? o.repeat : 1;
        const double t = point(system, slack, n, reps, &base, [&] {
          Observed ob;
          const double s = RunGeeps(o, n, slack, net.get(), aggregate, &ob);
          if (s > 0) describe(system, slack, n, s, ob);
          return s;
        });
        if (t <= 0) failed = true;
      }
    }
  }
  // A baseline's point at n workers (BSP; repeated at the largest count).
  auto baseline_point = [&](const std::string& system, int n, double* base,
                            const std::function<double(Observed*)>& run) {
    return point(system, 0, n, n == max_workers ? o.repeat : 1, base, [&] {
      Observed ob;
      const double s = run(&ob);
      if (s > 0) describe(system, 0, n, s, ob);
      return s;
    });
  };
  if (o.plain) {
    double base = -1;
    for (int n : o.workers) {
      const double t = baseline_point("plain-zmq", n, &base,
                                      [&](Observed* ob) { return RunPlain(o, n, net.get(), ob); });
      if (t <= 0) failed = true;
    }
  }
  if (baseline) {
    double base = -1;
    for (int n : o.workers) {
      const double t = baseline_point(
          "allreduce", n, &base, [&](Observed* ob) { return RunAllreduce(o, n, net.get(), ob); });
      if (t <= 0) {
        if (net) {
          // Not a failure of libgeeps: the computed baseline stands in.
          std::printf("(mpirun across namespaces failed; the computed baseline remains)\n");
          break;
        }
        failed = true;
      }
    }
  }
  if (net) {
    // A ring allreduce sends and receives 2(N-1)/N of the model per rank;
    // no overhead, no overlap with compute (as allreduce_bench).
    const double bytes = static_cast<double>(params) * sizeof(float);
    const double base = o.compute_ms / 1000;
    for (int n : o.workers) {
      const double t = base + 2.0 * (n - 1) / n * bytes / goodput;
      report("allreduce-computed", 0, n, t, base, "1");
    }
    // The least BSP time of a parameter server that sends a table's update
    // when its backward step ends and pushes it back when every worker's
    // has arrived: the table updated last (layer 0) is read first, so its
    // update ((N-1)/N of the table leaves each machine) and then its push
    // ((N-1)/N again) cannot overlap compute, even with every other
    // transfer hidden.
    // With --per-machine K the N workers are on M = ceil(N / K) machines,
    // and the bound is that of one update and push per machine (what
    // machine-level aggregation sends); without it, every worker's.
    for (int n : o.workers) {
      const int m = (n + o.per_machine - 1) / o.per_machine;
      const double t = base + 2.0 * (m - 1) / m * bytes / o.tables / goodput;
      report("bsp-bound-computed", 0, n, t, base, "1");
    }
  }
  json << "],\"repeated\":[" << repeated << "],\"wire\":[" << wires << "],\"observed\":["
       << described << "]}\n";
  return failed ? 1 : 0;
}
