// Exact-sum cluster tests: W workers x S shards x C channels, several
// tables of different widths. Every worker adds known integer deltas each
// clock, so every expected value is exact in float. Every suite runs through
// the one test cluster (test_cluster.h) over each transport: threads of an
// EmbeddedCluster over inproc:// and multiproc_worker processes over ipc://
// and tcp://, each on each device backend (the CUDA cases skip, with the
// reason, where CUDA is not available). The workload reads and writes the device
// buffers only through CopyToHost / CopyFromHost (host_view.h).
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <string>
#include <tuple>

#include "common/env_flags.h"
#include "device/device.h"
#include "exact_sum.h"
#include "test_cluster.h"
#include "test_paths.h"
#include "test_util.h"

namespace geeps {

namespace {

using namespace geeps::testing;  // NOLINT: the shared workload and cluster
using std::chrono::steady_clock;

// (cluster and transport, cluster shape).
class ExactSumTest : public ::testing::TestWithParam<std::tuple<Backend, Shape>> {
 protected:
  // A CUDA case without a GPU runs on the CUDA-like host device where that
  // mode is on (GEEPS_HOST_AS_CUDA=1: kAuto is that device), so that CI
  // rehearses what the GPU machine will run; else it skips, saying why.
  void SetUp() override {
    const Status available = device::CheckDeviceAvailable(backend().device);
    if (available.ok()) return;
    const StatusOr<bool> cuda_like = HostAsCudaFromEnvironment();
    if (backend().device == DeviceKind::kCuda && cuda_like.ok() && *cuda_like) {
      device_ = DeviceKind::kAuto;
      reported_kind_ = DeviceKind::kHost;
      return;
    }
    GTEST_SKIP() << available.message();
  }

