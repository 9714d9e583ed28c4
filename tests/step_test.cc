// geeps::Step (include/geeps/step.h): one body for the virtual and the real
// passes. The exact-sum job through a Step and through the low-level calls,
// the prologue, the typed views, the compute callable, and the errors of a
// real iteration that leaves the recording.
#include "geeps/step.h"
#include "test_paths.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "consumer/trainer.h"
#include "exact_sum.h"
#include "geeps/embedded_cluster.h"
#include "host_view.h"
#include "test_util.h"

namespace geeps {
namespace {

using testing::Delta;
using testing::Expected;
using testing::Init;
using testing::ReadBuffer;
using testing::ReadRows;

constexpr TableId kShared = 4;   // shared tables: 0..3 (exact_sum.h)
constexpr TableId kScratch = 4;  // a local table

// The exact-sum tables plus a local one, on the host backend.
Config JobConfig(int workers) {
  Config c = testing::MakeConfig({workers, 1, 1});
  c.tables.push_back({"scratch", 4, 2, /*local=*/true});
  c.device = DeviceKind::kHost;
  c.deterministic_bsp = true;
  c.timeout = std::chrono::milliseconds(10000);
  return c;
}

std::unique_ptr<EmbeddedCluster> StartOrDie(const Config& c) {
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(cluster).value() : nullptr;
}

std::vector<float> InitValues(const TableSpec& spec) {
  std::vector<float> v(spec.num_rows * spec.row_width);
  for (uint64_t r = 0; r < spec.num_rows; ++r)
    for (uint32_t j = 0; j < spec.row_width; ++j) v[r * spec.row_width + j] = Init(r, j);
  return v;
}

std::vector<float> DeltaValues(const TableSpec& spec, int w, int64_t i) {
  std::vector<float> v(spec.num_rows * spec.row_width);
  for (uint64_t r = 0; r < spec.num_rows; ++r)
    for (uint32_t j = 0; j < spec.row_width; ++j) v[r * spec.row_width + j] = Delta(w, i, r, j);
  return v;
}

// What a worker saw: every Read's values in order, then the final rows.
struct Trace {
  std::vector<float> seen;
  int64_t computes = 0;  // compute callables run
};

// Checks values read at iteration i (within [lo, hi] iterations of deltas;
// BSP: exactly i) and appends them to the trace.
Status Seen(const Config& c, TableId t, int w, int64_t i, const std::vector<float>& read,
            Trace* trace, int64_t lo, int64_t hi) {
  const std::vector<RowIndex> rows = ReadRows(t, c.tables[t].num_rows, w);
  GEEPS_RETURN_IF_ERROR(testing::CheckRead(c, t, rows, read.data(), lo, hi, w, i));
  trace->seen.insert(trace->seen.end(), read.begin(), read.end());
  return Status::OK();
}

// Final rows after Sync, checked and appended to the trace.
Status Final(GeePS& ps, const Config& c, int64_t iterations, Trace* trace) {
  GEEPS_RETURN_IF_ERROR(ps.Sync());
  for (TableId t = 0; t < kShared; ++t) {
    const std::vector<RowIndex> rows = ReadRows(t, c.tables[t].num_rows, ps.rank());
    std::vector<float> out(rows.size() * c.tables[t].row_width);
    GEEPS_RETURN_IF_ERROR(ps.CopyRows(t, rows, out.data()));
    GEEPS_RETURN_IF_ERROR(Seen(c, t, ps.rank(), iterations, out, trace, iterations, iterations));
  }
  return Status::OK();
}

// The job through a Step: worker 0's prologue writes the initial values;
// each iteration reads every shared table with `slack`, checks it against
// the staleness bound (exact under BSP), updates every shared table, keeps
// a counter in the local table, and clocks. Worker 0 waits `delay` per
// iteration (others run ahead as far as the slack lets them).
Status StepJob(GeePS& ps, const Config& c, int64_t iterations, Trace* trace, int slack = 0,
               std::chrono::milliseconds delay = std::chrono::milliseconds(0)) {
  Step step(ps, c);
  const int w = ps.rank();
  auto prologue = [&](Step& s) -> Status {
    if (s.rank() != 0) return Status::OK();
    for (TableId t = 0; t < kShared; ++t) {
      GEEPS_ASSIGN_OR_RETURN(MutableRows init, s.PreUpdate(t, RowRange(0, c.tables[t].num_rows)));
      GEEPS_RETURN_IF_ERROR(s.Compute([&] {
        ++trace->computes;
        return testing::WriteBuffer(ps, init.data, InitValues(c.tables[t]));
      }));
      GEEPS_RETURN_IF_ERROR(s.Update(init));
    }
    return Status::OK();
  };
  auto iteration = [&](Step& s) -> Status {
    const int64_t i = s.iteration();
    for (TableId t = 0; t < kShared; ++t) {
      GEEPS_ASSIGN_OR_RETURN(ConstRows view,
                             s.Read(t, ReadRows(t, c.tables[t].num_rows, w), slack));
      GEEPS_RETURN_IF_ERROR(s.Compute([&]() -> Status {
        ++trace->computes;
        GEEPS_ASSIGN_OR_RETURN(auto read, ReadBuffer(ps, view.data, view.floats()));
        // Nobody is more than slack+1 iterations ahead of this reader.
        const int64_t lo = slack == kUnboundedSlack ? 0 : std::max<int64_t>(0, i - slack);
        const int64_t hi = slack == 0 ? i
                           : slack == kUnboundedSlack
                               ? iterations
                               : std::min<int64_t>(i + slack + 1, iterations);
        return Seen(c, t, w, i, read, trace, lo, hi);
      }));
      GEEPS_RETURN_IF_ERROR(s.PostRead(view));
    }
    for (TableId t = 0; t < kShared; ++t) {
      GEEPS_ASSIGN_OR_RETURN(MutableRows d, s.PreUpdate(t, RowRange(0, c.tables[t].num_rows)));
      GEEPS_RETURN_IF_ERROR(s.Compute([&] {
        ++trace->computes;
        return testing::WriteBuffer(ps, d.data, DeltaValues(c.tables[t], w, i));
      }));
      GEEPS_RETURN_IF_ERROR(s.Update(d));
    }
    GEEPS_ASSIGN_OR_RETURN(MutableRows local, s.LocalAccess(kScratch, {1}));
    GEEPS_RETURN_IF_ERROR(s.Compute([&]() -> Status {
      ++trace->computes;
      GEEPS_ASSIGN_OR_RETURN(auto v, ReadBuffer(ps, local.data, 2));
      W_CHECK(i == 0 || v[0] == static_cast<float>(i),
              "local counter " + std::to_string(v[0]) + " at iteration " + std::to_string(i));
      return testing::WriteBuffer(ps, local.data, {static_cast<float>(i + 1), 0.0f});
    }));
    GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(local));
    if (w == 0 && delay.count() > 0)
      GEEPS_RETURN_IF_ERROR(s.Compute([&] { std::this_thread::sleep_for(delay); }));
    return s.Clock();
  };
  GEEPS_RETURN_IF_ERROR(step.Run(prologue, iteration, iterations));
  W_CHECK(step.iteration() == iterations, "iteration count");
  return Final(ps, c, iterations, trace);
}

// The same job with the low-level calls.
Status LowLevelJob(GeePS& ps, const Config& c, int64_t iterations, Trace* trace) {
  const int w = ps.rank();
  std::vector<ReadHandle> reads;
  std::vector<UpdateHandle> updates, init;
  for (TableId t = 0; t < kShared; ++t) {
    GEEPS_ASSIGN_OR_RETURN(ReadHandle h,
                           ps.VirtualRead(t, ReadRows(t, c.tables[t].num_rows, w), 0));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(h));
    reads.push_back(h);
  }
  for (TableId t = 0; t < kShared; ++t) {
    GEEPS_ASSIGN_OR_RETURN(UpdateHandle h,
                           ps.VirtualPreUpdate(t, RowRange(0, c.tables[t].num_rows)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h));
    updates.push_back(h);
  }
  GEEPS_ASSIGN_OR_RETURN(LocalHandle local, ps.VirtualLocalAccess(kScratch, {1}, true));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(local, true));
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  if (w == 0) {
    for (TableId t = 0; t < kShared; ++t) {
      GEEPS_ASSIGN_OR_RETURN(UpdateHandle h,
                             ps.VirtualPreUpdate(t, RowRange(0, c.tables[t].num_rows)));
      GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h));
      init.push_back(h);
    }
  }
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  GEEPS_RETURN_IF_ERROR(ps.StartIterations());
  for (TableId t = 0; t < init.size(); ++t) {
    GEEPS_ASSIGN_OR_RETURN(float* buf, ps.PreUpdate(init[t]));
    GEEPS_RETURN_IF_ERROR(testing::WriteBuffer(ps, buf, InitValues(c.tables[t])));
    GEEPS_RETURN_IF_ERROR(ps.Update(init[t]));
  }
  for (int64_t i = 0; i < iterations; ++i) {
    for (TableId t = 0; t < kShared; ++t) {
      GEEPS_ASSIGN_OR_RETURN(const float* buf, ps.Read(reads[t]));
      const size_t n = ReadRows(t, c.tables[t].num_rows, w).size() * c.tables[t].row_width;
      GEEPS_ASSIGN_OR_RETURN(auto read, ReadBuffer(ps, buf, n));
      GEEPS_RETURN_IF_ERROR(Seen(c, t, w, i, read, trace, i, i));
      GEEPS_RETURN_IF_ERROR(ps.PostRead(reads[t]));
    }
    for (TableId t = 0; t < kShared; ++t) {
      GEEPS_ASSIGN_OR_RETURN(float* buf, ps.PreUpdate(updates[t]));
      GEEPS_RETURN_IF_ERROR(testing::WriteBuffer(ps, buf, DeltaValues(c.tables[t], w, i)));
      GEEPS_RETURN_IF_ERROR(ps.Update(updates[t]));
    }
    GEEPS_ASSIGN_OR_RETURN(float* l, ps.LocalAccess(local));
    GEEPS_RETURN_IF_ERROR(testing::WriteBuffer(ps, l, {static_cast<float>(i + 1), 0.0f}));
    GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(local));
    GEEPS_RETURN_IF_ERROR(ps.Clock());
  }
  return Final(ps, c, iterations, trace);
}

