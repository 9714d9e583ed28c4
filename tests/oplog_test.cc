// Tests of the oplog and its slots (src/client/oplog.cc) alone: a table
// cache built by hand on the host backend, the channels replaced by a
// function that records what it is handed. No cluster, no sockets.
#include "client/oplog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "client/comm_channel.h"
#include "client/table_cache.h"
#include "common/mutex.h"
#include "device/device.h"
#include "device_copy.h"
#include "test_util.h"

namespace geeps::client {
namespace {

constexpr uint32_t kWidth = 2;

// A table of 6 cached rows (positions 0..5): 0..3 in device memory, 4..5 in
// host memory; one slice per partition in `partitions`.
class OplogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = device::CreateDevice(DeviceKind::kHost, device::DeviceOptions{});
    ASSERT_OK(device.status());
    device_ = std::move(device).value();
    auto stream = device_->CreateStream();
    ASSERT_OK(stream.status());
    stream_ = std::move(stream).value();
    config_.num_channels = 2;
  }

  void TearDown() override {
    for (void* p : allocations_) device_->Free(p);
  }

  float* Alloc(size_t floats) {
    auto p = device_->Allocate(floats * sizeof(float));
    EXPECT_OK(p.status());
    allocations_.push_back(*p);
    EXPECT_OK(device_->Fill(static_cast<float*>(*p), 0.0f, floats, stream_.get()));
    EXPECT_OK(device_->Synchronize(stream_.get()));
    return static_cast<float*>(*p);
  }

  void Upload(float* dst, const std::vector<float>& values) {
    ASSERT_OK(geeps::testing::UploadFloats(*device_, stream_.get(), dst, values));
  }

  std::vector<float> Download(const float* src, size_t floats) {
    StatusOr<std::vector<float>> out =
        geeps::testing::DownloadFloats(*device_, stream_.get(), src, floats);
    EXPECT_OK(out.status());
    return out.ok() ? *out : std::vector<float>(floats);
  }

  std::unique_ptr<TableCache> MakeTable(const std::vector<int>& partitions) {
    auto t = std::make_unique<TableCache>();
    t->id = 3;
    t->width = kWidth;
    t->rows = {10, 11, 12, 13, 14, 15};
    t->runs = {{0, 4, true, 0}, {4, 2, false, 0}};
    t->device_rows = 4;
    t->host_rows = 2;
    t->cache = Alloc(4 * kWidth);
    t->oplog = Alloc(4 * kWidth);
    host_oplog_.assign(2 * kWidth, 0.0f);
    t->host_oplog = host_oplog_.data();
    for (int p : partitions) {
      PartitionSlice s;
      s.partition = p;
      s.cache_count = 1;
      t->slices.push_back(s);
    }
    return t;
  }

  std::unique_ptr<Oplog> MakeOplog() {
    return std::make_unique<Oplog>(&config_, /*rank=*/0, device_.get(), stream_.get(), &counters_,
                                   [this](int channel, TableId table, OplogSlot* slot) {
                                     sent_.emplace_back(channel, table, slot);
                                     return Status::OK();
                                   });
  }

  // Frees the slot memory of `t`'s slots (none is held by ZeroMQ here).
  void FreeAll(Oplog& oplog, std::unique_ptr<TableCache> t) {
    std::vector<std::unique_ptr<TableCache>> tables;
    tables.push_back(std::move(t));
    EXPECT_EQ(oplog.FreeSlots(tables, std::chrono::milliseconds(0)), 0u);
  }

  Config config_;
  std::unique_ptr<device::Device> device_;
  std::unique_ptr<device::Stream> stream_;
  std::vector<void*> allocations_;
  std::vector<float> host_oplog_;
  ClientCounters counters_;
  std::vector<std::tuple<int, TableId, OplogSlot*>> sent_;
};

