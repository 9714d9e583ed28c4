// One test cluster (issue 17, item 4): the interface through which the
// exact-sum, SSP-bound, async and failure suites run, whichever way the
// workers are wired.
//
//   TestCluster            Run(workload) -> ClusterResult: every worker's
//                          Status and counters, every shard's counters,
//                          the Shutdown status, and logs for diagnostics.
//   ThreadCluster          an EmbeddedCluster in this process: inproc://
//                          (EmbeddedCluster has no other transport).
//   ProcessCluster         one multiproc_worker child process per rank,
//                          every one a worker and a shard, over ipc:// or
//                          tcp://; each child writes its result to a file
//                          of its own in a defined line format (below),
//                          which is what the tests read: no log scraping.
//
// A cluster is made per test from a Backend (MakeCluster), so a suite is
// parameterised over {inproc, ipc, tcp}. Killing a rank is a process
// cluster's case only (a thread of an EmbeddedCluster cannot be killed).
#ifndef GEEPS_TESTS_TEST_CLUSTER_H_
#define GEEPS_TESTS_TEST_CLUSTER_H_

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "exact_sum.h"
#include "geeps/embedded_cluster.h"
#include "geeps/geeps.h"
#include "process_util.h"
#include "temp_dirs.h"
#include "test_util.h"