constexpr int64_t kIterations = 6;

std::vector<Trace> RunJob(bool with_step) {
  const Config c = JobConfig(2);
  auto cluster = StartOrDie(c);
  std::vector<Trace> traces(2);
  if (!cluster) return traces;
  EXPECT_OK(cluster->RunWorkers([&](GeePS& ps) {
    Trace* trace = &traces[ps.rank()];
    return with_step ? StepJob(ps, c, kIterations, trace) : LowLevelJob(ps, c, kIterations, trace);
  }));
  return traces;
}

TEST(StepTest, TwoWorkerBspJobReachesExactSums) {
  const Config c = JobConfig(2);
  std::vector<Trace> traces = RunJob(/*with_step=*/true);
  for (int w = 0; w < 2; ++w) {
    // Every value was checked by the workers; check the count and a few
    // values against the per-clock formula here too.
    size_t per_clock = 0;
    for (TableId t = 0; t < kShared; ++t)
      per_clock += ReadRows(t, c.tables[t].num_rows, w).size() * c.tables[t].row_width;
    ASSERT_EQ(traces[w].seen.size(), per_clock * (kIterations + 1)) << w;
    // Table 0 (width 1, all rows) comes first in each clock's values.
    for (int64_t i = 0; i <= kIterations; ++i) {
      EXPECT_EQ(traces[w].seen[i * per_clock + 5], Expected(2, i, 5, 0))
          << "worker " << w << " clock " << i;
    }
  }
}