TEST_F(OplogTest, AcquireReusesOnlySlotsFreeAndReleasedByZeroMq) {
  auto t = MakeTable({0});
  auto oplog = MakeOplog();
  common::MutexLock lock(&t->mu);
  auto first = oplog->Acquire(*t);
  ASSERT_OK(first.status());
  ASSERT_EQ(t->slots.size(), 1u);
  ASSERT_NE((*first)->host, nullptr);  // t->floats() of pinned memory
  // Not yet in use: the same slot again.
  auto again = oplog->Acquire(*t);
  ASSERT_OK(again.status());
  EXPECT_EQ(*again, *first);
  // In use: a fresh one.
  (*first)->in_use = true;
  auto second = oplog->Acquire(*t);
  ASSERT_OK(second.status());
  EXPECT_NE(*second, *first);
  EXPECT_EQ(t->slots.size(), 2u);
  (*second)->in_use = true;
  // Free, but ZeroMQ still sends from it: a fresh one.
  (*first)->in_use = false;
  (*first)->transport_refs.store(1);
  auto third = oplog->Acquire(*t);
  ASSERT_OK(third.status());
  EXPECT_NE(*third, *first);
  EXPECT_EQ(t->slots.size(), 3u);
  (*third)->in_use = true;
  // Released by ZeroMQ: reused.
  (*first)->transport_refs.store(0);
  auto reused = oplog->Acquire(*t);
  ASSERT_OK(reused.status());
  EXPECT_EQ(*reused, *first);
  lock.Unlock();
  FreeAll(*oplog, std::move(t));
}

