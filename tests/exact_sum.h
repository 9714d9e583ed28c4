// The exact-sum workload shared by the thread-cluster and process-cluster
// tests: W workers x S shards x C channels, several tables of different
// widths; every worker adds known integer deltas each clock, so that every
// expected value is exact in float.
#ifndef GEEPS_TESTS_EXACT_SUM_H_
#define GEEPS_TESTS_EXACT_SUM_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "geeps/geeps.h"
#include "host_view.h"
#include "test_util.h"

namespace geeps::testing {

struct Shape {
  int workers, shards, channels;
  // >= 0: Config::aggregate_per_machine with this workers_per_machine
  // (threads only).
  int per_machine = -1;
};

// "2w2s1c" ("4w2s1c2m": machines of 2 workers), in test output and CTest's
// test properties.
inline void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.workers << "w" << s.shards << "s" << s.channels << "c";
  if (s.per_machine >= 0) *os << s.per_machine << "m";
}

// Tables: 0 width 1, 1 width 3, 2 width 129 (odd widths, few rows), and a
// table with more partitions than rows.
inline Config MakeConfig(const Shape& s) {
  Config c;
  c.num_workers = s.workers;
  c.num_shards = s.shards;
  c.num_channels = s.channels;
  if (s.per_machine >= 0) {
    c.aggregate_per_machine = true;
    c.workers_per_machine = s.per_machine;
  }
  c.tables = {{"narrow", 37, 1}, {"mid", 50, 3}, {"wide", 9, 129}, {"tiny", 2, 5}};
  c.timeout = std::chrono::milliseconds(20000);
  return c;
}

// Initial value written by worker 0's prologue.
inline float Init(uint64_t r, uint32_t j) { return static_cast<float>((r % 11) + (j % 4)); }
// Delta added by worker w in iteration i.
inline float Delta(int w, int64_t i, uint64_t r, uint32_t j) {
  return static_cast<float>((w + 1) * (i % 5 + 1) + (r % 3) + (j % 2));
}
// Init plus every worker's deltas of iterations [0, upto).
inline float Expected(int workers, int64_t upto, uint64_t r, uint32_t j) {
  float v = Init(r, j);
  for (int64_t i = 0; i < upto; ++i)
    for (int w = 0; w < workers; ++w) v += Delta(w, i, r, j);
  return v;
}

// Rows worker w reads of a table: all rows for even tables; every other row
// (offset by rank) for odd ones, so pushes must carry exactly those rows.
inline std::vector<RowIndex> ReadRows(TableId t, uint64_t num_rows, int w) {
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

// Records: read every table in order, then update every table in reverse
// order (a trainer's forward and backward passes: the table read first is
// updated last, so its partitions defer the other tables' pushes of a
// clock until its own has gone), then clock; worker 0's prologue writes
// the initial values. rec.updates is by table.
inline StatusOr<Recorded> Record(GeePS& ps, const Config& c, int slack) {
  Recorded rec;
  for (TableId t = 0; t < c.tables.size(); ++t) {
    rec.read_rows.push_back(ReadRows(t, c.tables[t].num_rows, ps.rank()));
    GEEPS_ASSIGN_OR_RETURN(ReadHandle h, ps.VirtualRead(t, rec.read_rows.back(), slack));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(h));
    rec.reads.push_back(h);
  }
  rec.updates.resize(c.tables.size());
  for (TableId t = c.tables.size(); t-- > 0;) {
    GEEPS_ASSIGN_OR_RETURN(UpdateHandle h,
                           ps.VirtualPreUpdate(t, RowRange(0, c.tables[t].num_rows)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h));
    rec.updates[t] = h;
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
    std::vector<float> values(spec.num_rows * spec.row_width);
    for (uint64_t r = 0; r < spec.num_rows; ++r)
      for (uint32_t j = 0; j < spec.row_width; ++j) values[r * spec.row_width + j] = Init(r, j);
    GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, buf, values));
    GEEPS_RETURN_IF_ERROR(ps.Update(rec.init[t]));
  }
  return rec;
}

// Checks a read value (in host memory) against [lower, upper] iterations of
// deltas.
inline Status CheckRead(const Config& c, TableId t, const std::vector<RowIndex>& rows,
                        const float* buf, int64_t lo_iters, int64_t hi_iters, int w, int64_t i) {
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
inline Status RunWorker(GeePS& ps, const Config& c, int slack, int iterations,
                        std::chrono::milliseconds delay,
                        const std::function<void(int64_t)>& before_clock = nullptr) {
  GEEPS_ASSIGN_OR_RETURN(Recorded rec, Record(ps, c, slack));
  const int w = ps.rank();
  for (int64_t i = 0; i < iterations; ++i) {
    for (TableId t = 0; t < c.tables.size(); ++t) {
      GEEPS_ASSIGN_OR_RETURN(const float* buf, ps.Read(rec.reads[t]));
      GEEPS_ASSIGN_OR_RETURN(std::vector<float> read,
                             ReadBuffer(ps, buf, rec.read_rows[t].size() * c.tables[t].row_width));
      const int64_t lo = slack == kUnboundedSlack ? 0 : std::max<int64_t>(0, i - slack);
      // Nobody can be more than slack+1 iterations ahead of this reader.
      const int64_t hi = slack == 0 ? i : (slack == kUnboundedSlack ? iterations : i + slack + 1);
      GEEPS_RETURN_IF_ERROR(CheckRead(c, t, rec.read_rows[t], read.data(), lo,
                                      std::min<int64_t>(hi, iterations), w, i));
      GEEPS_RETURN_IF_ERROR(ps.PostRead(rec.reads[t]));
    }
    for (TableId t = c.tables.size(); t-- > 0;) {
      GEEPS_ASSIGN_OR_RETURN(float* buf, ps.PreUpdate(rec.updates[t]));
      const TableSpec& spec = c.tables[t];
      std::vector<float> deltas(spec.num_rows * spec.row_width);
      for (uint64_t r = 0; r < spec.num_rows; ++r)
        for (uint32_t j = 0; j < spec.row_width; ++j)
          deltas[r * spec.row_width + j] = Delta(w, i, r, j);
      GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, buf, deltas));
      GEEPS_RETURN_IF_ERROR(ps.Update(rec.updates[t]));
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (before_clock) before_clock(i);
    GEEPS_RETURN_IF_ERROR(ps.Clock());
  }
  // After the last clock every cached row converges to the exact final sum.
  GEEPS_RETURN_IF_ERROR(ps.Sync());
  for (TableId t = 0; t < c.tables.size(); ++t) {
    std::vector<float> out(rec.read_rows[t].size() * c.tables[t].row_width);
    GEEPS_RETURN_IF_ERROR(ps.CopyRows(t, rec.read_rows[t], out.data()));
    GEEPS_RETURN_IF_ERROR(
        CheckRead(c, t, rec.read_rows[t], out.data(), iterations, iterations, w, iterations));
  }
  return Status::OK();
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_EXACT_SUM_H_