// The same suite under SSP and asynchronous reads, through a Step: 3
// workers, worker 0 slowed down, every read within its staleness bound and
// the final rows exact.
void RunStaleJob(int slack) {
  Config c = JobConfig(3);
  c.deterministic_bsp = false;
  auto cluster = StartOrDie(c);
  ASSERT_NE(cluster, nullptr);
  constexpr int64_t kIters = 12;
  std::vector<Trace> traces(3);
  ASSERT_OK(cluster->RunWorkers([&](GeePS& ps) {
    return StepJob(ps, c, kIters, &traces[ps.rank()], slack, std::chrono::milliseconds(3));
  }));
  for (const Trace& t : traces) EXPECT_GT(t.computes, kIters);
}

TEST(StepTest, SspJobStaysWithinItsBound) { RunStaleJob(2); }

TEST(StepTest, AsyncJobEndsExact) { RunStaleJob(kUnboundedSlack); }

TEST(StepTest, LowLevelJobIsBitwiseEqual) {
  std::vector<Trace> step = RunJob(/*with_step=*/true);
  std::vector<Trace> low = RunJob(/*with_step=*/false);
  for (int w = 0; w < 2; ++w) {
    ASSERT_FALSE(step[w].seen.empty());
    ASSERT_EQ(step[w].seen.size(), low[w].seen.size()) << w;
    EXPECT_EQ(
        std::memcmp(step[w].seen.data(), low[w].seen.data(), step[w].seen.size() * sizeof(float)),
        0)
        << "worker " << w;
  }
}

TEST(StepTest, PrologueValuesAreSeenByTheFirstIteration) {
  Config c;
  c.tables = {{"w", 3, 2}};
  c.device = DeviceKind::kHost;
  c.num_workers = 2;
  auto cluster = StartOrDie(c);
  ASSERT_NE(cluster, nullptr);
  std::vector<std::vector<float>> first(2);
  ASSERT_OK(cluster->RunWorkers([&](GeePS& ps) {
    Step step(ps, c);
    const auto rows = RowRange(0, 3);
    return step.Run(
        [&](Step& s) -> Status {
          if (s.rank() != 0) return Status::OK();
          GEEPS_ASSIGN_OR_RETURN(MutableRows d, s.PreUpdate(0, rows));
          GEEPS_RETURN_IF_ERROR(s.Compute([&] {
            return testing::WriteBuffer(ps, d.data, {1, 2, 3, 4, 5, 6});
          }));
          return s.Update(d);
        },
        [&](Step& s) -> Status {
          GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, rows));
          GEEPS_RETURN_IF_ERROR(s.Compute([&]() -> Status {
            if (s.iteration() != 0) return Status::OK();
            GEEPS_ASSIGN_OR_RETURN(first[ps.rank()], ReadBuffer(ps, r.data, r.floats()));
            return Status::OK();
          }));
          GEEPS_RETURN_IF_ERROR(s.PostRead(r));
          return s.Clock();
        },
        2);
  }));
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(first[w], (std::vector<float>{1, 2, 3, 4, 5, 6})) << w;
  }
}

