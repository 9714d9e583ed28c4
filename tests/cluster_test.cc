// Exact-sum cluster tests: W workers x S shards x C channels on an embedded
// cluster, several tables of different widths. Every worker adds known
// integer deltas each clock, so every expected value is exact in float.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "geeps/embedded_cluster.h"
#include "exact_sum.h"
#include "test_util.h"

namespace geeps {
namespace {

using namespace geeps::testing;  // NOLINT: the shared workload

class ExactSumTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ExactSumTest, BspReadsAreExact) {
  Config c = MakeConfig(GetParam());
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    return RunWorker(ps, c, 0, 6, std::chrono::milliseconds(0));
  }));
  for (int s = 0; s < c.num_shards; ++s)
    EXPECT_EQ((*cluster)->GetShardStats(s).frames_dropped, 0);
  WorkerStats ws = (*cluster)->worker(0)->GetStats();
  EXPECT_EQ(ws.iterations, 6);
  EXPECT_GT(ws.pushes_installed, 0);
  ASSERT_OK((*cluster)->Shutdown());
}

// Every message split into parts of one or a few rows.
TEST_P(ExactSumTest, BspReadsAreExactWithMessagesInParts) {
  Config c = MakeConfig(GetParam());
  c.max_message_bytes = 64;
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    return RunWorker(ps, c, 0, 4, std::chrono::milliseconds(0));
  }));
  for (int s = 0; s < c.num_shards; ++s)
    EXPECT_EQ((*cluster)->GetShardStats(s).frames_dropped, 0);
}

TEST_P(ExactSumTest, SspReadsStayWithinSlack) {
  Config c = MakeConfig(GetParam());
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  // The last worker is slow, so faster ones use their slack.
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    const bool slow = ps.rank() == c.num_workers - 1;
    return RunWorker(ps, c, 2, 8, std::chrono::milliseconds(slow ? 15 : 0));
  }));
}

TEST_P(ExactSumTest, AsyncConvergesToExactSums) {
  Config c = MakeConfig(GetParam());
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    const bool slow = ps.rank() == 0;
    return RunWorker(ps, c, kUnboundedSlack, 6, std::chrono::milliseconds(slow ? 10 : 0));
  }));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ExactSumTest,
                         ::testing::Values(Shape{1, 1, 1}, Shape{2, 2, 1}, Shape{4, 3, 2},
                                           Shape{3, 2, 3}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::to_string(info.param.workers) + "w" +
                                  std::to_string(info.param.shards) + "s" +
                                  std::to_string(info.param.channels) + "c";
                         });

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
