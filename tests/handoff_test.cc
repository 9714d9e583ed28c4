// Who installs the servers' pushes (docs/architecture.md, "Threads of the
// data path"): an application thread that waits for a push receives it
// itself, and while the application computes, the channel thread installs
// pushes in the background so that the next Read does not wait.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "geeps/embedded_cluster.h"
#include "test_util.h"

namespace geeps {
namespace {

constexpr uint64_t kRows = 8;
constexpr uint32_t kWidth = 16;

// Runs `iterations` BSP clocks of `workers` workers; `compute` runs between
// the Clock and the next Read. Returns worker 0's stats at the end.
WorkerStats RunWorkers(int workers, int iterations, const std::function<void(GeePS&, int)>& compute,
                       uint32_t spin_wait_us = Config{}.spin_wait_us) {
  Config c;
  c.spin_wait_us = spin_wait_us;
  c.num_workers = workers;
  c.tables = {{"W", kRows, kWidth}};
  c.timeout = std::chrono::milliseconds(20000);
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  WorkerStats out;
  if (!cluster.ok()) return out;
  Status st = (*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    const auto rows = RowRange(0, kRows);
    GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                           testing::RecordReadUpdateClock(ps, 0, rows));
    const ReadHandle r = h.read;
    const UpdateHandle u = h.update;
    const std::vector<float> ones(kRows * kWidth, 1.0f);
    std::vector<float> seen(kRows * kWidth);
    for (int i = 0; i < iterations; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(r));
      GEEPS_RETURN_IF_ERROR(ps.CopyToHost(seen.data(), w, seen.size()));
      // BSP: the read holds every update of the clocks before this one.
      const float expect = static_cast<float>(i * c.num_workers);
      if (seen[0] != expect || seen.back() != expect)
        return InternalError("clock " + std::to_string(i) + " read " + std::to_string(seen[0]));
      GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, ones.data(), ones.size()));
      GEEPS_RETURN_IF_ERROR(ps.Update(u));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
      compute(ps, i);
    }
    if (ps.rank() == 0) out = ps.GetStats();
    return Status::OK();
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(HandOffTest, AWaitingApplicationThreadReceivesItsPushesItself) {
  constexpr int kIterations = 300;
  const WorkerStats s = RunWorkers(1, kIterations, [](GeePS&, int) {});
  ASSERT_GE(s.pushes_installed, kIterations);
  // In a loop without compute, every Read waits for the push of the clock
  // before it. The channel thread leaves the socket to the waiting thread,
  // so (nearly) all are installed by the application thread; through the
  // channel thread, none would be.
  EXPECT_GE(s.pushes_installed_by_app, s.pushes_installed / 2)
      << s.pushes_installed_by_app << " of " << s.pushes_installed;
}