// The prologue may make local accesses too (docs/api.md): a local table
// filled once there, kept, is what every iteration's local access fetches.
TEST(StepTest, ALocalTableFilledInThePrologueIsKept) {
  Config c;
  c.tables = {{"w", 2, 2}, {"loc", 3, 2, /*local=*/true}};
  c.device = DeviceKind::kHost;
  c.num_workers = 2;
  auto cluster = StartOrDie(c);
  ASSERT_NE(cluster, nullptr);
  std::vector<std::vector<float>> seen(2);
  ASSERT_OK(cluster->RunWorkers([&](GeePS& ps) {
    Step step(ps, c);
    const auto rows = RowRange(0, 3);
    const float base = static_cast<float>(10 * (ps.rank() + 1));
    return step.Run(
        [&](Step& s) -> Status {
          GEEPS_ASSIGN_OR_RETURN(MutableRows l, s.LocalAccess(1, rows, /*fetch=*/false));
          GEEPS_RETURN_IF_ERROR(s.Compute([&] {
            return testing::WriteBuffer(ps, l.data,
                                        {base, base + 1, base + 2, base + 3, base + 4, base + 5});
          }));
          return s.PostLocalAccess(l, /*keep=*/true);
        },
        [&](Step& s) -> Status {
          GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, RowRange(0, 2)));
          GEEPS_RETURN_IF_ERROR(s.PostRead(r));
          GEEPS_ASSIGN_OR_RETURN(MutableRows l, s.LocalAccess(1, rows, /*fetch=*/true));
          GEEPS_RETURN_IF_ERROR(s.Compute([&]() -> Status {
            GEEPS_ASSIGN_OR_RETURN(std::vector<float> v, ReadBuffer(ps, l.data, l.floats()));
            seen[ps.rank()].insert(seen[ps.rank()].end(), v.begin(), v.end());
            return Status::OK();
          }));
          GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(l, /*keep=*/true));
          return s.Clock();
        },
        3);
  }));
  for (int w = 0; w < 2; ++w) {
    const float b = static_cast<float>(10 * (w + 1));
    std::vector<float> once = {b, b + 1, b + 2, b + 3, b + 4, b + 5}, expect;
    for (int i = 0; i < 3; ++i) expect.insert(expect.end(), once.begin(), once.end());
    EXPECT_EQ(seen[w], expect) << "worker " << w;
  }
}