namespace geeps::testing {

// What every worker runs: the exact-sum workload of exact_sum.h.
struct Workload {
  Shape shape = {2, 2, 1};  // ProcessCluster: one shard per worker process
  DeviceKind device = DeviceKind::kHost;
  int slack = 0;  // 0: BSP; kUnboundedSlack: async
  int iterations = 6;
  int slow_rank = -1;  // this worker sleeps delay_ms before every clock
  int delay_ms = 0;
  int max_message_bytes = 0;    // 0: the config's default
  int pipeline_part_bytes = 0;  // 0: the config's default
  bool push_in_read_order = false;
  bool adapt_push_order = true;  // Config::adapt_push_order (its default)
  // ProcessCluster only: rank kill_rank SIGKILLs itself before clock
  // kill_at; heartbeat_timeout_ms (0: 2000 ms, times SanitizerSlowdown()
  // in a sanitizer build) bounds how long the others take to notice.
  int kill_rank = -1, kill_at = -1;
  int heartbeat_timeout_ms = 0;
};

struct WorkerResult {
  int rank = -1;
  // Whether the worker reported at all (a killed process does not).
  bool reported = false;
  Status status;  // what RunWorker returned, then the Shutdown's error if any
  int exit = 0;   // ProcessCluster: exit code, 128+signal, -2 killed at the deadline
  int64_t iterations = 0;
  int64_t pushes_installed = 0;
  int device = -1;  // static_cast<int>(DeviceKind) of the worker
};

struct ShardResult {
  int shard = -1;
  int64_t frames_dropped = 0;
  int64_t early_push_parts = 0;
  int64_t updates_applied = 0;
  int64_t pushes_deferred = 0;
};

struct ClusterResult {
  std::vector<WorkerResult> workers;  // by rank
  std::vector<ShardResult> shards;    // by shard index
  // ProcessCluster over ipc: files left in the job's ipc folder afterwards.
  std::vector<std::string> ipc_leftovers;
  std::string logs;  // for failure messages only
};

class TestCluster {
 public:
  virtual ~TestCluster() = default;
  // Starts a cluster for `w`, runs the workload on every worker, shuts
  // down and reports. Never hangs: a process cluster kills what is left at
  // its deadline (exit -2).
  virtual ClusterResult Run(const Workload& w) = 0;
};

// ---------------------------------------------------------------------------
// The result file a ProcessCluster child writes (multiproc_worker
// --result-dir DIR writes DIR/rank-<R>), one "key value" per line, last
// "end" (a file without it is an unfinished report):
//   rank R
//   worker W            (-1: the process has no worker)
//   status CODE MESSAGE (CODE: StatusCode as an integer; MESSAGE to the end
//                        of the line, newlines as spaces)
//   iterations N
//   pushes_installed N
//   device D
//   shard S             (-1: the process has no shard)
//   frames_dropped N
//   early_push_parts N
//   updates_applied N
//   pushes_deferred N
//   end
struct ProcessReport {
  bool complete = false;
  int rank = -1, worker = -1, shard = -1, device = -1;
  Status status;
  int64_t iterations = 0, pushes_installed = 0, frames_dropped = 0, early_push_parts = 0,
          updates_applied = 0, pushes_deferred = 0;
};

inline std::string ResultFileName(const std::string& dir, int rank) {
  return dir + "/rank-" + std::to_string(rank);
}

// Writes `r` to DIR/rank-<rank>, through a temporary name, so that a reader
// sees the whole report or none.
inline bool WriteProcessReport(const std::string& dir, const ProcessReport& r) {
  const std::string path = ResultFileName(dir, r.rank);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    std::string message = r.status.message();
    for (char& ch : message)
      if (ch == '\n' || ch == '\r') ch = ' ';
    out << "rank " << r.rank << "\nworker " << r.worker << "\nstatus "
        << static_cast<int>(r.status.code()) << " " << message << "\niterations " << r.iterations
        << "\npushes_installed " << r.pushes_installed << "\ndevice " << r.device << "\nshard "
        << r.shard << "\nframes_dropped " << r.frames_dropped << "\nearly_push_parts "
        << r.early_push_parts << "\nupdates_applied " << r.updates_applied << "\npushes_deferred "
        << r.pushes_deferred << "\nend\n";
    if (!out.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// Reads DIR/rank-<rank>; complete is false when it is missing or cut short.
inline ProcessReport ReadProcessReport(const std::string& dir, int rank) {
  ProcessReport r;
  std::istringstream in(ReadFile(ResultFileName(dir, rank)));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string key;
    l >> key;
    if (key == "end") {
      r.complete = true;
      break;
    }
    if (key == "status") {
      int code = 0;
      l >> code;
      std::string message;
      std::getline(l, message);
      if (!message.empty() && message[0] == ' ') message.erase(0, 1);
      r.status = code == 0 ? Status::OK() : Status(static_cast<StatusCode>(code), message);
      continue;
    }
    int64_t v = 0;
    l >> v;
    if (key == "rank") r.rank = static_cast<int>(v);
    if (key == "worker") r.worker = static_cast<int>(v);
    if (key == "shard") r.shard = static_cast<int>(v);
    if (key == "device") r.device = static_cast<int>(v);
    if (key == "iterations") r.iterations = v;
    if (key == "pushes_installed") r.pushes_installed = v;
    if (key == "frames_dropped") r.frames_dropped = v;
    if (key == "early_push_parts") r.early_push_parts = v;
    if (key == "updates_applied") r.updates_applied = v;
    if (key == "pushes_deferred") r.pushes_deferred = v;
  }
  return r;
}

// The names in `dir` (not "." or "..").
inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

// Removes `dir` and the files in it.
inline void RemoveDir(const std::string& dir) {
  for (const std::string& f : ListDir(dir)) unlink((dir + "/" + f).c_str());
  rmdir(dir.c_str());
}

// ---------------------------------------------------------------------------

class ThreadCluster : public TestCluster {
 public:
  ClusterResult Run(const Workload& w) override {
    ClusterResult out;
    Config c = MakeConfig(w.shape);
    c.device = w.device;
    if (w.max_message_bytes > 0) c.max_message_bytes = w.max_message_bytes;
    if (w.pipeline_part_bytes > 0) c.pipeline_part_bytes = w.pipeline_part_bytes;
    c.push_in_read_order = w.push_in_read_order;
    c.adapt_push_order = w.adapt_push_order;
    out.workers.resize(c.num_workers);
    auto cluster = EmbeddedCluster::Start(c);
    if (!cluster.ok()) {
      for (int r = 0; r < c.num_workers; ++r) {
        out.workers[r].rank = r;
        out.workers[r].reported = true;
        out.workers[r].status = cluster.status();
      }
      return out;
    }
    EmbeddedCluster& ec = **cluster;
    // RunWorkers returns the first error only; each worker's own goes here.
    std::vector<Status> each(c.num_workers);
    (void)ec.RunWorkers([&](GeePS& ps) {
      const auto delay = std::chrono::milliseconds(ps.rank() == w.slow_rank ? w.delay_ms : 0);
      each[ps.rank()] = RunWorker(ps, c, w.slack, w.iterations, delay);
      return each[ps.rank()];
    });
    for (int r = 0; r < c.num_workers; ++r) {
      WorkerResult& wr = out.workers[r];
      wr.rank = r;
      wr.reported = true;
      wr.status = each[r];
      const WorkerStats ws = ec.worker(r)->GetStats();
      wr.iterations = ws.iterations;
      wr.pushes_installed = ws.pushes_installed;
      wr.device = static_cast<int>(ec.worker(r)->device_kind());
    }
    for (int s = 0; s < c.num_shards; ++s) {
      const ShardStats st = ec.GetShardStats(s);
      out.shards.push_back(
          {s, st.frames_dropped, st.early_push_parts, st.updates_applied, st.pushes_deferred});
    }
    const Status down = ec.Shutdown();
    if (!down.ok())
      for (WorkerResult& wr : out.workers)
        if (wr.status.ok()) wr.status = down;
    return out;
  }
};

class ProcessCluster : public TestCluster {
 public:
  // `worker_binary`: multiproc_worker; `transport`: "ipc" or "tcp".
  ProcessCluster(std::string worker_binary, std::string transport)
      : binary_(std::move(worker_binary)), transport_(std::move(transport)) {}

  ClusterResult Run(const Workload& w) override {
    ClusterResult out;
    const int n = w.shape.workers;
    const std::string results = TempDir("results");
    // Machine-level aggregation: the relays' ipc:// files go there too.
    const bool aggregate = w.shape.per_machine > 0;
    const std::string ipc_dir = transport_ == "ipc" || aggregate ? TempDir("ipc") : "";
    const int port = FreePort();
    std::vector<Child> children;
    for (int r = 0; r < n; ++r) {
      Env env = {{"GEEPS_COORDINATOR", "127.0.0.1:" + std::to_string(port)},
                 {"GEEPS_TIMEOUT_MS", "20000"},
                 {"GEEPS_HEARTBEAT_TIMEOUT_MS",
                  std::to_string(w.heartbeat_timeout_ms > 0
                                     ? w.heartbeat_timeout_ms
                                     : 2000 * ::geeps::testing::SanitizerSlowdown())},
                 {"GEEPS_RANK", std::to_string(r)},
                 {"GEEPS_WORLD_SIZE", std::to_string(n)},
                 {"GEEPS_TRANSPORT", transport_}};
      // The workload's device, not the suite's GEEPS_DEVICE (which Spawn
      // would pass on).
      env["GEEPS_DEVICE"] = w.device == DeviceKind::kCuda   ? "cuda"
                            : w.device == DeviceKind::kAuto ? "auto"
                                                            : "host";
      if (!ipc_dir.empty()) env["GEEPS_IPC_DIR"] = ipc_dir;
      if (aggregate) {
        env["GEEPS_AGGREGATE_PER_MACHINE"] = "1";
        env["GEEPS_MACHINE"] = "m" + std::to_string(r / w.shape.per_machine);
      }
      if (w.max_message_bytes > 0)
        env["GEEPS_MAX_MESSAGE_BYTES"] = std::to_string(w.max_message_bytes);
      if (w.pipeline_part_bytes > 0)
        env["GEEPS_PIPELINE_PART_BYTES"] = std::to_string(w.pipeline_part_bytes);
      if (w.push_in_read_order) env["GEEPS_PUSH_IN_READ_ORDER"] = "1";
      env["GEEPS_ADAPT_PUSH_ORDER"] = w.adapt_push_order ? "1" : "0";
      std::vector<std::string> argv = {binary_,
                                       "--result-dir",
                                       results,
                                       "--iterations",
                                       std::to_string(w.iterations),
                                       "--slack",
                                       std::to_string(w.slack),
                                       "--channels",
                                       std::to_string(w.shape.channels),
                                       "--delay-ms",
                                       std::to_string(w.delay_ms),
                                       "--slow-rank",
                                       std::to_string(w.slow_rank)};
      if (w.kill_rank >= 0) {
        argv.insert(argv.end(), {"--kill-rank", std::to_string(w.kill_rank), "--kill-at",
                                 std::to_string(w.kill_at)});
      }
      children.push_back(Spawn(argv, env));
    }
    WaitAll(children, std::chrono::milliseconds(60000));
    out.logs = Logs(children);
    for (int r = 0; r < n; ++r) {
      const ProcessReport rep = ReadProcessReport(results, r);
      WorkerResult wr;
      wr.rank = r;
      wr.exit = children[r].status;
      wr.reported = rep.complete;
      if (rep.complete) {
        wr.status = rep.status;
        wr.iterations = rep.iterations;
        wr.pushes_installed = rep.pushes_installed;
        wr.device = rep.device;
        out.shards.push_back({rep.shard, rep.frames_dropped, rep.early_push_parts,
                              rep.updates_applied, rep.pushes_deferred});
      } else {
        wr.status = Status(StatusCode::kUnavailable, "process " + std::to_string(r) +
                                                         " reported nothing (exit " +
                                                         std::to_string(children[r].status) + ")");
      }
      out.workers.push_back(wr);
    }
    // The child logs stay, as every process test's do (sanitize.sh reads them).
    RemoveDir(results);
    if (!ipc_dir.empty()) {
      out.ipc_leftovers = ListDir(ipc_dir);
      RemoveDir(ipc_dir);
    }
    return out;
  }

 private:
  std::string binary_, transport_;
};

// ---------------------------------------------------------------------------
// A suite's parameter: which cluster, over which transport, on which device.

enum class ClusterKind { kThreads, kProcesses };

struct Backend {
  ClusterKind kind;
  const char* transport;  // "inproc" (threads), "ipc" or "tcp" (processes)
  DeviceKind device = DeviceKind::kHost;
};

inline void PrintTo(const Backend& b, std::ostream* os) {
  *os << (b.kind == ClusterKind::kThreads ? "threads/" : "processes/") << b.transport
      << (b.device == DeviceKind::kCuda ? "/cuda" : "/host");
}

// `worker_binary`: the multiproc_worker a ProcessCluster starts.
inline std::unique_ptr<TestCluster> MakeCluster(const Backend& b,
                                                const std::string& worker_binary) {
  if (b.kind == ClusterKind::kThreads) return std::make_unique<ThreadCluster>();
  return std::make_unique<ProcessCluster>(worker_binary, b.transport);
}

// Every worker's status, and every process's log on failure.
inline std::string Describe(const ClusterResult& r) {
  std::string s;
  for (const WorkerResult& w : r.workers)
    s += "worker " + std::to_string(w.rank) + " (exit " + std::to_string(w.exit) +
         "): " + w.status.ToString() + "\n";
  return s + r.logs;
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_TEST_CLUSTER_H_
