// A shard pushes each worker exactly its subscribed rows. Workers that
// subscribed to the same rows share one payload per push (the shard copies
// the rows once); these tests check that sharing never mixes up workers.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>
#include <zmq.hpp>

#include "server/shard_channel.h"
#include "shard_wire_util.h"
#include "test_util.h"

namespace geeps {
namespace {

using testing::Frames;
using testing::Header;
using testing::RecvPush;
using testing::Send;
using transport::MsgType;
using transport::WireHeader;

WireHeader From(uint32_t rank, MsgType type, int64_t clock, uint64_t rows) {
  WireHeader h = Header(type, 0, clock, rows, 2);
  h.sender = rank;
  return h;
}

TEST(ShardPushTest, WorkersWithEqualAndDifferentSubscriptionsGetTheirOwnRows) {
  Config c;
  c.num_workers = 4;
  c.tables = {{"t", 4, 2}};
  zmq::context_t ctx;
  testing::g_context = &ctx;
  server::ShardChannel shard(&ctx, c, 0, "inproc://shard-push-groups");
  ASSERT_OK(shard.Start());
  std::vector<std::unique_ptr<zmq::socket_t>> w;
  for (int r = 0; r < 4; ++r)
    w.push_back(testing::WorkerSocket(ctx, r, "inproc://shard-push-groups"));
  // Workers 3 and 1 share rows {0, 1} (3 subscribes first, so the group's
  // first member is not the lowest rank); 0 has {1, 2}; 2 has {0, 1, 3}.
  const std::vector<std::vector<uint64_t>> subs = {{1, 2}, {0, 1}, {0, 1, 3}, {0, 1}};
  for (int r : {3, 0, 1, 2})
    Send(*w[r], Frames(From(r, MsgType::kSubscribe, 0, subs[r].size()), subs[r], {}));
  // At clock k, worker r adds (r + 1) * (row + 1) * (k + 1) to each of its
  // rows (and its negation to the second column).
  std::vector<float> table(8, 0.0f);
  for (int clock = 0; clock < 3; ++clock) {
    for (int r = 0; r < 4; ++r) {
      std::vector<float> deltas;
      for (uint64_t row : subs[r]) {
        const float d = static_cast<float>((r + 1) * (row + 1) * (clock + 1));
        deltas.insert(deltas.end(), {d, -d});
        table[row * 2] += d;
        table[row * 2 + 1] -= d;
      }
      Send(*w[r], Frames(From(r, MsgType::kUpdate, clock, subs[r].size()), subs[r], deltas));
    }
    for (int r = 0; r < 4; ++r) {
      std::vector<float> expect;
      for (uint64_t row : subs[r])
        expect.insert(expect.end(), {table[row * 2], table[row * 2 + 1]});
      int64_t got_clock = -1;
      EXPECT_EQ(RecvPush(*w[r], &got_clock), expect) << "worker " << r << " clock " << clock;
      EXPECT_EQ(got_clock, clock + 1);
    }
  }
  shard.Stop();
  EXPECT_EQ(shard.GetStats().frames_dropped, 0);
  EXPECT_EQ(shard.GetStats().pushes_sent, 12);
}

// A push is sent straight from the partition's rows; an update that comes
// while a push still holds them (here: the receiver keeps the message, which
// over inproc is the shard's own buffer) goes into a copy, and the held push
// keeps its values.
TEST(ShardPushTest, UpdatesNeverWriteRowsThatAPushStillHolds) {
  Config c;
  c.num_workers = 1;
  c.tables = {{"t", 4, 2}};
  c.pack_below_bytes = 0;  // the push in frames of its own, its payload the rows
  testing::ShardRig rig(c, "inproc://shard-push-hold", 1);
  ASSERT_OK(rig.started);
  server::ShardChannel& shard = rig.shard;
  zmq::socket_t& w = rig.worker(0);
  const std::vector<uint64_t> rows = {0, 1, 2, 3};
  Send(w, Frames(From(0, MsgType::kSubscribe, 0, rows.size()), rows, {}));
  auto recv_push = [&w](std::vector<zmq::message_t>* frames) {
    return testing::RecvFrames(w, frames) && frames->size() == 2;
  };
  auto values = [](const zmq::message_t& m) {
    std::vector<float> v(m.size() / 4);
    std::memcpy(v.data(), m.data(), m.size());
    return v;
  };
  std::vector<zmq::message_t> held, next;
  Send(w, Frames(From(0, MsgType::kUpdate, 0, 4), rows, {1, 1, 1, 1, 1, 1, 1, 1}));
  ASSERT_TRUE(recv_push(&held));
  const std::vector<float> ones(8, 1.0f);
  EXPECT_EQ(values(held[1]), ones);
  // The next update comes while `held` is still open.
  Send(w, Frames(From(0, MsgType::kUpdate, 1, 4), rows, {2, 2, 2, 2, 2, 2, 2, 2}));
  ASSERT_TRUE(recv_push(&next));
  EXPECT_EQ(values(next[1]), std::vector<float>(8, 3.0f));
  EXPECT_EQ(values(held[1]), ones) << "the held push changed under its reader";
  const ShardStats s = shard.GetStats();
  EXPECT_EQ(s.push_zero_copy_bytes, 2 * 8 * 4);
  EXPECT_EQ(s.push_copy_bytes, 8 * 4) << "one copy aside, for the update that met the held push";
  held.clear();
  next.clear();
  shard.Stop();
}

// Pipelined updates: once every worker has updated rows for the clock, they
// leave as an early part of the next push; the clock's later parts write
// rows above them without copying the partition, and the held part keeps
// its values.
TEST(ShardPushTest, EarlyPushPartsLeaveBeforeTheLastUpdatePartAndStayIntact) {
  Config c;
  c.num_workers = 2;
  c.tables = {{"t", 8, 16}};    // 64-byte rows
  c.pipeline_part_bytes = 128;  // an early part once two rows are ready
  c.pack_below_bytes = 0;       // parts in frames of their own, payloads the rows
  zmq::context_t ctx;
  testing::g_context = &ctx;
  server::ShardChannel shard(&ctx, c, 0, "inproc://shard-push-early");
  ASSERT_OK(shard.Start());
  std::vector<std::unique_ptr<zmq::socket_t>> w;
  for (int r = 0; r < 2; ++r)
    w.push_back(testing::WorkerSocket(ctx, r, "inproc://shard-push-early"));
  const std::vector<uint64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint64_t> low = {0, 1, 2, 3}, high = {4, 5, 6, 7};
  for (int r = 0; r < 2; ++r) Send(*w[r], Frames(From(r, MsgType::kSubscribe, 0, 8), all, {}));
  auto update = [](uint32_t rank, int64_t clock, const std::vector<uint64_t>& rows, uint64_t offset,
                   bool more, float value) {
    WireHeader h = From(rank, MsgType::kUpdate, clock, rows.size());
    h.row_width = 16;
    h.offset = offset;
    h.flags = more ? transport::kFlagMore : 0;
    return Frames(h, rows, std::vector<float>(rows.size() * 16, value));
  };
  auto header = [](const zmq::message_t& m) {
    WireHeader h;
    std::memcpy(&h, m.data(), sizeof(h));
    return h;
  };
  auto values = [](const zmq::message_t& m) {
    std::vector<float> v(m.size() / 4);
    std::memcpy(v.data(), m.data(), m.size());
    return v;
  };
  // Clock 0, whole (until every worker has subscribed and the minimum has
  // passed the start, updates wait for their clock): 2 in every row.
  for (int r = 0; r < 2; ++r) Send(*w[r], update(r, 0, all, 0, false, 1.0f));
  for (int r = 0; r < 2; ++r) {
    std::vector<zmq::message_t> f;
    ASSERT_TRUE(testing::RecvFrames(*w[r], &f));
    EXPECT_EQ(values(f[1]), std::vector<float>(8 * 16, 2.0f));
  }
  // Clock 1: worker 0 sends all its rows; worker 1 sends rows 0-3 first.
  Send(*w[0], update(0, 1, all, 0, false, 1.0f));
  Send(*w[1], update(1, 1, low, 0, true, 2.0f));
  std::vector<zmq::message_t> early, rest;
  ASSERT_TRUE(testing::RecvFrames(*w[0], &early));
  ASSERT_EQ(early.size(), 2u);
  WireHeader h = header(early[0]);
  EXPECT_EQ(h.clock, 2);
  EXPECT_EQ(h.offset, 0u);
  EXPECT_EQ(h.row_count, 4u) << "rows 0-3 are final for clock 1 before rows 4-7 arrive";
  EXPECT_TRUE(h.flags & transport::kFlagMore);
  EXPECT_EQ(values(early[1]), std::vector<float>(4 * 16, 5.0f));
  EXPECT_EQ(shard.GetStats().early_push_parts, 1);
  // The last part writes rows 4-7 while worker 0 still holds rows 0-3.
  Send(*w[1], update(1, 1, high, 4, false, 2.0f));
  ASSERT_TRUE(testing::RecvFrames(*w[0], &rest));
  ASSERT_EQ(rest.size(), 2u);
  h = header(rest[0]);
  EXPECT_EQ(h.clock, 2);
  EXPECT_EQ(h.offset, 4u);
  EXPECT_EQ(h.row_count, 4u);
  EXPECT_FALSE(h.flags & transport::kFlagMore);
  EXPECT_EQ(values(rest[1]), std::vector<float>(4 * 16, 5.0f));
  EXPECT_EQ(values(early[1]), std::vector<float>(4 * 16, 5.0f));
  EXPECT_EQ(shard.GetStats().push_copy_bytes, 0)
      << "rows above the held part were copied aside for nothing";
  // Worker 1 got the same push in two parts.
  for (uint64_t offset : {0u, 4u}) {
    std::vector<zmq::message_t> f;
    ASSERT_TRUE(testing::RecvFrames(*w[1], &f));
    EXPECT_EQ(header(f[0]).offset, offset);
  }
  // Clock 2 writes row 0, which the held part still reads: a copy aside.
  Send(*w[0], update(0, 2, all, 0, false, 1.0f));
  Send(*w[1], update(1, 2, all, 0, false, 1.0f));
  std::vector<zmq::message_t> next;
  ASSERT_TRUE(testing::RecvFrames(*w[0], &next));
  EXPECT_EQ(values(next[1]), std::vector<float>(8 * 16, 7.0f));
  EXPECT_EQ(values(early[1]), std::vector<float>(4 * 16, 5.0f)) << "the held part changed";
  EXPECT_GT(shard.GetStats().push_copy_bytes, 0);
  early.clear();
  rest.clear();
  next.clear();
  shard.Stop();
  EXPECT_EQ(shard.GetStats().frames_dropped, 0);
}

// The counters count a push before it leaves: a worker that has a push and
// then looks at the shard's stats sees it (tests compare them right after
// their workers finish). Worker 0, the group's first, gets each push before
// the shard has sent it to the other 63.
TEST(ShardPushTest, AReceiverThatHasThePushSeesItCounted) {
  constexpr int kWorkers = 64;
  constexpr int kClocks = 20;
  Config c;
  c.num_workers = kWorkers;
  c.tables = {{"t", 2, 2}};
  testing::ShardRig rig(c, "inproc://shard-push-counted", kWorkers);
  ASSERT_OK(rig.started);
  server::ShardChannel& shard = rig.shard;
  auto w = [&rig](int r) -> zmq::socket_t& { return rig.worker(r); };
  const std::vector<uint64_t> rows = {0, 1};
  for (int r = 0; r < kWorkers; ++r)
    Send(w(r), Frames(From(r, MsgType::kSubscribe, 0, rows.size()), rows, {}));
  const int64_t push_bytes = static_cast<int64_t>(transport::kHeaderBytes + 4 * sizeof(float));
  for (int clock = 0; clock < kClocks; ++clock) {
    for (int r = 0; r < kWorkers; ++r)
      Send(w(r), Frames(From(r, MsgType::kUpdate, clock, rows.size()), rows, {1, 1, 1, 1}));
    int64_t got_clock = -1;
    EXPECT_EQ(RecvPush(w(0), &got_clock).size(), 4u);
    const ShardStats s = shard.GetStats();
    EXPECT_GE(s.pushes_sent, int64_t{clock} * kWorkers + 1) << "clock " << clock;
    EXPECT_GE(s.bytes_sent, (int64_t{clock} * kWorkers + 1) * push_bytes) << "clock " << clock;
    for (int r = 1; r < kWorkers; ++r) EXPECT_EQ(RecvPush(w(r), &got_clock).size(), 4u);
  }
  shard.Stop();
  const ShardStats s = shard.GetStats();
  EXPECT_EQ(s.frames_dropped, 0);
  EXPECT_EQ(s.pushes_sent, int64_t{kClocks} * kWorkers);
  EXPECT_EQ(s.bytes_sent, int64_t{kClocks} * kWorkers * push_bytes);
}

}  // namespace
}  // namespace geeps