// The same table read back each iteration by a read-only access
// (Step::LocalRead / PostLocalRead): const rows, and they stay as filled.
TEST(StepTest, ALocalTableReadOnlyInTheIteration) {
  Config c;
  c.tables = {{"w", 2, 2}, {"loc", 3, 2, /*local=*/true}};
  c.device = DeviceKind::kHost;
  auto cluster = StartOrDie(c);
  ASSERT_NE(cluster, nullptr);
  GeePS& ps = *cluster->worker(0);
  Step step(ps, c);
  const auto rows = RowRange(0, 3);
  std::vector<float> seen;
  ASSERT_OK(step.Run(
      [&](Step& s) -> Status {
        GEEPS_ASSIGN_OR_RETURN(MutableRows l, s.LocalAccess(1, rows, /*fetch=*/false));
        GEEPS_RETURN_IF_ERROR(s.Compute([&] {
          return testing::WriteBuffer(ps, l.data, {1, 2, 3, 4, 5, 6});
        }));
        return s.PostLocalAccess(l, /*keep=*/true);
      },
      [&](Step& s) -> Status {
        GEEPS_ASSIGN_OR_RETURN(ConstRows l, s.LocalRead(1, rows));
        if (l.rows != 3 || l.width != 2) return InternalError("local read shape");
        GEEPS_RETURN_IF_ERROR(s.Compute([&]() -> Status {
          GEEPS_ASSIGN_OR_RETURN(std::vector<float> v, ReadBuffer(ps, l.data, l.floats()));
          seen.insert(seen.end(), v.begin(), v.end());
          return Status::OK();
        }));
        GEEPS_RETURN_IF_ERROR(s.PostLocalRead(l));
        return s.Clock();
      },
      2));
  EXPECT_EQ(seen, std::vector<float>({1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
}

TEST(StepTest, ViewsReportRowsAndWidth) {
  Config c;
  c.tables = {{"w", 10, 3}, {"loc", 6, 7, /*local=*/true}};
  c.device = DeviceKind::kHost;
  auto cluster = StartOrDie(c);
  ASSERT_NE(cluster, nullptr);
  GeePS& ps = *cluster->worker(0);
  Step step(ps, c);
  int bodies = 0, recorded = 0;
  Status inner;  // the first wrong view, from inside the body
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok && inner.ok()) inner = InternalError(what);
  };
  auto iteration = [&](Step& s) -> Status {
    ++bodies;
    if (s.recording()) ++recorded;
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {2, 5, 7, 9}, 0));
    expect(r.rows == 4 && r.width == 3 && r.floats() == 12, "read shape");
    expect(r.position == 0, "read position");
    expect((r.data == nullptr) == s.recording(), "read data");
    GEEPS_RETURN_IF_ERROR(s.PostRead(r));
    GEEPS_ASSIGN_OR_RETURN(MutableRows u, s.PreUpdate(0, {1, 2}));
    expect(u.rows == 2 && u.width == 3 && u.position == 2, "update shape");
    expect((u.data == nullptr) == s.recording(), "update data");
    GEEPS_RETURN_IF_ERROR(s.Update(u));
    GEEPS_ASSIGN_OR_RETURN(MutableRows l, s.LocalAccess(1, RowRange(0, 5), false));
    expect(l.rows == 5 && l.width == 7 && l.floats() == 35, "local shape");
    expect(l.position == 4, "local position");
    expect((l.data == nullptr) == s.recording(), "local data");
    GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(l, false));
    return s.Clock();
  };
  ASSERT_OK(step.Run(nullptr, iteration, 3));
  EXPECT_OK(inner);
  EXPECT_EQ(bodies, 4);
  EXPECT_EQ(recorded, 1);
  EXPECT_EQ(step.iteration(), 3);
  EXPECT_FALSE(step.recording());
}

TEST(StepTest, ComputeIsNotInvokedWhileRecording) {
  const Config c = JobConfig(2);
  std::vector<Trace> traces = RunJob(/*with_step=*/true);
  // Per real iteration: 4 reads + 4 updates + 1 local access; worker 0's
  // prologue: 4 more. None while recording.
  EXPECT_EQ(traces[0].computes, 4 + 9 * kIterations);
  EXPECT_EQ(traces[1].computes, 9 * kIterations);

  // A void callable, counted directly.
  Config one;
  one.tables = {{"w", 2, 2}};
  one.device = DeviceKind::kHost;
  auto cluster = StartOrDie(one);
  ASSERT_NE(cluster, nullptr);
  Step step(*cluster->worker(0), one);
  int prologue_calls = 0, iteration_calls = 0;
  ASSERT_OK(step.Run(
      [&](Step& s) -> Status {
        GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {0, 1}));
        GEEPS_RETURN_IF_ERROR(s.Compute([&] { ++prologue_calls; }));
        return s.PostRead(r);
      },
      [&](Step& s) -> Status {
        GEEPS_RETURN_IF_ERROR(s.Compute([&] { ++iteration_calls; }));
        return s.Clock();
      },
      5));
  EXPECT_EQ(prologue_calls, 1);
  EXPECT_EQ(iteration_calls, 5);
}

// ---- A real iteration that leaves the recording -----------------------------

// Runs a one-worker job whose iteration 2 calls `deviate(s)` instead of the
// usual body; returns Run's status, then checks that the Step refuses more.
Status RunDeviating(const std::function<Status(Step&)>& deviate) {
  Config c;
  c.tables = {{"a", 8, 2}, {"b", 8, 2}};
  c.device = DeviceKind::kHost;
  c.timeout = std::chrono::milliseconds(3000);
  auto cluster = StartOrDie(c);
  if (!cluster) return InternalError("no cluster");
  Step step(*cluster->worker(0), c);
  auto iteration = [&](Step& s) -> Status {
    if (s.iteration() == 2) return deviate(s);
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {1, 2, 3}));
    GEEPS_RETURN_IF_ERROR(s.PostRead(r));
    GEEPS_ASSIGN_OR_RETURN(MutableRows u, s.PreUpdate(0, {1, 2, 3}));
    GEEPS_RETURN_IF_ERROR(s.Update(u));
    return s.Clock();
  };
  Status st = step.Run(nullptr, iteration, 4);
  EXPECT_EQ(step.iteration(), 2);
  EXPECT_EQ(step.RunIteration().code(), StatusCode::kFailedPrecondition);
  EXPECT_OK(cluster->Shutdown());
  return st;
}

