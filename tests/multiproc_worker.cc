// One process of the multi-process tests: joins the job from its
// environment (GEEPS_*, OMPI_*, SLURM_*) and runs the exact-sum workload.
//   multiproc_worker [--iterations N] [--slack S] [--channels C]
//                    [--delay-ms D] [--slow-rank W] [--kill-rank R --kill-at I]
//                    [--train 1] [--result-dir DIR]
// --delay-ms sleeps before every clock: on every worker, or with
// --slow-rank W >= 0 on worker W only. --result-dir writes this process's
// result to DIR/rank-<rank> in test_cluster.h's format (what the tests
// read); the log lines below are for people.
// --train 1 runs the deterministic-BSP workload of checkpoint_workload.h
// instead (checkpoints and resume from GEEPS_CHECKPOINT_*, GEEPS_RESUME) and
// prints "resumed at clock K" and "params <hex bits of every row>".
// --embedded N runs the exact-sum workload on an EmbeddedCluster of N
// workers in this process instead (no job to join; GEEPS_TIMEOUT_MS and the
// other config variables apply) and prints "embedded: N workers, K
// iterations exact".
// Exit codes: 0 success, 1 error, 3 kUnavailable (a lost peer).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "checkpoint_workload.h"
#include "exact_sum.h"
#include "geeps/embedded_cluster.h"
#include "geeps/process.h"
#include "test_cluster.h"

namespace {

int Fail(int rank, const geeps::Status& st) {
  std::fprintf(stderr, "multiproc_worker rank %d: %s\n", rank, st.ToString().c_str());
  return st.code() == geeps::StatusCode::kUnavailable ? 3 : 1;
}

// Writes this process's result (test_cluster.h) when --result-dir is given.
void Report(const std::string& dir, geeps::Process& p, const geeps::Status& st) {
  if (dir.empty()) return;
  geeps::testing::ProcessReport r;
  r.rank = p.rank();
  r.status = st;
  if (geeps::GeePS* ps = p.worker()) {
    const geeps::WorkerStats ws = ps->GetStats();
    r.worker = ps->rank();
    r.iterations = ws.iterations;
    r.pushes_installed = ws.pushes_installed;
    r.device = static_cast<int>(ps->device_kind());
  }
  const geeps::ShardStats ss = p.GetShardStats();
  r.shard = ss.shard;
  r.frames_dropped = ss.frames_dropped;
  r.early_push_parts = ss.early_push_parts;
  r.pushes_deferred = ss.pushes_deferred;
  r.updates_applied = ss.updates_applied;
  if (!geeps::testing::WriteProcessReport(dir, r))
    std::fprintf(stderr, "multiproc_worker rank %d: cannot write %s\n", r.rank,
                 geeps::testing::ResultFileName(dir, r.rank).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 8, slack = 0, channels = 2, delay_ms = 0, slow_rank = -1, kill_rank = -1,
      kill_at = -1, train = 0, embedded = 0;
  std::string result_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--result-dir")
      result_dir = argv[i + 1];
    else if (flag == "--slow-rank")
      slow_rank = value;
    else if (flag == "--iterations")
      iterations = value;
    else if (flag == "--slack")
      slack = value;
    else if (flag == "--channels")
      channels = value;
    else if (flag == "--delay-ms")
      delay_ms = value;
    else if (flag == "--kill-rank")
      kill_rank = value;
    else if (flag == "--kill-at")
      kill_at = value;
    else if (flag == "--train")
      train = value;
    else if (flag == "--embedded")
      embedded = value;
    else {
      std::fprintf(stderr, "multiproc_worker: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (embedded > 0) {
    geeps::Config c = geeps::testing::MakeConfig({embedded, 1, channels});
    geeps::Status st = geeps::ApplyEnvironment(&c);
    if (!st.ok()) return Fail(-1, st);
    auto cluster = geeps::EmbeddedCluster::Start(c);
    if (!cluster.ok()) return Fail(-1, cluster.status());
    st = (*cluster)->RunWorkers([&](geeps::GeePS& ps) {
      const bool slow = slow_rank < 0 || ps.rank() == slow_rank;
      return geeps::testing::RunWorker(ps, c, slack, iterations,
                                       std::chrono::milliseconds(slow ? delay_ms : 0));
    });
    if (st.ok()) st = (*cluster)->Shutdown();
    if (!st.ok()) return Fail(-1, st);
    std::printf("embedded: %d workers, %d iterations exact\n", embedded, iterations);
    return 0;
  }
  geeps::Config config = train ? geeps::testing::TrainConfig(1, 1, channels)
                               : geeps::testing::MakeConfig({1, 1, channels});
  geeps::ProcessOptions options;
  geeps::Status st = geeps::ApplyEnvironment(&config);
  if (st.ok()) st = geeps::ApplyEnvironment(&options);
  if (!st.ok()) return Fail(-1, st);
  auto process = geeps::Process::Join(config, options);
  if (!process.ok()) return Fail(-1, process.status());
  geeps::Process& p = **process;
  const int rank = p.rank();
  if (geeps::GeePS* ps = p.worker(); ps && train) {
    geeps::testing::TrainOptions o;
    o.total = iterations;
    o.before_clock = [&](geeps::GeePS&, int64_t) {
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    };
    std::vector<float> params;
    std::printf("rank %d: resumed at clock %lld\n", rank, (long long)ps->resumed_clock());
    std::fflush(stdout);
    st = geeps::testing::Train(*ps, p.config(), o, &params);
    if (!st.ok()) {
      p.Shutdown().ok();
      return Fail(rank, st);
    }
    std::printf("rank %d: worker %d of %d: %d iterations done\nparams %s\n", rank, ps->rank(),
                p.config().num_workers, iterations, geeps::testing::HexBits(params).c_str());
  } else if (geeps::GeePS* ps = p.worker()) {
    const bool slow = slow_rank < 0 || ps->rank() == slow_rank;
    st = geeps::testing::RunWorker(*ps, p.config(), slack, iterations,
                                   std::chrono::milliseconds(slow ? delay_ms : 0), [&](int64_t i) {
                                     if (rank == kill_rank && i == kill_at) std::raise(SIGKILL);
                                   });
    if (!st.ok()) {
      p.Shutdown().ok();
      Report(result_dir, p, st);
      return Fail(rank, st);
    }
    std::printf("rank %d: worker %d of %d: %d iterations exact\n", rank, ps->rank(),
                p.config().num_workers, iterations);
    std::printf("rank %d worker_stats: %s\n", rank, ps->GetStats().ToJson().c_str());
  }
  std::printf("rank %d shard_stats: %s\n", rank, p.GetShardStats().ToJson().c_str());
  std::printf("rank %d rejected_connections: %lld\n", rank, (long long)p.rejected_connections());
  std::fflush(stdout);
  st = p.Shutdown();
  Report(result_dir, p, st);
  if (!st.ok()) return Fail(rank, st);
  return 0;
}
