// The memory manager inside a worker: for a fixed sequence and data, results
// are bitwise identical for every device memory budget from "everything
// fits" down to the least that works, with local data in host memory and
// every fetch/keep combination; budgets that are too small are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "geeps/embedded_cluster.h"
#include "host_view.h"
#include "test_util.h"

namespace geeps {
namespace {

using testing::HostView;
using testing::ReadBuffer;
using testing::WriteBuffer;

// Shape of one randomised (or fixed) workload.
struct Workload {
  uint64_t w_rows = 12;  // shared table W, width 5
  uint64_t a_rows = 40;  // local A: written (fetch=false, keep=true), read back (keep=false)
  uint32_t a_width = 16;
  std::vector<RowIndex> b_rows = {7, 2, 5};  // local B, scattered, fetch+keep
  uint64_t c_rows = 8;                       // local C: scratch (fetch=false, keep=false)
  int iterations = 5;
  int workers = 1;
  bool read_my_writes = false;
  // A second read and a second update of W over scattered rows (so that an
  // access can touch cache rows on both sides of the device budget).
  std::vector<RowIndex> Scattered(size_t n, int step) const {
    std::vector<RowIndex> rows;
    for (uint64_t k = 0; k < w_rows && rows.size() < n; ++k) {
      const RowIndex r = (k * step + 3) % w_rows;
      if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
    }
    return rows;
  }
};

Config MakeConfig(const Workload& w, uint64_t budget) {
  Config c;
  c.num_workers = w.workers;
  c.tables = {{"W", w.w_rows, 5},
              {"A", w.a_rows, w.a_width, true},
              {"B", 10, 3, true},
              {"C", w.c_rows, w.a_width, true}};
  c.device_memory_budget = budget;
  c.memory_guarantee = MemoryGuarantee::kNone;
  c.read_my_writes = w.read_my_writes;
  c.timeout = std::chrono::milliseconds(10000);
  return c;
}

struct Result {
  std::vector<float> w, b;
  double read_sum = 0;  // of every value read, in order
  WorkerStats stats;
};

// One worker's run; returns what it computed.
Status RunWorker(GeePS& ps, const Workload& wl, Result* out) {
  const auto w_rows = RowRange(0, wl.w_rows);
  GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, w_rows));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
  GEEPS_ASSIGN_OR_RETURN(LocalHandle a_out,
                         ps.VirtualLocalAccess(1, RowRange(0, wl.a_rows), false));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(a_out, true));
  GEEPS_ASSIGN_OR_RETURN(LocalHandle scratch,
                         ps.VirtualLocalAccess(3, RowRange(0, wl.c_rows), false));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(scratch, false));
  GEEPS_ASSIGN_OR_RETURN(LocalHandle b_acc, ps.VirtualLocalAccess(2, wl.b_rows, true));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(b_acc, true));
  const std::vector<RowIndex> w2_rows = wl.Scattered(5, 7), u2_rows = wl.Scattered(3, 5);
  GEEPS_ASSIGN_OR_RETURN(ReadHandle r2, ps.VirtualRead(0, w2_rows));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r2));
  GEEPS_ASSIGN_OR_RETURN(UpdateHandle u2, ps.VirtualPreUpdate(0, u2_rows));
  GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(u2));
  GEEPS_ASSIGN_OR_RETURN(LocalHandle a_in, ps.VirtualLocalAccess(1, RowRange(0, wl.a_rows), true));
  GEEPS_ASSIGN_OR_RETURN(UpdateHandle u, ps.VirtualPreUpdate(0, w_rows));
  GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(u));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(a_in, false));
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  GEEPS_RETURN_IF_ERROR(ps.StartIterations());
  const size_t a_floats = wl.a_rows * wl.a_width, c_floats = wl.c_rows * wl.a_width;
  std::vector<float> w(wl.w_rows * 5);
  for (int i = 0; i < wl.iterations; ++i) {
    GEEPS_ASSIGN_OR_RETURN(const float* wv, ps.Read(r));
    GEEPS_ASSIGN_OR_RETURN(w, ReadBuffer(ps, wv, w.size()));
    for (float v : w) out->read_sum += v;
    GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
    // A = f(W, i): every float written (fetch=false gives unspecified data).
    GEEPS_ASSIGN_OR_RETURN(float* a, ps.LocalAccess(a_out));
    std::vector<float> a_values(a_floats);
    for (size_t k = 0; k < a_floats; ++k)
      a_values[k] = w[k % w.size()] * 0.5f + static_cast<float>(k % 7 + i);
    GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, a, a_values));
    GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(a_out));
    // Scratch: written then read back within the access.
    GEEPS_ASSIGN_OR_RETURN(float* c, ps.LocalAccess(scratch));
    HostView c_view(ps, c, c_floats);
    for (size_t k = 0; k < c_floats; ++k) c_view[k] = static_cast<float>(k) * 0.25f;
    GEEPS_RETURN_IF_ERROR(c_view.Store());
    std::fill(c_view.values().begin(), c_view.values().end(), 0.0f);
    GEEPS_RETURN_IF_ERROR(c_view.Reload());
    float scratch_sum = 0;
    for (size_t k = 0; k < c_floats; ++k) scratch_sum += c_view[k];
    GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(scratch));
    // B accumulates across iterations (fetch and keep).
    GEEPS_ASSIGN_OR_RETURN(float* b, ps.LocalAccess(b_acc));
    GEEPS_ASSIGN_OR_RETURN(HostView b_view, HostView::Load(ps, b, wl.b_rows.size() * 3));
    for (size_t k = 0; k < b_view.size(); ++k)
      b_view[k] += static_cast<float>(k + 1) + w[k % w.size()];
    GEEPS_RETURN_IF_ERROR(b_view.Store());
    const std::vector<float> b_now = b_view.values();
    GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(b_acc));
    // Scattered rows of W: read (summed, weighted by position), then a
    // scattered update that depends on them.
    GEEPS_ASSIGN_OR_RETURN(const float* w2_buffer, ps.Read(r2));
    GEEPS_ASSIGN_OR_RETURN(const std::vector<float> w2,
                           ReadBuffer(ps, w2_buffer, w2_rows.size() * 5));
    double w2_sum = 0;
    for (size_t k = 0; k < w2.size(); ++k) w2_sum += w2[k] * static_cast<double>(k + 1);
    out->read_sum += w2_sum;
    GEEPS_RETURN_IF_ERROR(ps.PostRead(r2));
    GEEPS_ASSIGN_OR_RETURN(float* d2, ps.PreUpdate(u2));
    std::vector<float> deltas2(u2_rows.size() * 5);
    for (size_t k = 0; k < deltas2.size(); ++k)
      deltas2[k] = static_cast<float>(w2_sum * 1e-4) + 0.003f * static_cast<float>(k + i);
    GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, d2, deltas2));
    GEEPS_RETURN_IF_ERROR(ps.Update(u2));
    // Read A back; the update depends on A, B and the scratch.
    GEEPS_ASSIGN_OR_RETURN(float* a2_buffer, ps.LocalAccess(a_in));
    GEEPS_ASSIGN_OR_RETURN(const std::vector<float> a2, ReadBuffer(ps, a2_buffer, a_floats));
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
    std::vector<float> deltas(w.size());
    for (size_t k = 0; k < w.size(); ++k)
      deltas[k] =
          0.01f * a2[(k * 3) % a_floats] - 0.001f * b_now[k % b_now.size()] + 1e-4f * scratch_sum;
    GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, d, deltas));
    // keep=false: may be dropped.
    GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, a2_buffer, std::vector<float>(a_floats, -1.0f)));
    GEEPS_RETURN_IF_ERROR(ps.Update(u));
    GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(a_in));
    GEEPS_RETURN_IF_ERROR(ps.Clock());
  }
  GEEPS_RETURN_IF_ERROR(ps.Sync());
  out->w.resize(w.size());
  GEEPS_RETURN_IF_ERROR(ps.CopyRows(0, w_rows, out->w.data()));
  out->b.resize(wl.b_rows.size() * 3);
  GEEPS_RETURN_IF_ERROR(ps.CopyRows(2, wl.b_rows, out->b.data()));
  out->stats = ps.GetStats();
  return Status::OK();
}

