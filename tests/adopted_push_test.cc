// Pushes kept where they arrived (docs/architecture.md): on the host
// backend a worker keeps a push of at least AdoptedRows::kMinBytes (1 MiB) in the
// message that brought it, mapped into the device (MapHostMemory), instead
// of copying it into the cache. In-place reads return the message's rows;
// every other reader of the cache (a gathered read, CopyRows) first copies
// them in. These tests check the device's mapping, that the pass is gone,
// and that every reader sees the same values either way.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/adopted_rows.h"
#include "client/comm_channel.h"
#include "device/device.h"
#include "device/host/host_device.h"
#include "geeps/embedded_cluster.h"
#include "test_util.h"

namespace geeps {
namespace {

using client::AdoptedRows;
using device::CopyKind;
using device::Device;
using device::DeviceOptions;

// ---- The device's mapping of host memory ----------------------------------

// Copies `bytes` of device memory `src` to the host and waits for it.
Status CopyOut(Device& dev, void* dst, const void* src, size_t bytes) {
  GEEPS_ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, dev.CreateStream());
  GEEPS_RETURN_IF_ERROR(dev.Copy(dst, src, bytes, CopyKind::kDeviceToHost, stream.get()));
  return dev.Synchronize(stream.get());
}

std::unique_ptr<Device> HostDeviceWith(bool opaque, bool no_alias) {
  DeviceOptions o;
  o.opaque_pointers = opaque;
  o.no_host_alias = no_alias;
  auto d = device::CreateDevice(DeviceKind::kHost, o);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

// Mapped host memory is device memory to the device's operations, in both
// pointer modes, until unmapped; it is not counted against the budget and
// not freed by the device.
TEST(MapHostMemoryTest, MappedMemoryIsDeviceMemoryUntilUnmapped) {
  for (bool opaque : {false, true}) {
    SCOPED_TRACE(opaque ? "opaque pointers" : "plain pointers");
    std::unique_ptr<Device> dev = HostDeviceWith(opaque, false);
    ASSERT_NE(dev, nullptr);
    std::vector<float> host = {1, 2, 3, 4};
    void* mapped = dev->MapHostMemory(host.data(), host.size() * sizeof(float));
    ASSERT_NE(mapped, nullptr);
    EXPECT_EQ(mapped == host.data(), !opaque);
    EXPECT_EQ(dev->bytes_in_use(), 0u);
    std::vector<float> out(4, 0.0f);
    ASSERT_OK(CopyOut(*dev, out.data(), mapped, 16));
    EXPECT_EQ(out, host);
    // A range that overlaps a mapped block is refused.
    EXPECT_EQ(dev->MapHostMemory(host.data() + 2, 4), nullptr);
    dev->Free(mapped);  // not the device's to free: a warning, nothing else
    ASSERT_OK(CopyOut(*dev, out.data(), mapped, 16));
    dev->UnmapHostMemory(mapped);
    const Status after = CopyOut(*dev, out.data(), mapped, 16);
    EXPECT_EQ(after.code(), StatusCode::kInvalidArgument) << after;
    EXPECT_EQ(host[3], 4.0f);  // the memory itself is untouched
  }
}

// Where the host cannot read device memory (the no-alias mode, as CUDA), the
// device cannot use host memory either: the worker copies pushes instead.
TEST(MapHostMemoryTest, TheNoAliasModeMapsNothing) {
  std::unique_ptr<Device> dev = HostDeviceWith(false, true);
  ASSERT_NE(dev, nullptr);
  std::vector<float> host(4);
  EXPECT_EQ(dev->MapHostMemory(host.data(), 16), nullptr);
}

TEST(MapHostMemoryTest, AnEmptyRangeIsNotMapped) {
  std::unique_ptr<Device> dev = HostDeviceWith(false, false);
  ASSERT_NE(dev, nullptr);
  float x = 0;
  EXPECT_EQ(dev->MapHostMemory(&x, 0), nullptr);
}

// ---- A worker keeping its pushes --------------------------------------------
// In one process the pushes come over inproc, whose messages are the
// partition's own rows: a worker keeps none of them (misuse_test,
// AWriteIntoAReadBufferReachesNoOtherWorker), except where a test lets it,
// as these do, to test the keeping itself (ipc and tcp pushes are kept
// without it).
class KeepInprocPushes {
 public:
  KeepInprocPushes() { client::AdoptInprocPushesForTesting(true); }
  ~KeepInprocPushes() { client::AdoptInprocPushesForTesting(false); }
};

constexpr uint64_t kRows = 64;
// Half the rows (a slice when there are two shards) fill a push just big
// enough to be kept.
constexpr uint32_t kWidth = AdoptedRows::kMinBytes / (kRows / 2) / sizeof(float);
constexpr int64_t kV = kRows * kWidth * sizeof(float);
constexpr int kIterations = 6;

Config OneTable(int workers) {
  Config c;
  c.num_workers = workers;
  c.tables = {{"W", kRows, kWidth}};
  c.device = DeviceKind::kHost;
  c.timeout = std::chrono::milliseconds(10000);
  return c;
}

// Every element of `got` is `want`; else an error naming what.
Status AllEqual(const std::vector<float>& got, float want, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want)
      return InternalError(what + ": element " + std::to_string(i) + " is " +
                           std::to_string(got[i]) + ", expected " + std::to_string(want));
  return Status::OK();
}

struct Handles {
  std::vector<ReadHandle> reads;
  UpdateHandle update;
};

// Records one read (slack 0) of each row list in `reads`, in order, then
// one update of every row and a clock, and starts the iterations.
StatusOr<Handles> Start(GeePS& ps, const std::vector<std::vector<RowIndex>>& reads) {
  Handles h;
  for (const std::vector<RowIndex>& rows : reads) {
    GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, rows));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
    h.reads.push_back(r);
  }
  GEEPS_ASSIGN_OR_RETURN(h.update, ps.VirtualPreUpdate(0, RowRange(0, kRows)));
  GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h.update));
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  GEEPS_RETURN_IF_ERROR(ps.StartIterations());
  return h;
}