// Two workers, worker 1 "computing" `late_ms` after each Clock, so that
// worker 0's Reads wait about that long (over inproc and without compute a
// push often comes before the Read asks: as few as 8 of 300 Reads waited
// in a CI run). Returns worker 0's stats.
WorkerStats RunWithALateWorker(int iterations, int late_ms, uint32_t spin_wait_us) {
  return RunWorkers(
      2, iterations,
      [late_ms](GeePS& ps, int) {
        if (ps.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
      },
      spin_wait_us);
}

// Waits for pushes spin before they block (Config::spin_wait_us,
// client/spin_policy.h): with a budget far longer than the 2 ms waits,
// every wait spins and (nearly) every one ends before it must block. The
// sums stay exact (RunWorkers checks every read).

TEST(HandOffTest, ShortWaitsSpinAndEndBeforeTheyBlock) {
  constexpr int kIterations = 50;
  const WorkerStats s = RunWithALateWorker(kIterations, /*late_ms=*/2, /*spin_wait_us=*/100000);
  ASSERT_GE(s.reads_waited, kIterations / 2);
  EXPECT_EQ(s.waits_spun, s.reads_waited);
  // A wait over 100 ms (a stalled CI machine) blocks after its spin.
  EXPECT_GE(s.waits_ended_spinning, s.waits_spun * 9 / 10)
      << s.waits_ended_spinning << " of " << s.waits_spun;
}

TEST(HandOffTest, WithoutABudgetNoWaitSpins) {
  constexpr int kIterations = 50;
  const WorkerStats s = RunWithALateWorker(kIterations, /*late_ms=*/2, /*spin_wait_us=*/0);
  ASSERT_GE(s.reads_waited, kIterations / 2);
  EXPECT_EQ(s.waits_spun, 0);
  EXPECT_EQ(s.waits_ended_spinning, 0);
}

// Waits far longer than the budget stop spinning after a few: 20 ms waits
// against a budget of 1 ms (the first waits spin, their average then
// passes the budget).
TEST(HandOffTest, WaitsLongerThanTheBudgetSoonStopSpinning) {
  constexpr int kIterations = 30;
  const WorkerStats s = RunWithALateWorker(kIterations, /*late_ms=*/20, /*spin_wait_us=*/1000);
  ASSERT_GE(s.reads_waited, kIterations / 2);
  EXPECT_GE(s.waits_spun, 1);
  // Two long waits in a row stop it; a few short ones while the workers
  // fall into step may come first.
  EXPECT_LE(s.waits_spun, 6) << "of " << s.reads_waited << " waits";
}

TEST(HandOffTest, WhileTheApplicationComputesTheChannelThreadInstallsPushes) {
  constexpr int kIterations = 40;
  std::vector<double> latency_ms;  // from the end of Clock to the install
  const WorkerStats s = RunWorkers(2, kIterations, [&](GeePS& ps, int i) {
    if (i % 2 == 0) return;
    if (ps.rank() == 1) {
      // Late with its next (even) clock: worker 0's Read of the odd clock
      // after it waits 5 ms for the push, and its channel thread steps
      // aside meanwhile.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    // Worker 0, after that wait, "computes" without calling the library:
    // only its channel thread can install this clock's push meanwhile
    // (unless Clock already did). The thread leaves the socket to the
    // application for 1 ms after its last wait (looking every 5 ms while
    // the application waits); left asleep until its safety poll, it would
    // take up to 200 ms.
    const int64_t clocks = i + 1;
    const auto start = std::chrono::steady_clock::now();
    if (ps.GetStats().pushes_installed > clocks) return;  // installed by Clock
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(300)) {
      const WorkerStats now = ps.GetStats();
      if (now.pushes_installed > clocks) {
        latency_ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    latency_ms.push_back(300);
  });
  ASSERT_GE(s.pushes_installed, kIterations);
  ASSERT_GE(latency_ms.size(), 5u) << "most pushes came back inside Clock";
  // Each install comes 1 to 6 ms after Clock on a quiet machine; a channel
  // thread left asleep until its safety poll takes up to 200 ms, as it did
  // in 3 to 5 of 20 here when nothing woke it after a wait. Allow one
  // stall.
  std::sort(latency_ms.begin(), latency_ms.end());
  const size_t slow = static_cast<size_t>(
      latency_ms.end() - std::upper_bound(latency_ms.begin(), latency_ms.end(), 50.0));
  EXPECT_LE(slow, 1u) << slow << " of " << latency_ms.size()
                      << " installs came more than 50 ms after Clock; slowest " << latency_ms.back()
                      << " ms";
}

}  // namespace
// A wait stops reading a socket at the push it installed, leaving the next
// push from that shard unread and the socket's descriptor unarmed (it
// signals again only after a receive finds nothing). The channel thread
// must read such a socket before it sleeps on the descriptors, or a push
// queued behind waits for its 200 ms safety poll.
//
// A clock only measures when B's push had not been installed with A's
// (under load the channel thread often takes both before the application
// reads): the loop runs until kSamples clocks have measured, at most
// kMaxIterations (a CI run in a test mode saw 2 of 30 clocks measure).
TEST(HandOffTest, APushQueuedBehindTheOneAWaitTookIsInstalledInTheBackground) {
  constexpr int kSamples = 10;
  constexpr int kMaxIterations = 1000;
  Config c;
  c.num_workers = 1;
  c.tables = {{"A", kRows, kWidth}, {"B", kRows, kWidth}};
  c.timeout = std::chrono::milliseconds(20000);
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<double> latency_ms;  // from the end of Read(A) to B's install
  const Status st = (*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    const auto rows = RowRange(0, kRows);
    GEEPS_ASSIGN_OR_RETURN(const ReadHandle ra, ps.VirtualRead(0, rows, 0));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(ra));
    GEEPS_ASSIGN_OR_RETURN(const ReadHandle rb, ps.VirtualRead(1, rows, 0));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(rb));
    // A is updated first, so the shard pushes A, then B.
    GEEPS_ASSIGN_OR_RETURN(const UpdateHandle ua, ps.VirtualPreUpdate(0, rows));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(ua));
    GEEPS_ASSIGN_OR_RETURN(const UpdateHandle ub, ps.VirtualPreUpdate(1, rows));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(ub));
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    int64_t both = -1;  // pushes installed once both of the last clock were
    for (int i = 0; i < kMaxIterations && latency_ms.size() < kSamples; ++i) {
      GEEPS_RETURN_IF_ERROR(ps.Read(ra).status());
      const auto start = std::chrono::steady_clock::now();
      // "Computes" without calling the library: only the channel thread
      // can install B's push meanwhile.
      if (both >= 0 && ps.GetStats().pushes_installed < both + 2) {
        for (;;) {
          const double ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
          if (ps.GetStats().pushes_installed >= both + 2 || ms > 300) {
            latency_ms.push_back(ms);
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      GEEPS_RETURN_IF_ERROR(ps.PostRead(ra));
      GEEPS_RETURN_IF_ERROR(ps.Read(rb).status());
      GEEPS_RETURN_IF_ERROR(ps.PostRead(rb));
      both = ps.GetStats().pushes_installed;
      for (const UpdateHandle u : {ua, ub}) {
        GEEPS_RETURN_IF_ERROR(ps.PreUpdate(u).status());
        GEEPS_RETURN_IF_ERROR(ps.Update(u));
      }
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    return Status::OK();
  });
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_GE(latency_ms.size(), static_cast<size_t>(kSamples))
      << "B's push came with A's in all but " << latency_ms.size() << " of " << kMaxIterations
      << " clocks";
  std::sort(latency_ms.begin(), latency_ms.end());
  const size_t slow = static_cast<size_t>(
      latency_ms.end() - std::upper_bound(latency_ms.begin(), latency_ms.end(), 50.0));
  EXPECT_LE(slow, 1u) << slow << " of " << latency_ms.size()
                      << " pushes of B came more than 50 ms after Read(A); slowest "
                      << latency_ms.back() << " ms";
}

}  // namespace geeps
