// The worker's two shortcuts (docs/architecture.md, "Oplogs and slots" and
// "Reads in place"): an Update that is the only one of its table in a
// clock, over consecutive cached rows in order, without read-my-writes,
// goes from its buffer to the send slot without passing through the oplog;
// a BSP Read of consecutive cached rows whose table does not advance while
// it is open returns the cache rows themselves. Every workload here runs on
// a 2-worker, 2-shard cluster; reads must equal the exact sums whichever
// path each access took, and the stats say which path that was.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "geeps/embedded_cluster.h"
#include "host_view.h"
#include "test_util.h"

namespace geeps {
namespace {

constexpr uint64_t kRows = 12;
constexpr uint32_t kWidth = 5;
constexpr int kWorkers = 2;
constexpr int kIterations = 5;

enum class Pattern {
  kSole,      // one Update over the updated rows, sorted: direct
  kSplit,     // the same rows in two Updates of the table: through the oplog
  kReversed,  // one Update, rows in descending order: through the oplog
  kSparse,    // one Update over every other row of the rows read: oplog
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

struct Options {
  bool read_my_writes = false;
  int slack = 0;
  // The Read stays open across its table's Update (and so its advance);
  // its rows are checked again after the Update and a pause in which the
  // next push could land.
  bool read_spans_update = false;
};

struct Paths {
  std::vector<int64_t> direct_updates, reads_in_place;  // per worker
};

Paths RunWorkload(Pattern p, const Options& o = {}) {
  Config c;
  c.num_workers = kWorkers;
  c.num_shards = 2;
  c.read_my_writes = o.read_my_writes;
  c.tables = {{"t", kRows, kWidth}};
  c.timeout = std::chrono::milliseconds(20000);
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_OK(cluster.status());
  if (!cluster.ok()) return {};
  Paths paths;
  const std::vector<RowIndex> all = [] {
    std::vector<RowIndex> v(kRows);
    std::iota(v.begin(), v.end(), 0);
    return v;
  }();
  const std::vector<RowIndex> updated = Updated(p);
  EXPECT_OK((*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    const int w = ps.rank();
    GEEPS_ASSIGN_OR_RETURN(ReadHandle rh, ps.VirtualRead(0, all, o.slack));
    if (!o.read_spans_update) GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(rh));
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
    if (o.read_spans_update) GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(rh));
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    // Reads of iteration i must hold every worker's deltas of iterations
    // < i exactly (BSP); with slack, those of at least i - slack. `buffer`
    // is the device buffer Read returned.
    auto check = [&](const float* buffer, int64_t i) -> Status {
      GEEPS_ASSIGN_OR_RETURN(const std::vector<float> v,
                             testing::ReadBuffer(ps, buffer, kRows * kWidth));
      for (uint64_t r = 0; r < kRows; ++r) {
        const bool is_updated = std::find(updated.begin(), updated.end(), r) != updated.end();
        for (uint32_t j = 0; j < kWidth; ++j) {
          float lo = 0, hi = 0;
          for (int64_t k = 0; is_updated && k < i; ++k) {
            for (int x = 0; x < kWorkers; ++x) {
              hi += Delta(x, k, r, j);
              if (k < i - o.slack) lo += Delta(x, k, r, j);
            }
          }
          const float got = v[r * kWidth + j];
          if (got < lo || got > hi)
            return InternalError("worker " + std::to_string(w) + " iteration " + std::to_string(i) +
                                 " row " + std::to_string(r) + " col " + std::to_string(j) +
                                 ": read " + std::to_string(got) + ", expected within [" +
                                 std::to_string(lo) + ", " + std::to_string(hi) + "]");
        }
      }
      return Status::OK();
    };
    int64_t pushes_while_open = 0;  // iterations whose next push came during the open Read
    for (int64_t i = 0; i < kIterations; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(rh));
      const int64_t installed_at_read = ps.GetStats().pushes_installed;
      GEEPS_RETURN_IF_ERROR(check(v, i));
      if (!o.read_spans_update) GEEPS_RETURN_IF_ERROR(ps.PostRead(rh));
      for (size_t k = 0; k < parts.size(); ++k) {
        GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(uh[k]));
        std::vector<float> deltas(parts[k].size() * kWidth);
        for (size_t n = 0; n < parts[k].size(); ++n)
          for (uint32_t j = 0; j < kWidth; ++j)
            deltas[n * kWidth + j] = Delta(w, i, parts[k][n], j);
        GEEPS_RETURN_IF_ERROR(testing::WriteBuffer(ps, d, deltas));
        GEEPS_RETURN_IF_ERROR(ps.Update(uh[k]));
      }
      if (o.read_spans_update) {
        // Both workers' updates of clock i go out with their last Update:
        // wait (bounded) until the next push is installed while this Read is
        // open; it must not show through rows this Read returned.
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (ps.GetStats().pushes_installed == installed_at_read &&
               std::chrono::steady_clock::now() < give_up)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (ps.GetStats().pushes_installed > installed_at_read) ++pushes_while_open;
        GEEPS_RETURN_IF_ERROR(check(v, i));
        GEEPS_RETURN_IF_ERROR(ps.PostRead(rh));
      }
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    // The case under test must have happened (a push in while a Read
    // spanning the update was open), not just passed for lack of one.
    if (o.read_spans_update && pushes_while_open == 0)
      return InternalError("worker " + std::to_string(w) +
                           ": no push came while a Read was open across the update");
    return Status::OK();
  }));
  for (int w = 0; w < kWorkers; ++w) {
    const WorkerStats ws = (*cluster)->worker(w)->GetStats();
    paths.direct_updates.push_back(ws.updates_direct);
    paths.reads_in_place.push_back(ws.reads_in_place);
  }
  EXPECT_OK((*cluster)->Shutdown());
  return paths;
}

