// The direct update path (docs/architecture.md, "Oplogs and slots"): an
// Update that is the only one of its table in a clock, over consecutive
// cached rows in order, without read-my-writes, goes from its buffer to the
// send slot without passing through the oplog. Every workload here runs on
// a 2-worker, 2-shard BSP cluster; reads must equal the exact sums whichever
// path each update took, and the stats say which path that was.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "geeps/embedded_cluster.h"
#include "test_util.h"

namespace geeps {
namespace {

constexpr uint64_t kRows = 12;
constexpr uint32_t kWidth = 5;
constexpr int kWorkers = 2;
constexpr int kIterations = 5;

enum class Pattern {
  kSole,       // one Update over the updated rows, sorted: direct
  kSplit,      // the same rows in two Updates of the table: through the oplog
  kReversed,   // one Update, rows in descending order: through the oplog
  kSparse,     // one Update over every other row of the rows read: oplog
};

float Delta(int w, int64_t i, uint64_t r, uint32_t j) {
  return static_cast<float>((w + 1) * (i + 1) + 3 * r + j);
}

std::vector<RowIndex> Updated(Pattern p) {
  std::vector<RowIndex> rows;
  for (uint64_t r = 0; r < kRows; r += (p == Pattern::kSparse ? 2 : 1)) rows.push_back(r);
  if (p == Pattern::kReversed) std::reverse(rows.begin(), rows.end());
  return rows;
}

// Runs the workload; returns each worker's updates_direct count.
std::vector<int64_t> RunWorkload(Pattern p, bool read_my_writes) {
  Config c;
  c.num_workers = kWorkers;
  c.num_shards = 2;
  c.read_my_writes = read_my_writes;
  c.tables = {{"t", kRows, kWidth}};
  c.timeout = std::chrono::milliseconds(20000);
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_OK(cluster.status());
  if (!cluster.ok()) return {};
  const std::vector<RowIndex> all = [] {
    std::vector<RowIndex> v(kRows);
    std::iota(v.begin(), v.end(), 0);
    return v;
  }();
  const std::vector<RowIndex> updated = Updated(p);
  EXPECT_OK((*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    const int w = ps.rank();
    GEEPS_ASSIGN_OR_RETURN(ReadHandle rh, ps.VirtualRead(0, all, 0));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(rh));
    // kSplit: the first half of the rows, then the second half.
    std::vector<std::vector<RowIndex>> parts;
    if (p == Pattern::kSplit) {
      parts = {{updated.begin(), updated.begin() + kRows / 2},
               {updated.begin() + kRows / 2, updated.end()}};
    } else {
      parts = {updated};
    }
    std::vector<UpdateHandle> uh;
    for (const auto& rows : parts) {
      GEEPS_ASSIGN_OR_RETURN(UpdateHandle h, ps.VirtualPreUpdate(0, rows));
      GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h));
      uh.push_back(h);
    }
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    for (int64_t i = 0; i < kIterations; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(rh));
      for (uint64_t r = 0; r < kRows; ++r) {
        for (uint32_t j = 0; j < kWidth; ++j) {
          float expect = 0;
          const bool is_updated =
              std::find(updated.begin(), updated.end(), r) != updated.end();
          for (int64_t k = 0; is_updated && k < i; ++k)
            for (int x = 0; x < kWorkers; ++x) expect += Delta(x, k, r, j);
          if (v[r * kWidth + j] != expect)
            return InternalError("worker " + std::to_string(w) + " iteration " +
                                 std::to_string(i) + " row " + std::to_string(r) + " col " +
                                 std::to_string(j) + ": read " +
                                 std::to_string(v[r * kWidth + j]) + ", expected " +
                                 std::to_string(expect));
        }
      }
      GEEPS_RETURN_IF_ERROR(ps.PostRead(rh));
      for (size_t k = 0; k < parts.size(); ++k) {
        GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(uh[k]));
        for (size_t n = 0; n < parts[k].size(); ++n)
          for (uint32_t j = 0; j < kWidth; ++j) d[n * kWidth + j] = Delta(w, i, parts[k][n], j);
        GEEPS_RETURN_IF_ERROR(ps.Update(uh[k]));
      }
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    return Status::OK();
  }));
  std::vector<int64_t> direct;
  for (int w = 0; w < kWorkers; ++w)
    direct.push_back((*cluster)->worker(w)->GetStats().updates_direct);
  EXPECT_OK((*cluster)->Shutdown());
  return direct;
}

TEST(DirectUpdateTest, SoleSortedUpdateIsDirectAndExact) {
  EXPECT_EQ(RunWorkload(Pattern::kSole, false), std::vector<int64_t>(kWorkers, kIterations));
}

TEST(DirectUpdateTest, TwoUpdatesOfATableGoThroughTheOplog) {
  EXPECT_EQ(RunWorkload(Pattern::kSplit, false), std::vector<int64_t>(kWorkers, 0));
}

TEST(DirectUpdateTest, RowsOutOfCacheOrderGoThroughTheOplog) {
  EXPECT_EQ(RunWorkload(Pattern::kReversed, false), std::vector<int64_t>(kWorkers, 0));
}

TEST(DirectUpdateTest, NonConsecutiveCachedRowsGoThroughTheOplog) {
  EXPECT_EQ(RunWorkload(Pattern::kSparse, false), std::vector<int64_t>(kWorkers, 0));
}

TEST(DirectUpdateTest, ReadMyWritesGoesThroughTheOplog) {
  EXPECT_EQ(RunWorkload(Pattern::kSole, true), std::vector<int64_t>(kWorkers, 0));
}

}  // namespace
}  // namespace geeps
