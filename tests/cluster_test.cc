// Exact-sum cluster tests: W workers x S shards x C channels on an embedded
// cluster, several tables of different widths. Every worker adds known
// integer deltas each clock, so every expected value is exact in float.
// Every case runs on each device backend (the CUDA cases skip, with the
// reason, where CUDA is not available); the workload reads and writes the
// device buffers only through CopyToHost / CopyFromHost (host_view.h).
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>

#include "device/device.h"
#include "exact_sum.h"
#include "geeps/embedded_cluster.h"
#include "test_util.h"

namespace geeps {

namespace {

using namespace geeps::testing;  // NOLINT: the shared workload

// (device backend, cluster shape).
class ExactSumTest : public ::testing::TestWithParam<std::tuple<DeviceKind, Shape>> {
 protected:
  void SetUp() override {
    const Status available = device::CheckDeviceAvailable(kind());
    if (!available.ok()) GTEST_SKIP() << available.message();
  }

  DeviceKind kind() const { return std::get<0>(GetParam()); }
  const Shape& shape() const { return std::get<1>(GetParam()); }
  // The shared workload's config, on this case's device.
  Config MakeDeviceConfig() const {
    Config c = MakeConfig(shape());
    c.device = kind();
    return c;
  }
};

TEST_P(ExactSumTest, BspReadsAreExact) {
  Config c = MakeDeviceConfig();
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers(
      [&](GeePS& ps) { return RunWorker(ps, c, 0, 6, std::chrono::milliseconds(0)); }));
  for (int s = 0; s < c.num_shards; ++s) EXPECT_EQ((*cluster)->GetShardStats(s).frames_dropped, 0);
  EXPECT_EQ((*cluster)->worker(0)->device_kind(), kind());
  WorkerStats ws = (*cluster)->worker(0)->GetStats();
  EXPECT_EQ(ws.iterations, 6);
  EXPECT_GT(ws.pushes_installed, 0);
  ASSERT_OK((*cluster)->Shutdown());
}

// Every message split into parts of one or a few rows.
TEST_P(ExactSumTest, BspReadsAreExactWithMessagesInParts) {
  Config c = MakeDeviceConfig();
  c.max_message_bytes = 64;
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers(
      [&](GeePS& ps) { return RunWorker(ps, c, 0, 4, std::chrono::milliseconds(0)); }));
  for (int s = 0; s < c.num_shards; ++s) EXPECT_EQ((*cluster)->GetShardStats(s).frames_dropped, 0);
}

// Pipelined updates: updates in parts of a few rows, and pushes whose first
// parts leave before the last worker's last part arrives.
TEST_P(ExactSumTest, BspReadsAreExactWithPipelinedUpdates) {
  Config c = MakeDeviceConfig();
  c.pipeline_part_bytes = 64;
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers(
      [&](GeePS& ps) { return RunWorker(ps, c, 0, 8, std::chrono::milliseconds(0)); }));
  int64_t early = 0;
  for (int s = 0; s < c.num_shards; ++s) {
    const ShardStats st = (*cluster)->GetShardStats(s);
    EXPECT_EQ(st.frames_dropped, 0);
    early += st.early_push_parts;
  }
  EXPECT_GT(early, 0) << "no push part left before the minimum clock advanced";
}

TEST_P(ExactSumTest, SspReadsStayWithinSlackWithPipelinedUpdates) {
  Config c = MakeDeviceConfig();
  c.pipeline_part_bytes = 64;
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    const bool slow = ps.rank() == c.num_workers - 1;
    return RunWorker(ps, c, 1, 8, std::chrono::milliseconds(slow ? 10 : 0));
  }));
  for (int s = 0; s < c.num_shards; ++s) EXPECT_EQ((*cluster)->GetShardStats(s).frames_dropped, 0);
}

TEST_P(ExactSumTest, SspReadsStayWithinSlack) {
  Config c = MakeDeviceConfig();
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  // The last worker is slow, so faster ones use their slack.
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    const bool slow = ps.rank() == c.num_workers - 1;
    return RunWorker(ps, c, 2, 8, std::chrono::milliseconds(slow ? 15 : 0));
  }));
}

TEST_P(ExactSumTest, AsyncConvergesToExactSums) {
  Config c = MakeDeviceConfig();
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    const bool slow = ps.rank() == 0;
    return RunWorker(ps, c, kUnboundedSlack, 6, std::chrono::milliseconds(slow ? 10 : 0));
  }));
}

const Shape kShapes[] = {{1, 1, 1}, {2, 2, 1}, {4, 3, 2}, {3, 2, 3}};

// "1w1s1c": the shape (the instantiation names the device).
std::string ShapeName(const ::testing::TestParamInfo<std::tuple<DeviceKind, Shape>>& info) {
  const Shape& s = std::get<1>(info.param);
  return std::to_string(s.workers) + "w" + std::to_string(s.shards) + "s" +
         std::to_string(s.channels) + "c";
}

INSTANTIATE_TEST_SUITE_P(Host, ExactSumTest,
                         ::testing::Combine(::testing::Values(DeviceKind::kHost),
                                            ::testing::ValuesIn(kShapes)),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(Cuda, ExactSumTest,
                         ::testing::Combine(::testing::Values(DeviceKind::kCuda),
                                            ::testing::ValuesIn(kShapes)),
                         ShapeName);

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
