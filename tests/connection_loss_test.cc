// A TCP connection between a worker and a server partition that is reset
// mid-job (`ss -K`, as a middlebox or a NIC reset would) loses nothing: the
// worker sees the loss (WorkerStats::connection_losses), sends again what
// no push has acknowledged, and asks the partition for the last push it
// missed (docs/architecture.md, "Connection loss and resend"). Twenty
// resets of a 3-process job end with exact sums, under BSP and SSP. With
// Config::resend_after_connection_loss off, a lost update or push makes
// the job fail; then the Read that times out names the lost connection.
//
// Needs `ss -K` (iproute2, root, a kernel with socket destroy): skipped with
// the reason otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "geeps/process.h"
#include "process_util.h"
#include "test_cluster.h"
#include "test_util.h"

namespace geeps {
namespace {

constexpr uint64_t kRows = 16;
constexpr uint32_t kWidth = 8;

// Kills every TCP socket on loopback whose destination port is `port` (the
// workers' connections to one shard); the command's exit status.
int KillConnections(int port) {
  const std::string cmd =
      "ss -K dst 127.0.0.1 dport = :" + std::to_string(port) + " >/dev/null 2>&1";
  return std::system(cmd.c_str());
}

// Whether `ss -K` can be used here: ss is installed and we are root. (Whether
// the kernel then destroys the sockets shows in the test's loss counts.)
bool CanKillSockets(std::string* why) {
  if (std::system("command -v ss >/dev/null 2>&1") != 0) {
    *why = "ss (iproute2) is not installed";
    return false;
  }
  if (geteuid() != 0) {
    *why = "ss -K needs root (CAP_NET_ADMIN)";
    return false;
  }
  return true;
}

struct Job {
  int world = 3;
  int clocks = 300;
  int slack = 0;
  bool resend = true;
  // > 0: machine-level aggregation, machines of this many ranks (their
  // relays then hold the connections to the shards).
  int per_machine = 0;
  std::string ipc_dir = "/tmp";
};

struct RankResult {
  Status status;
  WorkerStats stats;
  ShardStats shard;  // this rank's shard
  float last = -1;   // the last value read
};

// One rank: every worker adds 1 to every row per clock; a read at clock i
// sees world * i under BSP, at least world * (i - slack) under SSP.
RankResult RunRank(const Job& job, int rank, int port, std::atomic<int>* clock_seen) {
  RankResult out;
  Config c;
  c.tables = {{"t", kRows, kWidth}};
  c.timeout = std::chrono::milliseconds(4000);
  c.heartbeat_timeout = std::chrono::milliseconds(4000);
  c.resend_after_connection_loss = job.resend;
  c.aggregate_per_machine = job.per_machine > 0;
  ProcessOptions po;
  if (job.per_machine > 0) po.machine = "m" + std::to_string(rank / job.per_machine);
  po.ipc_dir = job.ipc_dir;
  po.rank = rank;
  po.world_size = job.world;
  po.coordinator = "127.0.0.1:" + std::to_string(port);
  po.base_port = port + 1;  // rank r's shard at port + 1 + r
  auto p = Process::Join(c, po);
  if (!p.ok()) {
    out.status = p.status();
    return out;
  }
  GeePS& ps = *(*p)->worker();
  out.status = [&]() -> Status {
    GEEPS_ASSIGN_OR_RETURN(ReadHandle read, ps.VirtualRead(0, RowRange(0, kRows), job.slack));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(read));
    GEEPS_ASSIGN_OR_RETURN(UpdateHandle update, ps.VirtualPreUpdate(0, RowRange(0, kRows)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(update));
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    const std::vector<float> ones(kRows * kWidth, 1.0f);
    std::vector<float> seen(kRows * kWidth);
    const auto world = static_cast<float>(job.world);
    for (int i = 0; i < job.clocks; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(read));
      GEEPS_RETURN_IF_ERROR(ps.CopyToHost(seen.data(), w, seen.size()));
      out.last = seen[0];
      const float lo = world * static_cast<float>(std::max(0, i - job.slack));
      const float hi = world * static_cast<float>(i);
      for (float v : seen) {
        // Under BSP every partition's rows are of the same clock.
        if (v < lo || v > hi || (job.slack == 0 && v != seen[0]))
          return InternalError("clock " + std::to_string(i) + ": read " + std::to_string(v) +
                               ", expected " + std::to_string(lo) + " .. " + std::to_string(hi) +
                               " in every row");
      }
      GEEPS_RETURN_IF_ERROR(ps.PostRead(read));
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(update));
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, ones.data(), ones.size()));
      GEEPS_RETURN_IF_ERROR(ps.Update(update));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
      if (rank == 0) clock_seen->store(i + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Status::OK();
  }();
  out.stats = ps.GetStats();
  out.shard = (*p)->GetShardStats();
  (*p)->Shutdown().ok();  // the run's own status is what the test checks
  return out;
}

// Runs `job` and resets, every `every` clocks of rank 0 from clock `every`
// on, all connections to one shard (the shards in turn), `resets` times.
std::vector<RankResult> RunWithResets(const Job& job, int resets, int every) {
  const int port = testing::FreePortRange(job.world + 1);
  std::atomic<int> clock_seen{0};
  std::vector<std::future<RankResult>> ranks;
  for (int r = job.world - 1; r >= 0; --r)
    ranks.push_back(
        std::async(std::launch::async, [&, r] { return RunRank(job, r, port, &clock_seen); }));
  int done = 0;
  for (int k = 1; k <= resets; ++k) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (clock_seen.load() < k * every && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (clock_seen.load() < k * every) break;  // the job stopped: the ranks say why
    EXPECT_EQ(KillConnections(port + 1 + (k - 1) % job.world), 0) << "ss -K failed";
    ++done;
  }
  EXPECT_EQ(done, resets) << "the job stopped after " << done << " resets at clock "
                          << clock_seen.load();
  std::vector<RankResult> out;
  for (auto& f : ranks) out.push_back(f.get());
  return out;
}