StatusOr<Result> RunJob(const Workload& wl, uint64_t budget,
                        MemoryGuarantee g = MemoryGuarantee::kNone) {
  Config c = MakeConfig(wl, budget);
  c.memory_guarantee = g;
  auto cluster = EmbeddedCluster::Start(c);
  if (!cluster.ok()) return cluster.status();
  std::vector<Result> results(wl.workers);
  GEEPS_RETURN_IF_ERROR(
      (*cluster)->RunWorkers([&](GeePS& ps) { return RunWorker(ps, wl, &results[ps.rank()]); }));
  return results[0];
}

// A number field of a flat JSON object (the plan's top-level fields).
uint64_t JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << key << " in " << json;
    return 0;
  }
  return std::stoull(json.substr(at + key.size() + 3));
}

bool SameBits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// The least budget with which the workload runs (a run either starts or is
// refused, and more budget never hurts).
uint64_t LeastBudget(const Workload& wl, MemoryGuarantee g = MemoryGuarantee::kNone) {
  uint64_t lo = 1, hi = 1 << 22;  // lo fails (too small), hi works
  while (hi - lo > 1) {
    const uint64_t mid = (lo + hi) / 2;
    auto got = RunJob(wl, mid, g);
    // Only a refusal may end a run: anything else (a wait past its deadline)
    // is a failure of the memory manager.
    EXPECT_TRUE(got.ok() || got.status().code() == StatusCode::kResourceExhausted)
        << "budget " << mid << ": " << got.status();
    (got.ok() ? hi : lo) = mid;
  }
  return hi;
}