const std::vector<int64_t> kAll(kWorkers, kIterations), kNone(kWorkers, 0);

TEST(DirectPathTest, SoleSortedUpdateIsDirectAndBspReadIsInPlace) {
  const Paths p = RunWorkload(Pattern::kSole);
  EXPECT_EQ(p.direct_updates, kAll);
  EXPECT_EQ(p.reads_in_place, kAll);
}

TEST(DirectPathTest, TwoUpdatesOfATableGoThroughTheOplog) {
  const Paths p = RunWorkload(Pattern::kSplit);
  EXPECT_EQ(p.direct_updates, kNone);
  EXPECT_EQ(p.reads_in_place, kAll);
}

TEST(DirectPathTest, RowsOutOfCacheOrderGoThroughTheOplog) {
  EXPECT_EQ(RunWorkload(Pattern::kReversed).direct_updates, kNone);
}

TEST(DirectPathTest, NonConsecutiveCachedRowsGoThroughTheOplog) {
  EXPECT_EQ(RunWorkload(Pattern::kSparse).direct_updates, kNone);
}

TEST(DirectPathTest, ReadMyWritesTakesNeitherShortcut) {
  Options o;
  o.read_my_writes = true;
  const Paths p = RunWorkload(Pattern::kSole, o);
  EXPECT_EQ(p.direct_updates, kNone);
  EXPECT_EQ(p.reads_in_place, kNone);
}

TEST(DirectPathTest, StaleReadsAreGathered) {
  Options o;
  o.slack = 1;
  const Paths p = RunWorkload(Pattern::kSole, o);
  EXPECT_EQ(p.reads_in_place, kNone);
  EXPECT_EQ(p.direct_updates, kAll);
}

TEST(DirectPathTest, ReadOpenAcrossItsTablesUpdateIsGatheredAndStaysPut) {
  Options o;
  o.read_spans_update = true;
  const Paths p = RunWorkload(Pattern::kSole, o);
  EXPECT_EQ(p.reads_in_place, kNone);
  EXPECT_EQ(p.direct_updates, kAll);
}

}  // namespace
}  // namespace geeps