void ExpectSurvived(const Job& job, const std::vector<RankResult>& results) {
  int64_t losses = 0, resent = 0;
  for (const RankResult& r : results) {
    EXPECT_TRUE(r.status.ok()) << r.status;
    if (job.slack == 0 && r.status.ok()) EXPECT_EQ(r.last, 3.0f * (job.clocks - 1));
    losses += r.stats.connection_losses;
    resent += r.stats.updates_resent;
    std::printf(
        "rank: %s, losses %lld, reconnects %lld, updates resent %lld, pushes repeated "
        "%lld; its shard: "
        "resyncs %lld, pushed again %lld, repeated rows skipped %lld, handovers %lld\n",
        r.status.ToString().c_str(), static_cast<long long>(r.stats.connection_losses),
        static_cast<long long>(r.stats.reconnects), static_cast<long long>(r.stats.updates_resent),
        static_cast<long long>(r.stats.pushes_repeated),
        static_cast<long long>(r.shard.resyncs_received), static_cast<long long>(r.shard.repushes),
        static_cast<long long>(r.shard.repeated_rows_skipped),
        static_cast<long long>(r.shard.routing_id_handovers));
    // A reconnect after a reset is not a routing-id handover, and a push
    // sent again that the worker had is not a bad frame.
    EXPECT_EQ(r.shard.routing_id_handovers, 0);
    EXPECT_EQ(r.stats.frames_dropped, 0) << "pushes repeated: " << r.stats.pushes_repeated;
  }
  // Every reset cut the connections of all three workers to one shard, and
  // each was seen by at least one of them. Not always by all three: on a
  // loaded machine (load average 8) 51 of the 60 cuts were counted as
  // losses in one run of the SSP job; what the test holds to is that the
  // sums stay right and the job survives (above).
  EXPECT_GE(losses, 20);
  EXPECT_GT(resent, 0);
}

TEST(ConnectionLossTest, TwentyResetsOfABspJobLeaveExactSums) {
  std::string why;
  if (!CanKillSockets(&why)) GTEST_SKIP() << why;
  Job job;
  job.clocks = 700;
  ExpectSurvived(job, RunWithResets(job, 20, 30));
}

TEST(ConnectionLossTest, TwentyResetsOfAnSspJobStayWithinTheBound) {
  std::string why;
  if (!CanKillSockets(&why)) GTEST_SKIP() << why;
  Job job;
  job.clocks = 700;
  job.slack = 1;
  ExpectSurvived(job, RunWithResets(job, 20, 30));
}

// Machine-level aggregation: 4 ranks in 2 machines; the resets cut the
// relays' connections to the shards (the members reach their relay over
// ipc://). Each relay sends again what was not applied and resyncs, so the
// job ends exact.
TEST(ConnectionLossTest, TwentyResetsOfAnAggregatedBspJobLeaveExactSums) {
  std::string why;
  if (!CanKillSockets(&why)) GTEST_SKIP() << why;
  Job job;
  job.world = 4;
  job.per_machine = 2;
  job.clocks = 700;
  job.ipc_dir = testing::TempDir("relay");
  const std::vector<RankResult> results = RunWithResets(job, 20, 30);
  int64_t resyncs = 0;
  for (const RankResult& r : results) {
    EXPECT_TRUE(r.status.ok()) << r.status;
    if (r.status.ok()) EXPECT_EQ(r.last, 4.0f * (job.clocks - 1));
    EXPECT_EQ(r.stats.frames_dropped, 0);
    EXPECT_EQ(r.shard.routing_id_handovers, 0);
    resyncs += r.shard.resyncs_received;
    std::printf("rank: %s; its shard: resyncs %lld, pushed again %lld, repeated rows %lld\n",
                r.status.ToString().c_str(), static_cast<long long>(r.shard.resyncs_received),
                static_cast<long long>(r.shard.repushes),
                static_cast<long long>(r.shard.repeated_rows_skipped));
  }
  // Every reset cut both relays' connections to one shard; each relay that
  // saw it resynced every table there.
  EXPECT_GE(resyncs, 10);
  testing::RemoveDir(job.ipc_dir);
}

TEST(ConnectionLossTest, WithoutResendALossIsNamed) {
  std::string why;
  if (!CanKillSockets(&why)) GTEST_SKIP() << why;
  Job job;
  job.world = 2;
  job.resend = false;
  const std::vector<RankResult> results = RunWithResets(job, 1, 60);
  for (const RankResult& r : results) {
    // Both workers' connections to rank 0's shard were reset: each saw it.
    EXPECT_GE(r.stats.connection_losses, 1);
    EXPECT_EQ(r.stats.updates_resent, 0);
    if (r.status.ok()) {
      EXPECT_EQ(r.last, 2.0f * (job.clocks - 1));  // nothing was in flight: exact to the end
    } else {
      // Something in flight was lost: the Read says so, naming the cause.
      EXPECT_EQ(r.status.code(), StatusCode::kDeadlineExceeded) << r.status;
      EXPECT_NE(r.status.message().find("was lost"), std::string::npos) << r.status;
    }
    std::printf("rank: %s (losses %lld)\n", r.status.ToString().c_str(),
                static_cast<long long>(r.stats.connection_losses));
  }
}

}  // namespace
}  // namespace geeps