// Finds the least budget that works (binary search: a run either starts or
// is refused), then runs budgets from there up to "everything fits"; every
// run must match the unmanaged run bit for bit.
void SweepBudgets(const Workload& wl, int min_runs, MemoryGuarantee g = MemoryGuarantee::kNone) {
  auto reference = RunJob(wl, 0);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const uint64_t hi = LeastBudget(wl, g), lo = hi - 1;
  auto refused = RunJob(wl, lo, g);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("budget"), std::string::npos) << refused.status();
  int runs = 0, swapped = 0;
  std::vector<uint64_t> budgets;
  for (int k = 0; k < 8; ++k) budgets.push_back(hi + hi * k / 10);
  budgets.push_back(1 << 22);
  for (uint64_t budget : budgets) {
    auto got = RunJob(wl, budget, g);
    ASSERT_TRUE(got.ok()) << "budget " << budget << ": " << got.status();
    ++runs;
    EXPECT_TRUE(SameBits(got->w, reference->w)) << "budget " << budget;
    EXPECT_TRUE(SameBits(got->b, reference->b)) << "budget " << budget;
    EXPECT_EQ(got->read_sum, reference->read_sum) << "budget " << budget;
    EXPECT_LE(got->stats.device_bytes_in_use, budget);
    EXPECT_FALSE(got->stats.memory_plan_json.empty());
    if (got->stats.bytes_host_to_device > 0) ++swapped;
  }
  EXPECT_GE(runs, min_runs);
  EXPECT_GT(swapped, 0) << "no budget put local data in host memory";
}

TEST(MemoryManagerTest, ResultsAreBitwiseIdenticalForEveryBudget) { SweepBudgets(Workload{}, 6); }

// With double buffering the alloc thread swaps local data in ahead of the
// application and the reclaim thread writes it back behind it.
TEST(MemoryManagerTest, PrefetchedSwapsAreBitwiseIdenticalToo) {
  SweepBudgets(Workload{}, 6, MemoryGuarantee::kDoubleBuffering);
  Workload wl;
  wl.workers = 2;
  wl.iterations = 8;
  SweepBudgets(wl, 6, MemoryGuarantee::kDoubleBuffering);
}

