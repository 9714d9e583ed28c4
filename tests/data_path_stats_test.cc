// The data path's per-stage byte counters (WorkerStats::data_path,
// ShardStats' apply/fold/push_copy bytes): for a worker that reads and
// updates the same V bytes every clock, each counter divided by V is that
// stage's number of passes, which docs/architecture.md ("Passes over the
// bytes") states per path.
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

constexpr uint64_t kRows = 32;
constexpr uint32_t kWidth = 16;
constexpr int64_t kV = kRows * kWidth * sizeof(float);
constexpr int kIterations = 6;

struct JobStats {
  WorkerStats worker;
  ShardStats shard;
};

// Messages in separate frames unless `pack_below_bytes` is given: most of
// these tests count the passes of pushes sent from the rows themselves. The
// device is the suite's (kAuto) unless a test needs the host's.
// `in_place`: Config::send_updates_in_place.
JobStats RunOne(bool read_my_writes, uint64_t device_memory_budget = 0,
                uint64_t pipeline_part_bytes = 0, bool zeroed = true, uint64_t pack_below_bytes = 0,
                DeviceKind device = DeviceKind::kAuto, bool in_place = false) {
  Config c;
  c.send_updates_in_place = in_place;
  c.device = device;
  c.pipeline_part_bytes = pipeline_part_bytes;
  c.pack_below_bytes = pack_below_bytes;
  c.device_memory_budget = device_memory_budget;
  c.num_workers = 1;
  c.tables = {{"W", kRows, kWidth}};
  c.read_my_writes = read_my_writes;
  c.timeout = std::chrono::milliseconds(10000);
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  JobStats out;
  if (!cluster.ok()) return out;
  Status st = (*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    const auto rows = RowRange(0, kRows);
    GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                           testing::RecordReadUpdateClock(ps, 0, rows, zeroed));
    const ReadHandle r = h.read;
    const UpdateHandle u = h.update;
    const std::vector<float> ones(kRows * kWidth, 1.0f);
    std::vector<float> seen(kRows * kWidth);
    for (int i = 0; i < kIterations; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(r));
      // Every update arrived once, whether its buffer was zeroed or not.
      GEEPS_RETURN_IF_ERROR(ps.CopyToHost(seen.data(), w, seen.size()));
      if (seen.front() != static_cast<float>(i) || seen.back() != static_cast<float>(i))
        return InternalError("clock " + std::to_string(i) + " read " + std::to_string(seen[0]));
      GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, ones.data(), ones.size()));
      GEEPS_RETURN_IF_ERROR(ps.Update(u));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    GEEPS_RETURN_IF_ERROR(ps.Sync());
    out.worker = ps.GetStats();
    return Status::OK();
  });
  EXPECT_TRUE(st.ok()) << st;
  // The shard may still be sending the last push: its counters are read
  // once it has stopped (each push counts its bytes, then itself).
  const Status down = (*cluster)->Shutdown();
  EXPECT_TRUE(down.ok()) << down;
  out.shard = (*cluster)->GetShardStats(0);
  return out;
}

// Bytes zeroed, for `per_clock` bytes that must be zeroed each clock. A
// Read or Sync that waits zeroes the update buffers ZeroMQ has released ahead
// of the next PreUpdate (worker_wait.cc): after the last clock, Sync's wait
// may zero one that no PreUpdate uses (at most an update's buffer and its
// resend copy), depending on when ZeroMQ let go of it.
void ExpectZeroed(int64_t zero, int64_t per_clock) {
  EXPECT_GE(zero, kIterations * per_clock);
  EXPECT_LE(zero, kIterations * per_clock + 2 * kV);
}

