// Exact-sum cluster tests: W workers x S shards x C channels on an embedded
// cluster, several tables of different widths. Every worker adds known
// integer deltas each clock, so every expected value is exact in float.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "geeps/embedded_cluster.h"
#include "test_util.h"

namespace geeps {
namespace {

struct Shape {
  int workers, shards, channels;
};

// Tables: 0 width 1, 1 width 3, 2 width 129 (odd widths, few rows), and a
// table with more partitions than rows.
Config MakeConfig(const Shape& s) {
  Config c;
  c.num_workers = s.workers;
  c.num_shards = s.shards;
  c.num_channels = s.channels;
  c.tables = {{"narrow", 37, 1}, {"mid", 50, 3}, {"wide", 9, 129}, {"tiny", 2, 5}};
  c.timeout = std::chrono::milliseconds(20000);
  return c;
}

// Initial value written by worker 0's prologue.
float Init(uint64_t r, uint32_t j) { return static_cast<float>((r % 11) + (j % 4)); }
// Delta added by worker w in iteration i.
float Delta(int w, int64_t i, uint64_t r, uint32_t j) {
  return static_cast<float>((w + 1) * (i % 5 + 1) + (r % 3) + (j % 2));
}
// Init plus every worker's deltas of iterations [0, upto).
float Expected(int workers, int64_t upto, uint64_t r, uint32_t j) {
  float v = Init(r, j);
  for (int64_t i = 0; i < upto; ++i)
    for (int w = 0; w < workers; ++w) v += Delta(w, i, r, j);
  return v;
}

// Rows worker w reads of a table: all rows for even tables; every other row
// (offset by rank) for odd ones, so pushes must carry exactly those rows.
std::vector<RowIndex> ReadRows(TableId t, uint64_t num_rows, int w) {
  if (t % 2 == 0) return RowRange(0, num_rows);
  std::vector<RowIndex> rows;
  for (uint64_t r = w % 2; r < num_rows; r += 2) rows.push_back(r);
  if (rows.empty()) rows.push_back(0);
  return rows;
}

struct Recorded {
  std::vector<ReadHandle> reads;
  std::vector<UpdateHandle> updates;
  std::vector<UpdateHandle> init;
  std::vector<std::vector<RowIndex>> read_rows;
};

// Records: read every table, then update every table, then clock; worker 0's
// prologue writes the initial values.
StatusOr<Recorded> Record(GeePS& ps, const Config& c, int slack) {
  Recorded rec;
  for (TableId t = 0; t < c.tables.size(); ++t) {
    rec.read_rows.push_back(ReadRows(t, c.tables[t].num_rows, ps.rank()));
    GEEPS_ASSIGN_OR_RETURN(ReadHandle h, ps.VirtualRead(t, rec.read_rows.back(), slack));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(h));
    rec.reads.push_back(h);
  }
  for (TableId t = 0; t < c.tables.size(); ++t) {
    GEEPS_ASSIGN_OR_RETURN(UpdateHandle h, ps.VirtualPreUpdate(t, RowRange(0, c.tables[t].num_rows)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h));
    rec.updates.push_back(h);
  }
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  if (ps.rank() == 0) {
    for (TableId t = 0; t < c.tables.size(); ++t) {
      GEEPS_ASSIGN_OR_RETURN(UpdateHandle h,
                             ps.VirtualPreUpdate(t, RowRange(0, c.tables[t].num_rows)));
      GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h));
      rec.init.push_back(h);
    }
  }
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  GEEPS_RETURN_IF_ERROR(ps.StartIterations());
  for (size_t t = 0; t < rec.init.size(); ++t) {
    GEEPS_ASSIGN_OR_RETURN(float* buf, ps.PreUpdate(rec.init[t]));
    const TableSpec& spec = c.tables[t];
    for (uint64_t r = 0; r < spec.num_rows; ++r)
      for (uint32_t j = 0; j < spec.row_width; ++j) buf[r * spec.row_width + j] = Init(r, j);
    GEEPS_RETURN_IF_ERROR(ps.Update(rec.init[t]));
  }
  return rec;
}

// Checks a read value against [lower, upper] iterations of deltas.
Status CheckRead(const Config& c, TableId t, const std::vector<RowIndex>& rows, const float* buf,
                 int64_t lo_iters, int64_t hi_iters, int w, int64_t i) {
  const uint32_t width = c.tables[t].row_width;
  for (size_t k = 0; k < rows.size(); ++k) {
    for (uint32_t j = 0; j < width; ++j) {
      const float got = buf[k * width + j];
      const float lo = Expected(c.num_workers, lo_iters, rows[k], j);
      const float hi = Expected(c.num_workers, hi_iters, rows[k], j);
      if (got < lo || got > hi) {
        return InternalError("worker " + std::to_string(w) + " iteration " + std::to_string(i) +
                             " table " + std::to_string(t) + " row " + std::to_string(rows[k]) +
                             " col " + std::to_string(j) + ": read " + std::to_string(got) +
                             ", expected within [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "]");
      }
    }
  }
  return Status::OK();
}

// Runs `iterations` iterations; reads must lie within the staleness bound of
// `slack` (exact for slack 0). `delay(w)` slows some workers down.
Status RunWorker(GeePS& ps, const Config& c, int slack, int iterations,
                 std::chrono::milliseconds delay) {
  GEEPS_ASSIGN_OR_RETURN(Recorded rec, Record(ps, c, slack));
  const int w = ps.rank();
  for (int64_t i = 0; i < iterations; ++i) {
    for (TableId t = 0; t < c.tables.size(); ++t) {
      GEEPS_ASSIGN_OR_RETURN(const float* buf, ps.Read(rec.reads[t]));
      const int64_t lo = slack == kUnboundedSlack ? 0 : std::max<int64_t>(0, i - slack);
      // Nobody can be more than slack+1 iterations ahead of this reader.
      const int64_t hi = slack == 0 ? i : (slack == kUnboundedSlack ? iterations : i + slack + 1);
      GEEPS_RETURN_IF_ERROR(CheckRead(c, t, rec.read_rows[t], buf, lo,
                                      std::min<int64_t>(hi, iterations), w, i));
      GEEPS_RETURN_IF_ERROR(ps.PostRead(rec.reads[t]));
    }
    for (TableId t = 0; t < c.tables.size(); ++t) {
      GEEPS_ASSIGN_OR_RETURN(float* buf, ps.PreUpdate(rec.updates[t]));
      const TableSpec& spec = c.tables[t];
      for (uint64_t r = 0; r < spec.num_rows; ++r)
        for (uint32_t j = 0; j < spec.row_width; ++j)
          buf[r * spec.row_width + j] = Delta(w, i, r, j);
      GEEPS_RETURN_IF_ERROR(ps.Update(rec.updates[t]));
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    GEEPS_RETURN_IF_ERROR(ps.Clock());
  }
  // After the last clock every cached row converges to the exact final sum.
  GEEPS_RETURN_IF_ERROR(ps.Sync());
  for (TableId t = 0; t < c.tables.size(); ++t) {
    std::vector<float> out(rec.read_rows[t].size() * c.tables[t].row_width);
    GEEPS_RETURN_IF_ERROR(ps.CopyRows(t, rec.read_rows[t], out.data()));
    GEEPS_RETURN_IF_ERROR(CheckRead(c, t, rec.read_rows[t], out.data(), iterations, iterations,
                                    w, iterations));
  }
  return Status::OK();
}

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