TEST(MemoryManagerTest, TwoWorkersUnderBspToo) {
  Workload wl;
  wl.workers = 2;
  SweepBudgets(wl, 6);
}

TEST(MemoryManagerTest, BudgetBelowTheFixedPartIsAClearError) {
  auto got = RunJob(Workload{}, 64);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(got.status().message().find("64 bytes"), std::string::npos) << got.status();
}

TEST(MemoryManagerTest, RequiredLevelThatTheBudgetCannotMeetIsAClearError) {
  Workload wl;
  const uint64_t least = LeastBudget(wl);
  const uint64_t least_double = LeastBudget(wl, MemoryGuarantee::kDoubleBuffering);
  const uint64_t least_local = LeastBudget(wl, MemoryGuarantee::kAllLocalOnDevice);
  EXPECT_LE(least, least_double);
  EXPECT_LT(least_double, least_local);
  // At the least budget, local data lives in host memory and is swapped.
  auto swapped = RunJob(wl, least);
  ASSERT_OK(swapped.status());
  EXPECT_GT(swapped->stats.bytes_host_to_device, 0);
  EXPECT_GT(swapped->stats.bytes_device_to_host, 0);
  EXPECT_GT(swapped->stats.pool_high_water, 0u);
  // Asking that all local data stay on the device is then a clear error.
  auto refused = RunJob(wl, least, MemoryGuarantee::kAllLocalOnDevice);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("bytes"), std::string::npos) << refused.status();
  auto local = RunJob(wl, least_local, MemoryGuarantee::kAllLocalOnDevice);
  ASSERT_OK(local.status());
  EXPECT_EQ(JsonNumber(local->stats.memory_plan_json, "local_device_bytes"),
            JsonNumber(local->stats.memory_plan_json, "local_total_bytes"));
  // The whole parameter cache on the device takes more again; with it,
  // nothing is copied between host and device memory at all.
  const uint64_t least_cache = LeastBudget(wl, MemoryGuarantee::kWholeCacheOnDevice);
  EXPECT_LT(least_local, least_cache);
  auto cached = RunJob(wl, least_cache, MemoryGuarantee::kWholeCacheOnDevice);
  ASSERT_OK(cached.status());
  EXPECT_EQ(cached->stats.bytes_host_to_device, 0);
  EXPECT_EQ(cached->stats.bytes_device_to_host, 0);
  auto short_of_cache = RunJob(wl, least_cache - 1, MemoryGuarantee::kWholeCacheOnDevice);
  ASSERT_FALSE(short_of_cache.ok());
  EXPECT_EQ(short_of_cache.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(short_of_cache.status().message().find("kWholeCacheOnDevice"), std::string::npos)
      << short_of_cache.status();
}

// Below the whole-cache level, cached parameter rows (and their oplog rows)
// live in pinned host memory: the first-accessed rows stay on the device,
// the rest are copied through the pool at each Read and Update, and the
// results do not change. Covers accesses whose rows are on both sides.
TEST(MemoryManagerTest, CacheRowsInHostMemoryGiveTheSameResults) {
  for (bool rmw : {false, true}) {
    for (int workers : {1, 2}) {
      Workload wl;
      wl.read_my_writes = rmw;
      wl.workers = workers;
      wl.w_rows = 24;
      SCOPED_TRACE("read_my_writes " + std::to_string(rmw) + ", workers " +
                   std::to_string(workers));
      auto reference = RunJob(wl, 0);
      ASSERT_OK(reference.status());
      const uint64_t least_local = LeastBudget(wl, MemoryGuarantee::kAllLocalOnDevice);
      const uint64_t least_cache = LeastBudget(wl, MemoryGuarantee::kWholeCacheOnDevice);
      ASSERT_LT(least_local, least_cache);
      int partial = 0, none = 0;
      const uint64_t least = LeastBudget(wl);
      for (uint64_t budget = least; budget <= least_cache;
           budget += (least_cache - least) / 7 + 1) {
        auto got = RunJob(wl, budget);
        ASSERT_OK(got.status());
        const std::string& plan = got->stats.memory_plan_json;
        const uint64_t on_device = JsonNumber(plan, "cache_device_bytes");
        const uint64_t total = JsonNumber(plan, "cache_total_bytes");
        ASSERT_LE(on_device, total);
        if (on_device == 0) ++none;
        if (on_device > 0 && on_device < total) ++partial;
        EXPECT_TRUE(SameBits(got->w, reference->w)) << "budget " << budget << "\n" << plan;
        EXPECT_TRUE(SameBits(got->b, reference->b)) << "budget " << budget;
        EXPECT_EQ(got->read_sum, reference->read_sum) << "budget " << budget;
        EXPECT_LE(got->stats.device_bytes_in_use, budget);
        if (on_device < total) EXPECT_GT(got->stats.bytes_host_to_device, 0) << plan;
      }
      EXPECT_GT(partial, 0) << "no budget split the cache between device and host";
      EXPECT_GT(none, 0) << "no budget put the whole cache in host memory";
    }
  }
}