// The passes of a direct update and a read in place. `host_alias`: whether
// device memory has a host alias (the host backend's normal mode, which only
// the host device has: that case picks kHost itself), or not (CUDA; the host
// backend's no-alias mode, GEEPS_HOST_NO_ALIAS=1, set here either way so
// that both cases run in every test mode). `in_place`:
// Config::send_updates_in_place (only with a host alias does it matter).
void ExpectDirectUpdatesAndReadsInPlace(bool host_alias, bool in_place) {
  testing::ScopedEnv mode("GEEPS_HOST_NO_ALIAS", host_alias ? "0" : "1");
  const JobStats run = RunOne(/*read_my_writes=*/false, 0, 0, /*zeroed=*/true, 0,
                              host_alias ? DeviceKind::kHost : DeviceKind::kAuto, in_place);
  const DataPathBytes& p = run.worker.data_path;
  ASSERT_EQ(run.worker.updates_direct, kIterations);
  ASSERT_EQ(run.worker.reads_in_place, kIterations);
  EXPECT_EQ(p.gather, 0);
  EXPECT_EQ(p.scatter_add, 0);
  ExpectZeroed(p.zero, kV);  // PreUpdate's buffer; the oplog stays clean
  // Sent in place (with a host alias) the update leaves from its buffer
  // itself, with no copy into a slot; otherwise it is copied into the slot
  // once.
  EXPECT_EQ(p.to_slot, host_alias && in_place ? 0 : kIterations * kV);
  EXPECT_EQ(p.pack, 0);                           // consecutive rows leave as they are
  EXPECT_EQ(p.app_copies, 2 * kIterations * kV);  // the read out, the deltas in
  // Every push installs V once (one part, no own deltas to re-add).
  EXPECT_EQ(p.install, run.worker.pushes_installed * kV);
  EXPECT_GE(run.worker.pushes_installed, kIterations);
  // The shard adds each update once (straight into the rows, or into the
  // clock's buffer and folded later) and sends every push straight from its
  // rows (the subscribed rows are consecutive); it copies rows only aside,
  // when an update comes while ZeroMQ still holds the last push (at most
  // once per update).
  EXPECT_EQ(run.shard.apply_bytes, kIterations * kV);
  EXPECT_LE(run.shard.fold_bytes, kIterations * kV);
  EXPECT_EQ(run.shard.push_zero_copy_bytes, run.shard.pushes_sent * kV);
  EXPECT_LE(run.shard.push_copy_bytes, kIterations * kV);
}

TEST(DataPathStatsTest, DirectUpdatesAndReadsInPlaceSkipTheirPasses) {
  ExpectDirectUpdatesAndReadsInPlace(/*host_alias=*/true, /*in_place=*/true);
}

// By default (isolated) the host backend copies a direct update into its
// slot at Update, as CUDA does.
TEST(DataPathStatsTest, ByDefaultADirectUpdateIsCopiedIntoItsSlotOnce) {
  ExpectDirectUpdatesAndReadsInPlace(/*host_alias=*/true, /*in_place=*/false);
}

TEST(DataPathStatsTest, WithoutAHostAliasADirectUpdateIsCopiedIntoItsSlotOnce) {
  ExpectDirectUpdatesAndReadsInPlace(/*host_alias=*/false, /*in_place=*/true);
}

// Under Config::pack_below_bytes (the default's 16 KiB; V is 2 KiB here)
// each message is copied into one frame: the update once on the worker
// (counted as packed), the push once on the shard, nothing sent from the
// buffers or rows themselves; the sums stay exact (RunOne checks each read).
TEST(DataPathStatsTest, SmallMessagesArePackedWithOneCopyEach) {
  const JobStats run =
      RunOne(/*read_my_writes=*/false, 0, 0, /*zeroed=*/true, Config().pack_below_bytes);
  const DataPathBytes& p = run.worker.data_path;
  ASSERT_EQ(run.worker.updates_direct, kIterations);
  EXPECT_EQ(p.pack, kIterations * kV);
  EXPECT_EQ(run.shard.apply_bytes, kIterations * kV);
  EXPECT_EQ(run.shard.push_zero_copy_bytes, 0);
  EXPECT_EQ(run.shard.push_copy_bytes, run.shard.pushes_sent * kV);
  EXPECT_EQ(p.install, run.worker.pushes_installed * kV);
}

// A push in parts (pipelined, 8 parts per clock here) is written into the
// cache part by part as it arrives: one pass, as a push in one part, not a
// copy into a staging buffer and another out of it.
TEST(DataPathStatsTest, APushInPartsIsInstalledInOnePass) {
  const JobStats run = RunOne(/*read_my_writes=*/false, 0, /*pipeline_part_bytes=*/kV / 8);
  const DataPathBytes& p = run.worker.data_path;
  ASSERT_GT(run.shard.early_push_parts, 0);
  ASSERT_EQ(run.worker.reads_in_place, kIterations);
  EXPECT_EQ(p.install, run.worker.pushes_installed * kV);
  EXPECT_GE(run.worker.pushes_installed, kIterations);
  EXPECT_EQ(run.shard.apply_bytes, kIterations * kV);
}

// A buffer from the memory manager's pool may go to another access while
// ZeroMQ would still read it: its update is copied into the slot first (as
// on a GPU, where the host cannot read device memory).
TEST(DataPathStatsTest, APooledUpdateBufferIsCopiedIntoTheSlot) {
  const JobStats run = RunOne(/*read_my_writes=*/false, /*device_memory_budget=*/1 << 20);
  const DataPathBytes& p = run.worker.data_path;
  ASSERT_EQ(run.worker.updates_direct, kIterations);
  EXPECT_EQ(p.to_slot, kIterations * kV);
  ExpectZeroed(p.zero, kV);
  EXPECT_EQ(run.shard.apply_bytes, kIterations * kV);
}

