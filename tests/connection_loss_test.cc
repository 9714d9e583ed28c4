// A TCP connection between a worker and a server partition that is reset
// mid-job (`ss -K`, as a middlebox or a NIC reset would) is seen and
// counted (WorkerStats::connection_losses), and a Read that then times out
// names the lost connection instead of only blaming a slow worker. libgeeps
// does not resend what was in flight yet (docs/architecture.md, "Connection
// loss and resend"), so the job may fail; it must not hang, and a failure
// must name the real cause.
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
#include "test_util.h"

namespace geeps {
namespace {

constexpr uint64_t kRows = 16;
constexpr uint32_t kWidth = 8;
constexpr int kClocks = 300;
constexpr int kResetAt = 60;

// Kills every TCP socket on loopback whose destination port is `port` (the
// workers' connections to one shard); the command's exit status.
int KillConnections(int port) {
  const std::string cmd = "ss -K dst 127.0.0.1 dport = :" + std::to_string(port) +
                          " >/dev/null 2>&1";
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

struct RankResult {
  Status status;
  WorkerStats stats;
  float last = -1;  // the last value read
};

RankResult RunRank(int rank, int port, std::atomic<int>* clock_seen) {
  RankResult out;
  Config c;
  c.tables = {{"t", kRows, kWidth}};
  c.timeout = std::chrono::milliseconds(4000);
  c.heartbeat_timeout = std::chrono::milliseconds(4000);
  ProcessOptions po;
  po.rank = rank;
  po.world_size = 2;
  po.coordinator = "127.0.0.1:" + std::to_string(port);
  po.base_port = port + 1;  // rank 0's shard at port + 1, rank 1's at port + 2
  auto p = Process::Join(c, po);
  if (!p.ok()) {
    out.status = p.status();
    return out;
  }
  GeePS& ps = *(*p)->worker();
  out.status = [&]() -> Status {
    GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                           testing::RecordReadUpdateClock(ps, 0, RowRange(0, kRows)));
    const std::vector<float> ones(kRows * kWidth, 1.0f);
    std::vector<float> seen(kRows * kWidth);
    for (int i = 0; i < kClocks; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(h.read));
      GEEPS_RETURN_IF_ERROR(ps.CopyToHost(seen.data(), w, seen.size()));
      out.last = seen[0];
      if (seen[0] != 2.0f * i || seen.back() != 2.0f * i)
        return InternalError("clock " + std::to_string(i) + ": read " +
                             std::to_string(seen[0]) + ", expected " + std::to_string(2 * i));
      GEEPS_RETURN_IF_ERROR(ps.PostRead(h.read));
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.update));
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, ones.data(), ones.size()));
      GEEPS_RETURN_IF_ERROR(ps.Update(h.update));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
      if (rank == 0) clock_seen->store(i + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Status::OK();
  }();
  out.stats = ps.GetStats();
  (*p)->Shutdown().ok();  // the run's own status is what the test checks
  return out;
}

TEST(ConnectionLossTest, AResetConnectionIsCountedAndNamed) {
  std::string why;
  if (!CanKillSockets(&why)) GTEST_SKIP() << why;
  const int port = testing::FreePortRange(3);
  std::atomic<int> clock_seen{0};
  auto r1 = std::async(std::launch::async, [&] { return RunRank(1, port, &clock_seen); });
  auto r0 = std::async(std::launch::async, [&] { return RunRank(0, port, &clock_seen); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (clock_seen.load() < kResetAt && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(clock_seen.load(), kResetAt) << "the job did not get going";
  ASSERT_EQ(KillConnections(port + 1), 0) << "ss -K failed";
  const RankResult a = r0.get(), b = r1.get();
  // Both workers' connections to rank 0's shard were reset: each saw it.
  EXPECT_GE(a.stats.connection_losses, 1);
  EXPECT_GE(b.stats.connection_losses, 1);
  for (const RankResult* r : {&a, &b}) {
    if (r->status.ok()) {
      EXPECT_EQ(r->last, 2.0f * (kClocks - 1));  // nothing was in flight: exact to the end
    } else {
      // Something in flight was lost: the Read says so, naming the cause.
      EXPECT_EQ(r->status.code(), StatusCode::kDeadlineExceeded) << r->status;
      EXPECT_NE(r->status.message().find("was lost"), std::string::npos) << r->status;
    }
  }
  std::printf("rank 0: %s (losses %lld); rank 1: %s (losses %lld)\n",
              a.status.ToString().c_str(), static_cast<long long>(a.stats.connection_losses),
              b.status.ToString().c_str(), static_cast<long long>(b.stats.connection_losses));
}

}  // namespace
}  // namespace geeps