TEST(MemoryManagerTest, StatsFileHoldsThePlan) {
  Workload wl;
  Config c = MakeConfig(wl, 1 << 20);
  c.stats_file = ::testing::TempDir() + "geeps-stats-%r.json";
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  Result r;
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) { return RunWorker(ps, wl, &r); }));
  ASSERT_OK((*cluster)->Shutdown());
  std::ifstream in(::testing::TempDir() + "geeps-stats-0.json");
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"memory_plan\":{"), std::string::npos) << json;
  EXPECT_NE(json.find("\"pool_bytes\":"), std::string::npos) << json;
  EXPECT_NE(json.find("\"memory_stall_by_access\":{"), std::string::npos) << json;
}

// Random table shapes and row sets: the invariants hold for each.
TEST(MemoryManagerTest, RandomWorkloadsMatchTheUnmanagedRun) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 6; ++trial) {
    Workload wl;
    wl.w_rows = 3 + rng() % 20;
    wl.a_rows = 5 + rng() % 60;
    wl.a_width = 1 + rng() % 33;
    wl.c_rows = 1 + rng() % 10;
    wl.b_rows.clear();
    for (RowIndex r = 0; r < 10; ++r)
      if (rng() % 2) wl.b_rows.push_back(r);
    if (wl.b_rows.empty()) wl.b_rows.push_back(rng() % 10);
    std::shuffle(wl.b_rows.begin(), wl.b_rows.end(), rng);
    wl.iterations = 2 + rng() % 3;
    SCOPED_TRACE("trial " + std::to_string(trial));
    SweepBudgets(wl, 3, trial % 2 ? MemoryGuarantee::kDoubleBuffering : MemoryGuarantee::kNone);
  }
}

}  // namespace
}  // namespace geeps