void ExpectMentions(const Status& st, const std::vector<std::string>& parts) {
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
  for (const std::string& p : parts) {
    EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' not in: " << st;
  }
}

TEST(StepMismatchTest, ReadOfAnotherTable) {
  Status st = RunDeviating([](Step& s) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(1, {1, 2, 3}));
    return s.PostRead(r);
  });
  ExpectMentions(st, {"iteration 2", "position 0", "recorded Read(table 0, 3 rows [1, 2, 3]",
                      "called Read(table 1, 3 rows [1, 2, 3]"});
}

TEST(StepMismatchTest, ReadOfOtherRows) {
  Status st = RunDeviating([](Step& s) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {1, 2, 4}));
    return s.PostRead(r);
  });
  ExpectMentions(st, {"iteration 2", "position 0", "recorded Read(table 0",
                      "first different row at index 2: recorded 3, called 4"});
}

TEST(StepMismatchTest, MissingUpdate) {
  Status st = RunDeviating([](Step& s) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {1, 2, 3}));
    GEEPS_RETURN_IF_ERROR(s.PostRead(r));
    GEEPS_ASSIGN_OR_RETURN(MutableRows u, s.PreUpdate(0, {1, 2, 3}));
    (void)u;
    return s.Clock();
  });
  ExpectMentions(st,
                 {"iteration 2", "position 3", "recorded Update(of position 2", "called Clock()"});
}

TEST(StepMismatchTest, ALocalReadIsNotALocalAccess) {
  Config c;
  c.tables = {{"w", 2, 2}, {"loc", 3, 2, /*local=*/true}};
  c.device = DeviceKind::kHost;
  auto cluster = StartOrDie(c);
  ASSERT_NE(cluster, nullptr);
  Step step(*cluster->worker(0), c);
  Status st = step.Run(
      nullptr,
      [&](Step& s) -> Status {
        if (s.iteration() == 1) {
          GEEPS_ASSIGN_OR_RETURN(MutableRows l, s.LocalAccess(1, {0, 1}));
          GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(l));
        } else {
          GEEPS_ASSIGN_OR_RETURN(ConstRows l, s.LocalRead(1, {0, 1}));
          GEEPS_RETURN_IF_ERROR(s.PostLocalRead(l));
        }
        return s.Clock();
      },
      3);
  ExpectMentions(st, {"iteration 1", "position 0", "recorded LocalRead(table 1, 2 rows",
                      "called LocalAccess(table 1, 2 rows"});
}

TEST(StepMismatchTest, ExtraClock) {
  Status st = RunDeviating([](Step& s) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {1, 2, 3}));
    GEEPS_RETURN_IF_ERROR(s.PostRead(r));
    GEEPS_ASSIGN_OR_RETURN(MutableRows u, s.PreUpdate(0, {1, 2, 3}));
    GEEPS_RETURN_IF_ERROR(s.Update(u));
    GEEPS_RETURN_IF_ERROR(s.Clock());
    return s.Clock();
  });
  ExpectMentions(st, {"iteration 2", "position 5", "recorded nothing", "called Clock()"});
}

TEST(StepMismatchTest, EarlyClock) {
  Status st = RunDeviating([](Step& s) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {1, 2, 3}));
    GEEPS_RETURN_IF_ERROR(s.PostRead(r));
    return s.Clock();
  });
  ExpectMentions(st, {"position 2", "recorded PreUpdate(table 0", "called Clock()"});
}

TEST(StepMismatchTest, IgnoredMismatchIsStillReported) {
  // The function drops the error and goes on with the right calls: the
  // mismatched call did nothing, the rest succeeds, Run reports the first
  // difference anyway.
  Status st = RunDeviating([](Step& s) -> Status {
    (void)s.Read(1, {1, 2, 3});
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {1, 2, 3}));
    GEEPS_RETURN_IF_ERROR(s.PostRead(r));
    GEEPS_ASSIGN_OR_RETURN(MutableRows u, s.PreUpdate(0, {1, 2, 3}));
    GEEPS_RETURN_IF_ERROR(s.Update(u));
    return s.Clock();
  });
  ExpectMentions(st, {"position 0", "called Read(table 1"});
}

TEST(StepMismatchTest, FunctionReturningEarly) {
  Status st = RunDeviating([](Step& s) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {1, 2, 3}));
    return s.PostRead(r);
  });
  ExpectMentions(st, {"position 2", "recorded PreUpdate(table 0", "called nothing"});
}