  const Backend& backend() const { return std::get<0>(GetParam()); }
  const Shape& shape() const { return std::get<1>(GetParam()); }
  // The device the workers ask for, and the kind they then report.
  DeviceKind device_ = backend().device;
  DeviceKind reported_kind_ = backend().device;
  Workload MakeWorkload() const {
    Workload w;
    w.shape = shape();
    w.device = device_;
    return w;
  }
  // Runs `w` on a new cluster of this case's kind; every worker must
  // succeed and report, every shard must report and drop nothing.
  ClusterResult RunAll(const Workload& w) {
    ClusterResult r =
        MakeCluster(backend(), ::geeps::testing::Program(GEEPS_MULTIPROC_WORKER))->Run(w);
    EXPECT_EQ(static_cast<int>(r.workers.size()), w.shape.workers);
    for (const WorkerResult& wr : r.workers) {
      EXPECT_TRUE(wr.reported) << "worker " << wr.rank << "\n" << Describe(r);
      EXPECT_TRUE(wr.status.ok()) << "worker " << wr.rank << ": " << wr.status.ToString() << "\n"
                                  << Describe(r);
      EXPECT_EQ(wr.exit, 0) << Describe(r);
      EXPECT_EQ(wr.iterations, w.iterations) << "worker " << wr.rank;
    }
    EXPECT_EQ(static_cast<int>(r.shards.size()), w.shape.shards);
    for (const ShardResult& s : r.shards) EXPECT_EQ(s.frames_dropped, 0) << "shard " << s.shard;
    // A clean Shutdown leaves the ipc folder as it found it.
    EXPECT_TRUE(r.ipc_leftovers.empty())
        << r.ipc_leftovers.size() << " files left, e.g. " << r.ipc_leftovers[0];
    return r;
  }
};

// A shard counter summed over the shards.
int64_t OverShards(const ClusterResult& r, int64_t ShardResult::*counter) {
  int64_t sum = 0;
  for (const ShardResult& s : r.shards) sum += s.*counter;
  return sum;
}

TEST_P(ExactSumTest, BspReadsAreExact) {
  Workload w = MakeWorkload();
  w.adapt_push_order = false;
  const ClusterResult r = RunAll(w);
  for (const WorkerResult& wr : r.workers) {
    EXPECT_EQ(wr.device, static_cast<int>(reported_kind_)) << "worker " << wr.rank;
    EXPECT_GT(wr.pushes_installed, 0) << "worker " << wr.rank;
  }
  // Pushes go as their clocks complete unless a worker asks for the order.
  for (const ShardResult& s : r.shards) EXPECT_EQ(s.pushes_deferred, 0) << "shard " << s.shard;
}

// Config::push_in_read_order: the workload updates its tables in reverse
// (exact_sum.h), so from the second clock on a partition holds the later
// tables' pushes until the first table's has gone (server/push_schedule.h);
// the sums stay exact, and the SSP bound holds.
TEST_P(ExactSumTest, BspReadsAreExactWithPushesInReadOrder) {
  Workload w = MakeWorkload();
  w.push_in_read_order = true;
  EXPECT_GT(OverShards(RunAll(w), &ShardResult::pushes_deferred), 0)
      << "no push waited for the table read first";
}

// Config::adapt_push_order (the default): rank 0 sleeps 5 ms before each
// clock, so the others' reads wait for most of each iteration; after three
// iterations they ask for the order of need and the partitions hold
// pushes. Sums stay exact. (One worker: nobody waits for a slower one.)
TEST_P(ExactSumTest, BspReadsAreExactWhenTheWorkersAskForTheOrder) {
  Workload w = MakeWorkload();
  w.iterations = 12;
  w.slow_rank = 0;
  w.delay_ms = 5;
  const int64_t deferred = OverShards(RunAll(w), &ShardResult::pushes_deferred);
  if (w.shape.workers > 1)
    EXPECT_GT(deferred, 0) << "no worker asked for the order of need, or no push waited";
}

TEST_P(ExactSumTest, SspReadsStayWithinSlackWithPushesInReadOrder) {
  Workload w = MakeWorkload();
  w.push_in_read_order = true;
  w.slack = 1;
  w.iterations = 8;
  w.slow_rank = w.shape.workers - 1;
  w.delay_ms = 10;
  RunAll(w);
}

// Every message split into parts of one or a few rows.
TEST_P(ExactSumTest, BspReadsAreExactWithMessagesInParts) {
  Workload w = MakeWorkload();
  w.max_message_bytes = 64;
  w.iterations = 4;
  RunAll(w);
}

// Pipelined updates: updates in parts of a few rows, and pushes whose first
// parts leave before the last worker's last part arrives.
TEST_P(ExactSumTest, BspReadsAreExactWithPipelinedUpdates) {
  Workload w = MakeWorkload();
  w.pipeline_part_bytes = 64;
  w.iterations = 8;
  EXPECT_GT(OverShards(RunAll(w), &ShardResult::early_push_parts), 0)
      << "no push part left before the minimum clock advanced";
}

TEST_P(ExactSumTest, SspReadsStayWithinSlackWithPipelinedUpdates) {
  Workload w = MakeWorkload();
  w.pipeline_part_bytes = 64;
  w.slack = 1;
  w.iterations = 8;
  w.slow_rank = w.shape.workers - 1;
  w.delay_ms = 10;
  RunAll(w);
}

// The last worker is slow, so faster ones use their slack.
TEST_P(ExactSumTest, SspReadsStayWithinSlack) {
  Workload w = MakeWorkload();
  w.slack = 2;
  w.iterations = 8;
  w.slow_rank = w.shape.workers - 1;
  w.delay_ms = 15;
  RunAll(w);
}

TEST_P(ExactSumTest, AsyncConvergesToExactSums) {
  Workload w = MakeWorkload();
  w.slack = kUnboundedSlack;
  w.slow_rank = 0;
  w.delay_ms = 10;
  RunAll(w);
}

// Threads: any shape. Processes: every process a worker and a shard.
const Shape kThreadShapes[] = {{1, 1, 1}, {2, 2, 1}, {4, 3, 2}, {3, 2, 3}};
const Shape kProcessShapes[] = {{2, 2, 1}, {3, 3, 2}};
// Machine-level aggregation (threads): 2 machines x 2 workers, with 3
// shards x 2 channels, 2 x 4, and machines of 2, 2 and 1.
const Shape kAggregatedShapes[] = {{4, 2, 1, 2}, {4, 3, 2, 2}, {8, 2, 1, 4}, {5, 2, 2, 2}};
// Processes (each a worker and a shard), machines from GEEPS_MACHINE: 2 x 2,
// and machines of 2 and 1.
const Shape kAggregatedProcessShapes[] = {{4, 4, 1, 2}, {3, 3, 2, 2}};

// "1w1s1c": the shape (the instantiation names the cluster and transport).
std::string ShapeName(const ::testing::TestParamInfo<std::tuple<Backend, Shape>>& info) {
  const Shape& s = std::get<1>(info.param);
  return std::to_string(s.workers) + "w" + std::to_string(s.shards) + "s" +
         std::to_string(s.channels) + "c" +
         (s.per_machine >= 0 ? std::to_string(s.per_machine) + "m" : "");
}

// Every shape of `shapes` on the cluster of `kind` over `transport`.
template <size_t N>
auto Over(ClusterKind kind, const char* transport, DeviceKind device, const Shape (&shapes)[N]) {
  return ::testing::Combine(::testing::Values(Backend{kind, transport, device}),
                            ::testing::ValuesIn(shapes));
}

INSTANTIATE_TEST_SUITE_P(Inproc, ExactSumTest,
                         Over(ClusterKind::kThreads, "inproc", DeviceKind::kHost, kThreadShapes),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(InprocAggregated, ExactSumTest,
                         Over(ClusterKind::kThreads, "inproc", DeviceKind::kHost,
                              kAggregatedShapes),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(IpcAggregated, ExactSumTest,
                         Over(ClusterKind::kProcesses, "ipc", DeviceKind::kHost,
                              kAggregatedProcessShapes),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(TcpAggregated, ExactSumTest,
                         Over(ClusterKind::kProcesses, "tcp", DeviceKind::kHost,
                              kAggregatedProcessShapes),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(Ipc, ExactSumTest,
                         Over(ClusterKind::kProcesses, "ipc", DeviceKind::kHost, kProcessShapes),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(Tcp, ExactSumTest,
                         Over(ClusterKind::kProcesses, "tcp", DeviceKind::kHost, kProcessShapes),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(InprocCuda, ExactSumTest,
                         Over(ClusterKind::kThreads, "inproc", DeviceKind::kCuda, kThreadShapes),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(InprocAggregatedCuda, ExactSumTest,
                         Over(ClusterKind::kThreads, "inproc", DeviceKind::kCuda,
                              kAggregatedShapes),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(IpcCuda, ExactSumTest,
                         Over(ClusterKind::kProcesses, "ipc", DeviceKind::kCuda, kProcessShapes),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(TcpCuda, ExactSumTest,
                         Over(ClusterKind::kProcesses, "tcp", DeviceKind::kCuda, kProcessShapes),
                         ShapeName);

// The failure suite: SIGKILL one rank mid-iteration; every other fails with
// kUnavailable naming it, well within the deadline. Processes only: a
// thread of an EmbeddedCluster cannot be killed.
class ClusterFailureTest : public ::testing::TestWithParam<Backend> {
 protected:
  // `shape`: 3 processes, or 4 in 2 machines (aggregated).
  void KillOne(int victim, Shape shape = {3, 3, 2}) {
    Workload w;
    w.shape = shape;
    w.iterations = 50;
    w.kill_rank = victim;
    w.kill_at = 3;
    // 1500 ms; longer in a sanitizer build, where 4 such processes on 2
    // cores have missed heartbeats for 1500 ms before the kill (every rank
    // then lost every other, the victim included).
    w.heartbeat_timeout_ms = 1500 * ::geeps::testing::SanitizerSlowdown();
    const auto start = steady_clock::now();
    const ClusterResult r =
        MakeCluster(GetParam(), ::geeps::testing::Program(GEEPS_MULTIPROC_WORKER))->Run(w);
    const auto took = steady_clock::now() - start;
    ASSERT_EQ(r.workers.size(), static_cast<size_t>(shape.workers));
    EXPECT_FALSE(r.workers[victim].reported) << Describe(r);
    EXPECT_EQ(r.workers[victim].exit, 128 + SIGKILL) << Describe(r);
    for (const WorkerResult& wr : r.workers) {
      if (wr.rank == victim) continue;
      EXPECT_TRUE(wr.reported) << "worker " << wr.rank << "\n" << Describe(r);
      EXPECT_EQ(wr.status.code(), StatusCode::kUnavailable) << Describe(r);
      EXPECT_NE(wr.status.message().find("rank " + std::to_string(victim)), std::string::npos)
          << Describe(r);
      EXPECT_EQ(wr.exit, 3) << Describe(r);  // multiproc_worker's code for kUnavailable
    }
    EXPECT_LT(took, std::chrono::seconds(30)) << Describe(r);
  }
};

TEST_P(ClusterFailureTest, KilledRankIsReportedByEveryOther) { KillOne(2); }
TEST_P(ClusterFailureTest, KilledCoordinatorIsReportedByEveryOther) { KillOne(0); }
// Machine-level aggregation, 2 machines of 2 processes: a member (rank 3)
// and a machine's leader, whose process runs its relay (rank 2).
TEST_P(ClusterFailureTest, KilledMemberOfAMachineIsReportedByEveryOther) {
  KillOne(3, {4, 4, 2, 2});
}
TEST_P(ClusterFailureTest, KilledLeaderOfAMachineIsReportedByEveryOther) {
  KillOne(2, {4, 4, 2, 2});
}

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param.transport;
}

INSTANTIATE_TEST_SUITE_P(Processes, ClusterFailureTest,
                         ::testing::Values(Backend{ClusterKind::kProcesses, "ipc"},
                                           Backend{ClusterKind::kProcesses, "tcp"}),
                         BackendName);

// The bound check itself must catch a violation: a read that skips the wait
// (slack larger than the check assumes) is reported.
TEST(ExactSumCheck, DetectsAStaleRead) {
  Config c = MakeConfig({2, 1, 1});
  std::vector<RowIndex> rows = {0, 1};
  std::vector<float> stale = {Expected(2, 1, 0, 0), Expected(2, 1, 1, 0)};
  EXPECT_FALSE(CheckRead(c, 0, rows, stale.data(), 2, 2, 0, 2).ok());
  EXPECT_TRUE(CheckRead(c, 0, rows, stale.data(), 1, 1, 0, 1).ok());
}

}  // namespace
}  // namespace geeps