namespace geeps {
namespace {

// The compute emulation: every close of an access waits the configured
// time on the application thread (a lower bound, so not flaky), and an
// out-of-range value is refused.
TEST(MemoryManagerTest, EmulatedComputeDelaysEveryClose) {
  Workload wl;
  wl.iterations = 3;
  Config c = MakeConfig(wl, 0);
  c.emulated_compute_per_access = std::chrono::milliseconds(4);
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  Result r;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) { return RunWorker(ps, wl, &r); }));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  // Per iteration: 2 reads, 2 updates and 4 local accesses close.
  EXPECT_GE(elapsed, std::chrono::milliseconds(4 * 8 * wl.iterations));
  c.emulated_compute_per_access = std::chrono::seconds(11);
  auto refused = EmbeddedCluster::Start(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("emulated_compute_per_access"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace geeps

namespace geeps {
namespace {

// ---- Read-only local accesses ------------------------------------------------

constexpr uint64_t kLocalRows = 64;
constexpr uint32_t kLocalWidth = 16;
constexpr size_t kLocalFloats = kLocalRows * kLocalWidth;
constexpr int64_t kLocalBytes = static_cast<int64_t>(kLocalFloats * sizeof(float));

// A prologue fills local table L once (fetch=false, keep=true); each
// iteration reads W, then reads all of L back in kPieces accesses, recorded
// as read-only (VirtualLocalRead) or as plain ones (fetch and keep) that do
// not write either, and checks what it read. In pieces, so that the least
// budget keeps L in host memory even with double buffering.
constexpr int kPieces = 4;

StatusOr<WorkerStats> RunLocalReads(uint64_t budget, bool read_only, int iterations,
                                    MemoryGuarantee guarantee) {
  Config c;
  c.tables = {{"W", 4, 4}, {"L", kLocalRows, kLocalWidth, true}};
  c.device_memory_budget = budget;
  c.memory_guarantee = guarantee;
  c.timeout = std::chrono::milliseconds(10000);
  GEEPS_ASSIGN_OR_RETURN(auto cluster, EmbeddedCluster::Start(c));
  GeePS& ps = *cluster->worker(0);
  const uint64_t piece_rows = kLocalRows / kPieces;
  const size_t piece_floats = piece_rows * kLocalWidth;
  GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, RowRange(0, 4)));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
  std::vector<LocalHandle> reads(kPieces), fills(kPieces);
  for (int p = 0; p < kPieces; ++p) {
    const std::vector<RowIndex> rows = RowRange(p * piece_rows, piece_rows);
    if (read_only) {
      GEEPS_ASSIGN_OR_RETURN(reads[p], ps.VirtualLocalRead(1, rows));
    } else {
      GEEPS_ASSIGN_OR_RETURN(reads[p], ps.VirtualLocalAccess(1, rows, true));
    }
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(reads[p], true));
  }
  GEEPS_ASSIGN_OR_RETURN(UpdateHandle u, ps.VirtualPreUpdate(0, RowRange(0, 4)));
  GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(u));
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  for (int p = 0; p < kPieces; ++p) {  // the prologue
    GEEPS_ASSIGN_OR_RETURN(fills[p],
                           ps.VirtualLocalAccess(1, RowRange(p * piece_rows, piece_rows), false));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(fills[p], true));
  }
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  GEEPS_RETURN_IF_ERROR(ps.StartIterations());
  std::vector<float> values(kLocalFloats);
  for (size_t k = 0; k < kLocalFloats; ++k) values[k] = static_cast<float>(k) + 0.5f;
  for (int p = 0; p < kPieces; ++p) {
    GEEPS_ASSIGN_OR_RETURN(float* f, ps.LocalAccess(fills[p]));
    GEEPS_RETURN_IF_ERROR(
        testing::WriteBuffer(ps, f,
                             std::vector<float>(values.begin() + p * piece_floats,
                                                values.begin() + (p + 1) * piece_floats)));
    GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(fills[p]));
  }
  for (int i = 0; i < iterations; ++i) {
    GEEPS_RETURN_IF_ERROR(ps.Read(r).status());
    GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
    for (int p = 0; p < kPieces; ++p) {
      const float* rows = nullptr;
      if (read_only) {
        GEEPS_ASSIGN_OR_RETURN(rows, ps.LocalRead(reads[p]));
      } else {
        GEEPS_ASSIGN_OR_RETURN(rows, ps.LocalAccess(reads[p]));
      }
      GEEPS_ASSIGN_OR_RETURN(std::vector<float> seen, testing::ReadBuffer(ps, rows, piece_floats));
      if (!std::equal(seen.begin(), seen.end(), values.begin() + p * piece_floats))
        return InternalError("iteration " + std::to_string(i) + ": local rows of piece " +
                             std::to_string(p) + " changed");
      GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(reads[p]));
    }
    GEEPS_RETURN_IF_ERROR(ps.PreUpdate(u).status());
    GEEPS_RETURN_IF_ERROR(ps.Update(u));
    GEEPS_RETURN_IF_ERROR(ps.Clock());
  }
  // After Shutdown, which waits for the swap threads' last write-backs.
  GEEPS_RETURN_IF_ERROR(cluster->Shutdown());
  return ps.GetStats();
}