// Reads `r` (`rows` rows) and checks that every element is `want`.
Status ReadAndCheck(GeePS& ps, ReadHandle r, size_t rows, float want, const std::string& what) {
  std::vector<float> seen(rows * kWidth);
  GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(r));
  GEEPS_RETURN_IF_ERROR(ps.CopyToHost(seen.data(), w, seen.size()));
  GEEPS_RETURN_IF_ERROR(AllEqual(seen, want, what));
  return ps.PostRead(r);
}

// Adds 1 to every row, and clocks.
Status AddOnesAndClock(GeePS& ps, UpdateHandle u) {
  const std::vector<float> ones(kRows * kWidth, 1.0f);
  GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
  GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, ones.data(), ones.size()));
  GEEPS_RETURN_IF_ERROR(ps.Update(u));
  return ps.Clock();
}

// `workers` workers each add 1 to every row every clock and read them all
// in place; with `gather_too`, each also reads every other row (a gather
// from the cache) and, after the last clock, copies all rows out.
WorkerStats RunJob(int workers, bool gather_too) {
  const Config c = OneTable(workers);
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  WorkerStats stats;
  const Status st = (*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    std::vector<RowIndex> odd;
    for (RowIndex r = 1; r < kRows; r += 2) odd.push_back(r);
    std::vector<std::vector<RowIndex>> reads = {RowRange(0, kRows)};
    if (gather_too) reads.push_back(odd);
    GEEPS_ASSIGN_OR_RETURN(const Handles h, Start(ps, reads));
    for (int i = 0; i < kIterations; ++i) {
      const float want = static_cast<float>(i * workers);
      const std::string at = ", clock " + std::to_string(i);
      GEEPS_RETURN_IF_ERROR(ReadAndCheck(ps, h.reads[0], kRows, want, "in-place read" + at));
      if (gather_too)
        GEEPS_RETURN_IF_ERROR(ReadAndCheck(ps, h.reads[1], odd.size(), want, "gathered read" + at));
      GEEPS_RETURN_IF_ERROR(AddOnesAndClock(ps, h.update));
    }
    GEEPS_RETURN_IF_ERROR(ps.Sync());
    if (gather_too) {
      std::vector<float> all(kRows * kWidth);
      GEEPS_RETURN_IF_ERROR(ps.CopyRows(0, RowRange(0, kRows), all.data()));
      GEEPS_RETURN_IF_ERROR(AllEqual(all, static_cast<float>(kIterations * workers), "CopyRows"));
    }
    if (ps.rank() == 0) stats = ps.GetStats();
    return Status::OK();
  });
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_OK((*cluster)->Shutdown());
  return stats;
}