TEST(StepRecordingTest, BrokenInvariantsAreClearErrors) {
  Config c;
  c.tables = {{"a", 4, 2}};
  c.device = DeviceKind::kHost;
  auto run = [&](const Step::Body& prologue, const Step::Body& iteration) {
    auto cluster = StartOrDie(c);
    if (!cluster) return InternalError("no cluster");
    Step step(*cluster->worker(0), c);
    return step.Run(prologue, iteration, 1);
  };
  auto clock = [](Step& s) { return s.Clock(); };
  ExpectMentions(run([](Step& s) { return s.Clock(); }, clock),
                 {"Clock() at position 0 of the recorded prologue"});
  ExpectMentions(run(nullptr, [](Step&) { return Status::OK(); }), {"without calling Clock()"});
  ExpectMentions(run(nullptr,
                     [](Step& s) -> Status {
                       GEEPS_RETURN_IF_ERROR(s.Read(0, {0}).status());
                       return s.Clock();
                     }),
                 {"Clock() leaves Read(table 0, 1 row [0]", "open"});
  ExpectMentions(run([](Step& s) -> Status { return s.PreUpdate(0, {1}).status(); }, clock),
                 {"the prologue leaves PreUpdate(table 0", "open"});
  ExpectMentions(run(nullptr,
                     [](Step& s) -> Status {
                       GEEPS_RETURN_IF_ERROR(s.Clock());
                       return s.Read(0, {0}).status();
                     }),
                 {"after its Clock()"});
  // A GeePS error while recording comes back with the call's position.
  Status st = run(nullptr, [](Step& s) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ConstRows r, s.Read(0, {1, 1}));
    GEEPS_RETURN_IF_ERROR(s.PostRead(r));
    return s.Clock();
  });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("position 0, Read(table 0"), std::string::npos) << st;
  // Accesses outside a pass.
  auto cluster = StartOrDie(c);
  ASSERT_NE(cluster, nullptr);
  Step step(*cluster->worker(0), c);
  EXPECT_EQ(step.Read(0, {0}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(step.RunIteration().code(), StatusCode::kFailedPrecondition);
}

// A Step records every call itself: a worker that has recorded calls of its
// own, or has finished its virtual iteration, is refused at Start, naming
// what it found (it once failed later, naming an open read).
TEST(StepRecordingTest, AWorkerThatHasRecordedIsRefusedAtStart) {
  Config c;
  c.tables = {{"a", 4, 2}};
  c.device = DeviceKind::kHost;
  auto clock = [](Step& s) { return s.Clock(); };
  auto cluster = StartOrDie(c);
  ASSERT_NE(cluster, nullptr);
  GeePS& ps = *cluster->worker(0);
  auto read = ps.VirtualRead(0, {0, 1});
  ASSERT_OK(read.status());
  Step recorded(ps, c);
  ExpectMentions(recorded.Run(nullptr, clock, 1),
                 {"Step: worker 0 has already recorded 1 call(s)", "has recorded nothing"});
  ASSERT_OK(ps.VirtualPostRead(*read));
  ASSERT_OK(ps.VirtualClock());
  Step clocked(ps, c);
  ExpectMentions(clocked.Run(nullptr, clock, 1), {"call(s) and a VirtualClock"});
  // Its own virtual iteration, finished: the worker is past recording.
  auto other = StartOrDie(c);
  ASSERT_NE(other, nullptr);
  GeePS& done = *other->worker(0);
  ASSERT_OK(done.VirtualClock());
  ASSERT_OK(done.FinishVirtualIteration());
  Step finished(done, c);
  Status st = finished.Run(nullptr, clock, 1);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("Step: the virtual iteration is already finished"), std::string::npos)
      << st;
  EXPECT_OK(cluster->Shutdown());
  EXPECT_OK(other->Shutdown());
}