// At the least budget that runs, L lives in host memory: a read-only access
// fetches it like any other but writes nothing back, where the same access
// recorded as read-write copies all of it back at every close.
void ExpectReadOnlyWritesNothingBack(MemoryGuarantee guarantee) {
  constexpr int kIterations = 4;
  uint64_t budget = 1024;
  StatusOr<WorkerStats> ro = ResourceExhaustedError("none tried");
  for (; budget < (1u << 20); budget += 256) {
    ro = RunLocalReads(budget, true, kIterations, guarantee);
    if (ro.status().code() != StatusCode::kResourceExhausted) break;
  }
  ASSERT_OK(ro.status());
  auto rw = RunLocalReads(budget, false, kIterations, guarantee);
  ASSERT_OK(rw.status());
  SCOPED_TRACE("budget " + std::to_string(budget));
  // (W's rows may be in host memory too: their bytes are the same in both.)
  ASSERT_GE(ro->bytes_host_to_device, kIterations * kLocalBytes)
      << "L is not in host memory at this budget";
  if (guarantee == MemoryGuarantee::kNone) {
    EXPECT_EQ(rw->bytes_host_to_device, ro->bytes_host_to_device);
  } else {
    // The swap threads may prefetch pieces of an iteration that never
    // comes (how far ahead depends on timing; a read-only run, with no
    // write-backs to wait for, can get further): at most one iteration's.
    const int64_t apart = std::abs(rw->bytes_host_to_device - ro->bytes_host_to_device);
    EXPECT_LE(apart, kLocalBytes);
  }
  EXPECT_GE(ro->bytes_device_to_host, kLocalBytes);  // the prologue's fill
  EXPECT_LT(ro->bytes_device_to_host, 2 * kLocalBytes);
  EXPECT_EQ(rw->bytes_device_to_host - ro->bytes_device_to_host, kIterations * kLocalBytes);
  // Without a budget (L on the device) the read-only access reads the same.
  ASSERT_OK(RunLocalReads(0, true, kIterations, guarantee).status());
}

TEST(MemoryManagerTest, AReadOnlyLocalAccessWritesNothingBack) {
  ExpectReadOnlyWritesNothingBack(MemoryGuarantee::kNone);
}

// The same through the swap threads (prefetch and write-back behind the
// application).
TEST(MemoryManagerTest, AReadOnlyLocalAccessWritesNothingBackWhenPrefetched) {
  ExpectReadOnlyWritesNothingBack(MemoryGuarantee::kDoubleBuffering);
}

// LocalAccess of a read-only access, or LocalRead of a read-write one, is a
// usage error that changes nothing: the right call then works.
TEST(MemoryManagerTest, LocalReadAndLocalAccessAreNotInterchangeable) {
  Config c;
  c.tables = {{"L", 8, 2, true}, {"M", 8, 2, true}};
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  GeePS& ps = *(*cluster)->worker(0);
  auto ro = ps.VirtualLocalRead(0, RowRange(0, 8));
  ASSERT_OK(ro.status());
  ASSERT_OK(ps.VirtualPostLocalAccess(*ro, true));
  auto rw = ps.VirtualLocalAccess(1, RowRange(0, 8), true);
  ASSERT_OK(rw.status());
  ASSERT_OK(ps.VirtualPostLocalAccess(*rw, true));
  ASSERT_OK(ps.VirtualClock());
  ASSERT_OK(ps.FinishVirtualIteration());
  ASSERT_OK(ps.StartIterations());
  auto wrong = ps.LocalAccess(*ro);
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("use LocalRead"), std::string::npos) << wrong.status();
  ASSERT_OK(ps.LocalRead(*ro).status());
  ASSERT_OK(ps.PostLocalAccess(*ro));
  auto wrong2 = ps.LocalRead(*rw);
  EXPECT_EQ(wrong2.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong2.status().message().find("use LocalAccess"), std::string::npos)
      << wrong2.status();
  ASSERT_OK(ps.LocalAccess(*rw).status());
  ASSERT_OK(ps.PostLocalAccess(*rw));
  ASSERT_OK(ps.Clock());
}

}  // namespace
}  // namespace geeps
