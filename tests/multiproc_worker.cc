// One process of the multi-process tests: joins the job from its
// environment (GEEPS_*, OMPI_*, SLURM_*) and runs the exact-sum workload.
//   multiproc_worker [--iterations N] [--slack S] [--channels C]
//                    [--delay-ms D] [--kill-rank R --kill-at I] [--train 1]
// --train 1 runs the deterministic-BSP workload of checkpoint_workload.h
// instead (checkpoints and resume from GEEPS_CHECKPOINT_*, GEEPS_RESUME) and
// prints "resumed at clock K" and "params <hex bits of every row>".
// Exit codes: 0 success, 1 error, 3 kUnavailable (a lost peer).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "checkpoint_workload.h"
#include "exact_sum.h"
#include "geeps/process.h"

namespace {

int Fail(int rank, const geeps::Status& st) {
  std::fprintf(stderr, "multiproc_worker rank %d: %s\n", rank, st.ToString().c_str());
  return st.code() == geeps::StatusCode::kUnavailable ? 3 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 8, slack = 0, channels = 2, delay_ms = 0, kill_rank = -1, kill_at = -1,
      train = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--iterations")
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
    else {
      std::fprintf(stderr, "multiproc_worker: unknown flag %s\n", flag.c_str());
      return 2;
    }
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
    st = geeps::testing::RunWorker(*ps, p.config(), slack, iterations,
                                   std::chrono::milliseconds(delay_ms), [&](int64_t i) {
                                     if (rank == kill_rank && i == kill_at) std::raise(SIGKILL);
                                   });
    if (!st.ok()) {
      p.Shutdown().ok();
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
  if (!st.ok()) return Fail(rank, st);
  return 0;
}