// A Config whose tables differ from the job's (a width of 4 where the job's
// is 8: 9 of 21 parameters were once never updated, silently) is refused
// before anything runs, naming the table, the field and both values.
// Step(ps) takes the job's tables.
TEST(StepConfigTest, AConfigUnlikeTheJobsIsRefusedNamingBothValues) {
  Config job;
  job.tables = {{"w", 7, 8}, {"loc", 3, 2, /*local=*/true}};
  job.device = DeviceKind::kHost;
  job.timeout = std::chrono::milliseconds(10000);
  struct Case {
    const char* what;
    void (*change)(Config*);
    std::vector<std::string> mentions;
  };
  const Case cases[] = {
      {"width",
       [](Config* c) { c->tables[0].row_width = 4; },
       {"table 0 ('w') has row_width 4 in the Config given to the Step, 8 in the job's"}},
      {"rows",
       [](Config* c) { c->tables[1].num_rows = 5; },
       {"table 1 ('loc') has num_rows 5", "3 in the job's"}},
      {"local",
       [](Config* c) { c->tables[1].local = false; },
       {"table 1 ('loc') has local false", "true in the job's"}},
      {"name", [](Config* c) { c->tables[0].name = "v"; }, {"has name 'v'", "'w' in the job's"}},
      {"count",
       [](Config* c) { c->tables.pop_back(); },
       {"has 1 tables, the job's has 2", "Step(ps)"}},
  };
  auto iteration = [](Step& s) -> Status {
    GEEPS_ASSIGN_OR_RETURN(MutableRows u, s.PreUpdate(0, RowRange(0, 7)));
    GEEPS_RETURN_IF_ERROR(s.Compute([&] {
      return s.ps().CopyFromHost(u.data, std::vector<float>(u.floats(), 1.0f).data(), u.floats());
    }));
    GEEPS_RETURN_IF_ERROR(s.Update(u));
    return s.Clock();
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    auto cluster = StartOrDie(job);
    ASSERT_NE(cluster, nullptr);
    GeePS& ps = *cluster->worker(0);
    Config given = job;
    k.change(&given);
    Step step(ps, given);
    const Status st = step.Run(nullptr, iteration, 2);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    for (const std::string& m : k.mentions)
      EXPECT_NE(st.message().find(m), std::string::npos) << "'" << m << "' not in: " << st;
    EXPECT_EQ(step.RunIteration().code(), StatusCode::kFailedPrecondition);
  }
  // The job's own tables: every parameter updated twice.
  auto cluster = StartOrDie(job);
  ASSERT_NE(cluster, nullptr);
  GeePS& ps = *cluster->worker(0);
  ASSERT_OK(Step(ps).Run(nullptr, iteration, 2));
  ASSERT_OK(ps.Sync());
  std::vector<float> rows(7 * 8);
  ASSERT_OK(ps.CopyRows(0, RowRange(0, 7), rows.data()));
  EXPECT_EQ(rows, std::vector<float>(7 * 8, 2.0f));
}

// ---- The trainer of docs/api.md ("A minimal trainer") --------------------------------
// tests/consumer/trainer.h holds it, as the install test builds it too.

TEST(StepDocTest, ApiDocTrainerRuns) {
  geeps::Config config = trainer::TrainerConfig(2);
  config.device = DeviceKind::kHost;
  auto cluster = StartOrDie(config);
  ASSERT_NE(cluster, nullptr);
  constexpr int kIters = 9;
  ASSERT_OK(cluster->RunWorkers(
      [&](geeps::GeePS& ps) { return trainer::Train(ps, cluster->config(), kIters); }));
  const double expect = trainer::ExpectedWeight(2, kIters);
  GeePS& ps = *cluster->worker(1);
  ASSERT_OK(ps.Sync());
  std::vector<float> out(2 * 10);
  ASSERT_OK(ps.CopyRows(0, {0, 784}, out.data()));
  for (float v : out) EXPECT_NEAR(v, expect, 1e-4);
}

// The text between the markers of trainer.h is the first code block of
// docs/api.md's "A minimal trainer", line for line, and at most 30 lines;
// the sentence after the main() block states both blocks' line counts.
TEST(StepDocTest, ApiDocShowsTheTestedTrainer) {
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  };
  const auto header = slurp(::geeps::testing::SourceFile("tests/consumer/trainer.h"));
  const auto doc = slurp(::geeps::testing::SourceFile("docs/api.md"));
  std::vector<std::string> code, shown;
  bool in = false;
  for (const auto& l : header) {
    if (l.find("---8<---") != std::string::npos) {
      in = true;
      continue;
    }
    if (l.find("--->8---") != std::string::npos) in = false;
    if (in) code.push_back(l);
  }
  size_t k = 0;
  while (k < doc.size() && doc[k] != "## A minimal trainer") ++k;
  while (k < doc.size() && doc[k] != "```cpp") ++k;
  for (++k; k < doc.size() && doc[k] != "```"; ++k) shown.push_back(doc[k]);
  ASSERT_FALSE(code.empty());
  EXPECT_EQ(shown, code) << "docs/api.md's trainer differs from tests/consumer/trainer.h";
  EXPECT_LE(code.size(), 30u);
  // The next block is main(); the sentence after it states both counts.
  std::vector<std::string> main_block;
  while (k < doc.size() && doc[k] != "```cpp") ++k;
  for (++k; k < doc.size() && doc[k] != "```"; ++k) main_block.push_back(doc[k]);
  ASSERT_FALSE(main_block.empty());
  EXPECT_EQ(main_block.front(), "int main() {");
  const std::string claim = "Counted: `Train` is " + std::to_string(code.size()) +
                            " lines and this `main()` " + std::to_string(main_block.size()) +
                            " more, " + std::to_string(code.size() + main_block.size()) +
                            " lines in all";
  bool stated = false;
  for (; k < doc.size() && !stated; ++k) stated = doc[k].find(claim) != std::string::npos;
  EXPECT_TRUE(stated) << "docs/api.md should say: " << claim;
}

}  // namespace
}  // namespace geeps