// Runs `clocks` clocks of `workers` workers over one table, each writing
// i + 1 into every element of its PreUpdate buffer at clock i; `check(i,
// seen)` is given what PreUpdate returned at clock i. Worker 1 lags, so
// worker 0's Reads wait (and zero ahead meanwhile).
void RunPreUpdates(int workers, int clocks, bool zeroed, bool in_place,
                   const std::function<Status(int, const std::vector<float>&)>& check) {
  Config c;
  c.send_updates_in_place = in_place;
  c.num_workers = workers;
  c.tables = {{"W", kRows, kWidth}};
  c.timeout = std::chrono::milliseconds(10000);
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                           testing::RecordReadUpdateClock(ps, 0, RowRange(0, kRows), zeroed));
    std::vector<float> seen(kRows * kWidth), mine(kRows * kWidth);
    for (int i = 0; i < clocks; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(h.read));
      (void)w;
      GEEPS_RETURN_IF_ERROR(ps.PostRead(h.read));
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.update));
      GEEPS_RETURN_IF_ERROR(ps.CopyToHost(seen.data(), d, seen.size()));
      GEEPS_RETURN_IF_ERROR(check(i, seen));
      std::fill(mine.begin(), mine.end(), static_cast<float>(i + 1));
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, mine.data(), mine.size()));
      GEEPS_RETURN_IF_ERROR(ps.Update(h.update));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
      if (ps.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return Status::OK();
  }));
}

// An update sent in place from its buffer is zeroed again, by the thread
// that waits for the next push or by PreUpdate; a copied one by PreUpdate:
// every PreUpdate returns zeros, although the previous clock filled the
// same buffer.
TEST(DataPathStatsTest, EveryPreUpdateBufferIsZero) {
  for (bool in_place : {true, false})
    RunPreUpdates(2, 20, /*zeroed=*/true, in_place, [](int i, const std::vector<float>& seen) {
      for (float v : seen)
        if (v != 0.0f)
          return InternalError("clock " + std::to_string(i) + ": PreUpdate returned " +
                               std::to_string(v) + ", not a zeroed buffer");
      return Status::OK();
    });
}

// An update recorded with zeroed=false: PreUpdate hands its buffer back
// as the last clock left it, so nothing is zeroed (the application writes
// every element), and the sums are what they are with zeroing.
TEST(DataPathStatsTest, AnUpdateRecordedUnzeroedSkipsTheZeroingPass) {
  for (bool rmw : {false, true}) {
    SCOPED_TRACE(rmw ? "read_my_writes" : "direct");
    const JobStats run = RunOne(rmw, 0, 0, /*zeroed=*/false);
    const DataPathBytes& p = run.worker.data_path;
    // With read_my_writes the oplog is still zeroed each clock (it sums
    // the clock's updates); PreUpdate's buffer is not.
    if (rmw) {
      ExpectZeroed(p.zero, kV);
    } else {
      EXPECT_EQ(p.zero, 0);
      EXPECT_EQ(run.worker.updates_direct, kIterations);
    }
    EXPECT_EQ(run.shard.apply_bytes, kIterations * kV);
  }
}

// ... and the buffer is not zeroed: here (one buffer, sent in place) the
// next PreUpdate returns what the application wrote the clock before,
// which is never all zero (1, 2, ...).
TEST(DataPathStatsTest, AnUnzeroedPreUpdateBufferIsNotZeroed) {
  RunPreUpdates(
      1, 5, /*zeroed=*/false, /*in_place=*/true, [](int i, const std::vector<float>& seen) {
        const bool all_zero =
            std::all_of(seen.begin(), seen.end(), [](float v) { return v == 0.0f; });
        if (i > 0 && all_zero)
          return InternalError("clock " + std::to_string(i) + ": PreUpdate zeroed the buffer");
        return Status::OK();
      });
}

TEST(DataPathStatsTest, ReadMyWritesGathersAndGoesThroughTheOplog) {
  const JobStats run = RunOne(/*read_my_writes=*/true);
  const DataPathBytes& p = run.worker.data_path;
  ASSERT_EQ(run.worker.updates_direct, 0);
  ASSERT_EQ(run.worker.reads_in_place, 0);
  EXPECT_EQ(p.gather, kIterations * kV);
  EXPECT_EQ(p.scatter_add, 2 * kIterations * kV);  // into the oplog and the cache
  EXPECT_EQ(p.to_slot, kIterations * kV);
  ExpectZeroed(p.zero, 2 * kV);  // PreUpdate's buffer and the oplog
  EXPECT_GE(p.install, run.worker.pushes_installed * kV);
  EXPECT_EQ(run.shard.apply_bytes, kIterations * kV);
}

}  // namespace
}  // namespace geeps