// The pushes are kept, not installed by a copy: no install bytes for them,
// and the reads in place still see every clock's exact sum.
TEST(AdoptedPushTest, KeptPushesSkipTheInstallPass) {
  testing::ScopedEnv mode("GEEPS_HOST_NO_ALIAS", "0");
  KeepInprocPushes keep;
  for (int workers : {1, 2}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    const WorkerStats s = RunJob(workers, /*gather_too=*/false);
    EXPECT_EQ(s.reads_in_place, kIterations);
    EXPECT_GE(s.pushes_adopted, kIterations);
    EXPECT_EQ(s.pushes_adopted, s.pushes_installed);
    EXPECT_EQ(s.data_path.install, 0);
  }
}

// Over inproc, where a push's bytes are the partition's own, no push is
// kept: each is copied into the cache.
TEST(AdoptedPushTest, PushesOverInprocAreCopied) {
  testing::ScopedEnv mode("GEEPS_HOST_NO_ALIAS", "0");
  const WorkerStats s = RunJob(2, /*gather_too=*/false);
  EXPECT_EQ(s.pushes_adopted, 0);
  EXPECT_EQ(s.data_path.install, s.pushes_installed * kV);
}

// Without a host alias every push is copied into the cache, once.
TEST(AdoptedPushTest, WithoutAHostAliasEveryPushIsCopied) {
  testing::ScopedEnv mode("GEEPS_HOST_NO_ALIAS", "1");
  const WorkerStats s = RunJob(1, /*gather_too=*/false);
  EXPECT_EQ(s.pushes_adopted, 0);
  EXPECT_EQ(s.data_path.install, s.pushes_installed * kV);
}

// A gathered read and CopyRows read the cache: each first copies the kept
// push in, and sees the same sums as the read in place.
TEST(AdoptedPushTest, ReadersOfTheCacheSeeAKeptPush) {
  testing::ScopedEnv mode("GEEPS_HOST_NO_ALIAS", "0");
  KeepInprocPushes keep;
  for (int workers : {1, 2}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    const WorkerStats s = RunJob(workers, /*gather_too=*/true);
    EXPECT_GE(s.pushes_adopted, kIterations);
    // Each kept push was copied in once, by the first reader of the cache.
    EXPECT_LE(s.data_path.install, s.pushes_adopted * kV);
    EXPECT_GE(s.data_path.install, kIterations * kV);
  }
}

// Two shards: the table's rows lie in two slices, each pushed (and kept)
// apart. A read in place of rows of both slices returns the cache, so it
// first copies both kept pushes in; a read of one slice's rows returns that
// slice's message.
TEST(AdoptedPushTest, AReadOverTwoSlicesCopiesTheirPushesIn) {
  testing::ScopedEnv mode("GEEPS_HOST_NO_ALIAS", "0");
  KeepInprocPushes keep;
  Config c = OneTable(1);
  c.num_shards = 2;
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(const Handles h,
                           Start(ps, {RowRange(0, kRows / 2), RowRange(0, kRows)}));
    for (int i = 0; i < kIterations; ++i) {
      const float want = static_cast<float>(i);
      const std::string at = ", clock " + std::to_string(i);
      // The half first (its slice's message), then both (the cache).
      GEEPS_RETURN_IF_ERROR(ReadAndCheck(ps, h.reads[0], kRows / 2, want, "one slice" + at));
      GEEPS_RETURN_IF_ERROR(ReadAndCheck(ps, h.reads[1], kRows, want, "two slices" + at));
      GEEPS_RETURN_IF_ERROR(AddOnesAndClock(ps, h.update));
    }
    GEEPS_RETURN_IF_ERROR(ps.Sync());
    const WorkerStats s = ps.GetStats();
    if (s.reads_in_place != 2 * kIterations)
      return InternalError(std::to_string(s.reads_in_place) + " reads in place");
    if (s.pushes_adopted < 2 * kIterations)
      return InternalError("only " + std::to_string(s.pushes_adopted) + " pushes kept");
    // Each kept push (half the rows) copied in once, by the read of both.
    if (s.data_path.install < kIterations * kV || s.data_path.install > s.pushes_adopted * kV / 2)
      return InternalError(std::to_string(s.data_path.install) + " bytes installed");
    return Status::OK();
  }));
  ASSERT_OK((*cluster)->Shutdown());
}

}  // namespace
}  // namespace geeps