TEST_F(OplogTest, FillCopiesTheOplogByPositionAndClearsIt) {
  for (bool rmw : {false, true}) {
    SCOPED_TRACE(rmw ? "read-my-writes" : "plain");
    config_.read_my_writes = rmw;
    counters_.to_slot_bytes = 0;
    counters_.zero_bytes = 0;
    auto t = MakeTable({0, 1});
    auto oplog = MakeOplog();
    // Deltas: device positions 0..3 are 1..8, host positions 4..5 are 9..12.
    Upload(t->oplog, {1, 2, 3, 4, 5, 6, 7, 8});
    host_oplog_ = {9, 10, 11, 12};
    t->oplog_dirty = true;
    auto slot = oplog->Snapshot(*t, /*clock=*/7, /*checkpoint=*/true, nullptr);
    ASSERT_OK(slot.status());
    OplogSlot& s = **slot;
    EXPECT_EQ(std::vector<float>(s.host, s.host + 12),
              (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
    EXPECT_TRUE(s.in_use);
    EXPECT_TRUE(s.dirty);
    EXPECT_TRUE(s.checkpoint);
    EXPECT_EQ(s.clock, 7);
    EXPECT_EQ(s.pending_sends, 2);
    EXPECT_EQ(s.send_from, nullptr);
    EXPECT_EQ(Download(t->oplog, 8), std::vector<float>(8, 0.0f));
    EXPECT_EQ(host_oplog_, std::vector<float>(4, 0.0f));
    EXPECT_FALSE(t->oplog_dirty);
    EXPECT_EQ(s.retained, rmw);
    EXPECT_EQ(t->retained.size(), rmw ? 1u : 0u);
    EXPECT_EQ(counters_.to_slot_bytes.load(), 12 * 4);
    EXPECT_EQ(counters_.zero_bytes.load(), 12 * 4);
    // Nothing is sent before Send.
    EXPECT_TRUE(sent_.empty());
    FreeAll(*oplog, std::move(t));
  }
}

TEST_F(OplogTest, CleanClockCopiesNothing) {
  auto t = MakeTable({0});
  auto oplog = MakeOplog();
  Upload(t->oplog, {1, 2, 3, 4, 5, 6, 7, 8});  // not dirty: ignored
  auto slot = oplog->Snapshot(*t, 2, false, nullptr);
  ASSERT_OK(slot.status());
  EXPECT_FALSE((*slot)->dirty);
  EXPECT_FALSE((*slot)->checkpoint);
  EXPECT_EQ(Download(t->oplog, 8), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(counters_.to_slot_bytes.load(), 0);
  EXPECT_EQ(counters_.zero_bytes.load(), 0);
  FreeAll(*oplog, std::move(t));
}

TEST_F(OplogTest, DirectUpdateIsCopiedAtItsPositionsLeavingTheOplog) {
  auto t = MakeTable({0});
  auto oplog = MakeOplog();
  Upload(t->oplog, {1, 2, 3, 4, 5, 6, 7, 8});
  float* buffer = Alloc(2 * kWidth);
  Upload(buffer, {21, 22, 23, 24});
  DirectUpdate d{buffer, 2 * kWidth, /*first_pos=*/1, nullptr};
  auto slot = oplog->Snapshot(*t, 1, false, &d);
  ASSERT_OK(slot.status());
  EXPECT_TRUE((*slot)->dirty);
  EXPECT_EQ((*slot)->send_from, nullptr);
  EXPECT_EQ(std::vector<float>((*slot)->host + 2, (*slot)->host + 6),
            (std::vector<float>{21, 22, 23, 24}));
  EXPECT_EQ(Download(t->oplog, 8), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(counters_.to_slot_bytes.load(), 4 * 4);
  EXPECT_EQ(counters_.zero_bytes.load(), 0);
  FreeAll(*oplog, std::move(t));
}

TEST_F(OplogTest, DirectUpdateSentInPlaceIsNamedUntilCopiedIn) {
  auto t = MakeTable({0});
  auto oplog = MakeOplog();
  float* buffer = Alloc(2 * kWidth);
  Upload(buffer, {21, 22, 23, 24});
  std::atomic<int> refs{0};
  DirectUpdate d{buffer, 2 * kWidth, /*first_pos=*/2, &refs};
  auto slot = oplog->Snapshot(*t, 1, false, &d);
  ASSERT_OK(slot.status());
  OplogSlot& s = **slot;
  EXPECT_EQ(s.send_from, device_->HostAlias(buffer));
  EXPECT_EQ(s.send_first_pos, 2u);
  EXPECT_EQ(s.send_refs, &refs);
  EXPECT_EQ(counters_.to_slot_bytes.load(), 0);
  common::MutexLock lock(&t->mu);
  EXPECT_TRUE(Oplog::Names(*t, &refs));
  std::atomic<int> other{0};
  EXPECT_FALSE(Oplog::Names(*t, &other));
  oplog->CopyIn(*t, &refs, static_cast<const float*>(device_->HostAlias(buffer)), 2 * kWidth);
  EXPECT_FALSE(Oplog::Names(*t, &refs));
  EXPECT_EQ(s.send_from, nullptr);
  EXPECT_EQ(std::vector<float>(s.host + 4, s.host + 8), (std::vector<float>{21, 22, 23, 24}));
  EXPECT_EQ(counters_.to_slot_bytes.load(), 4 * 4);
  lock.Unlock();
  FreeAll(*oplog, std::move(t));
}

TEST_F(OplogTest, SendHandsTheSlotToEachChannelOnce) {
  struct Case {
    std::vector<int> partitions;
    int num_channels;
    std::vector<int> channels;
  };
  const std::vector<Case> cases = {
      {{0}, 1, {0}},    {{0, 1, 2, 3}, 1, {0}}, {{0, 1, 2, 3}, 2, {0, 1}},
      {{1, 3}, 2, {1}}, {{1, 2, 4}, 3, {1, 2}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.partitions) + " over " +
                 std::to_string(c.num_channels) + " channels");
    config_.num_channels = c.num_channels;
    sent_.clear();
    auto t = MakeTable(c.partitions);
    auto oplog = MakeOplog();
    EXPECT_EQ(Oplog::Channels(*t, c.num_channels), c.channels);
    auto slot = oplog->Snapshot(*t, 1, false, nullptr);
    ASSERT_OK(slot.status());
    EXPECT_EQ((*slot)->pending_sends, static_cast<int>(c.channels.size()));
    ASSERT_OK(oplog->Send(*t, *slot));
    ASSERT_EQ(sent_.size(), c.channels.size());
    for (size_t i = 0; i < sent_.size(); ++i) {
      EXPECT_EQ(std::get<0>(sent_[i]), c.channels[i]);
      EXPECT_EQ(std::get<1>(sent_[i]), t->id);
      EXPECT_EQ(std::get<2>(sent_[i]), *slot);
    }
    FreeAll(*oplog, std::move(t));
  }
}

TEST_F(OplogTest, DiscardZeroesADirtyOplog) {
  auto t = MakeTable({0});
  auto oplog = MakeOplog();
  Upload(t->oplog, {1, 2, 3, 4, 5, 6, 7, 8});
  host_oplog_ = {9, 10, 11, 12};
  t->oplog_dirty = true;
  ASSERT_OK(oplog->Discard(*t));
  EXPECT_FALSE(t->oplog_dirty);
  EXPECT_EQ(Download(t->oplog, 8), std::vector<float>(8, 0.0f));
  EXPECT_EQ(host_oplog_, std::vector<float>(4, 0.0f));
  EXPECT_TRUE(t->slots.empty());
}

TEST(OplogReleaseTest, ReleasesOnlySlotsNothingKeeps) {
  struct Case {
    std::string name;
    int pending_sends;
    bool retained;
    bool read_my_writes;
    bool retain_until_acked;
    int64_t included;  // by the one partition with cached rows
    bool in_use_after;
  };
  // The slot is of clock 4: a push that includes it has included >= 5.
  const std::vector<Case> cases = {
      {"sent", 0, false, false, false, 0, false},
      {"a channel has yet to send it", 1, false, false, false, 5, true},
      {"retained, not yet included", 0, true, true, false, 4, true},
      {"retained and included", 0, true, true, false, 5, false},
      {"kept until acknowledged", 0, false, false, true, 4, true},
      {"acknowledged", 0, false, false, true, 5, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TableCache t;
    t.retain_until_acked = c.retain_until_acked;
    PartitionSlice cached, empty;
    cached.cache_count = 1;
    cached.included = c.included;
    empty.included = 0;  // no cached rows: never waited for
    t.slices = {cached, empty};
    t.slots.push_back(std::make_unique<OplogSlot>());
    OplogSlot* slot = t.slots.back().get();
    slot->in_use = true;
    slot->clock = 4;
    slot->pending_sends = c.pending_sends;
    slot->retained = c.retained;
    if (c.retained) t.retained.push_back(slot);
    Oplog::Release(t, c.read_my_writes);
    EXPECT_EQ(slot->in_use, c.in_use_after);
    EXPECT_EQ(t.retained.empty(), !c.retained || !c.in_use_after);
  }
}

TEST_F(OplogTest, FreeSlotsLeaksOnlyWhatZeroMqStillHolds) {
  std::vector<std::unique_ptr<TableCache>> tables;
  tables.push_back(nullptr);  // a local table
  tables.push_back(MakeTable({0}));
  auto oplog = MakeOplog();
  {
    common::MutexLock lock(&tables[1]->mu);
    auto a = oplog->Acquire(*tables[1]);
    ASSERT_OK(a.status());
    (*a)->in_use = true;
    auto b = oplog->Acquire(*tables[1]);
    ASSERT_OK(b.status());
    (*b)->transport_refs.store(2);  // ZeroMQ never releases it
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(oplog->FreeSlots(tables, std::chrono::milliseconds(20)), 1u);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(20));
  // The held slot is still reported; its memory is never freed (nor the
  // other's twice).
  EXPECT_EQ(oplog->FreeSlots(tables, std::chrono::milliseconds(0)), 1u);
}

TEST(WaitReleasedTest, WaitsForTheCountOrTheDeadline) {
  std::atomic<int> refs{0};
  EXPECT_TRUE(WaitReleased(refs, std::chrono::steady_clock::now()));
  refs.store(1);
  EXPECT_FALSE(WaitReleased(refs, std::chrono::steady_clock::now() + std::chrono::milliseconds(5)));
}

}  // namespace
}  // namespace geeps::client
