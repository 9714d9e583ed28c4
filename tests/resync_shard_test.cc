// Connection loss and resend at the shard (docs/architecture.md, "Connection
// loss and resend"): over TCP/IPC a partition holds the rows of its last push
// until every subscriber has acknowledged it (an Update's or Ack's `aux`), so
// that a worker that lost the push and resyncs gets it again exactly, although
// the other workers' deltas of the next clock already went into the rows.
// These tests talk to a ShardChannel over ipc:// as workers would.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "server/shard_channel.h"
#include "shard_wire_util.h"
#include "test_util.h"

namespace geeps {
namespace {

using testing::Frames;
using transport::MsgType;
using transport::WireHeader;

constexpr uint32_t kWidth = 2;
const std::vector<uint64_t> kAll = {0, 1, 2, 3};
constexpr int64_t kTableBytes = 4 * kWidth * sizeof(float);  // one copy of the partition

// A fresh directory under /tmp for the ipc endpoint, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/resync-shard-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One message received by a worker socket.
struct Got {
  bool ok = false;
  WireHeader h;
  std::vector<float> values;
};

// A shard (partition 0 of `c`) over ipc:// (or inproc://) and `workers`
// DEALER sockets connected to it as workers 0, 1, ... Members are destroyed
// in reverse: sockets, shard, context, directory.
struct Rig {
  // Pushes in separate frames (pack_below_bytes 0): the rig reads the
  // payload frame, and the tests look at the holds of pushes sent from the
  // rows themselves.
  Rig(const Config& c, int workers, bool inproc = false) : config(Unpacked(c)) {
    endpoint = inproc ? "inproc://resync-shard" : "ipc://" + dir.path() + "/shard";
    testing::g_context = &ctx;
    shard = std::make_unique<server::ShardChannel>(&ctx, config, 0, endpoint);
    started = shard->Start();
    for (int r = 0; r < workers; ++r) sockets.push_back(Connect(r));
  }
  std::unique_ptr<zmq::socket_t> Connect(int rank) {
    auto s = testing::WorkerSocket(ctx, rank, endpoint);
    s->set(zmq::sockopt::linger, 0);
    return s;
  }
  zmq::socket_t& worker(int r) { return *sockets[r]; }

  // Sends `frames` from worker `rank`, counting the bytes the shard will
  // receive (its routing id included), so that Settle() can wait for them.
  void Send(int rank, std::vector<zmq::message_t> frames) {
    sent_bytes += static_cast<int64_t>(transport::WorkerRoutingId(rank).size());
    for (const auto& f : frames) sent_bytes += static_cast<int64_t>(f.size());
    testing::Send(worker(rank), std::move(frames));
  }
  // Waits until the shard has taken up everything sent so far: the shard
  // thread handles messages one at a time, so what is sent after this is
  // handled after it.
  bool Settle() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (shard->GetStats().bytes_received < sent_bytes) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  // The next message on worker `r`'s socket, within `timeout_ms`.
  Got Recv(int r, int timeout_ms = 5000) {
    zmq::socket_t& s = worker(r);
    s.set(zmq::sockopt::rcvtimeo, timeout_ms);
    Got g;
    std::vector<zmq::message_t> frames;
    g.ok = testing::RecvFrames(s, &frames) && !frames.empty() &&
           frames[0].size() == transport::kHeaderBytes;
    if (!g.ok) return g;
    std::memcpy(&g.h, frames[0].data(), sizeof(g.h));
    if (frames.size() > 1) {
      g.values.resize(frames[1].size() / sizeof(float));
      std::memcpy(g.values.data(), frames[1].data(), frames[1].size());
    }
    return g;
  }

  static Config Unpacked(Config c) {
    c.pack_below_bytes = 0;
    return c;
  }

  Config config;
  TempDir dir;
  std::string endpoint;
  zmq::context_t ctx;
  std::unique_ptr<server::ShardChannel> shard;
  Status started;
  std::vector<std::unique_ptr<zmq::socket_t>> sockets;
  int64_t sent_bytes = 0;
};

Config TwoColumnConfig(int workers) {
  Config c;
  c.num_workers = workers;
  c.tables = {{"t", 4, kWidth}};
  return c;
}

WireHeader From(uint32_t rank, MsgType type, int64_t clock, uint64_t rows, int64_t aux) {
  WireHeader h = testing::Header(type, 0, clock, rows, kWidth);
  h.sender = rank;
  h.aux = aux;
  return h;
}

// A header-only Ack or Resync of table `table`.
std::vector<zmq::message_t> Control(uint32_t rank, MsgType type, int64_t aux, uint32_t table = 0) {
  WireHeader h = From(rank, type, 0, 0, aux);
  h.table = table;
  return Frames(h, {}, {});
}

// The table as every worker's deltas add up, and the deltas themselves:
// worker r adds (r + 1) * (clock + 1) * (row + 1) to the first column of
// every row and its negation to the second (exact in float).
struct Model {
  std::vector<float> table = std::vector<float>(4 * kWidth, 0.0f);
  std::vector<float> Deltas(int r, int64_t clock) {
    std::vector<float> d;
    for (uint64_t row : kAll) {
      const float v = static_cast<float>((r + 1) * (clock + 1) * static_cast<int64_t>(row + 1));
      d.insert(d.end(), {v, -v});
    }
    return d;
  }
  std::vector<zmq::message_t> Update(int r, int64_t clock, int64_t aux) {
    std::vector<float> d = Deltas(r, clock);
    for (size_t i = 0; i < d.size(); ++i) table[i] += d[i];
    return Frames(From(r, MsgType::kUpdate, clock, kAll.size(), aux), kAll, d);
  }
};

// Expects `g` to be the whole push of `clock` with `values`.
void ExpectPush(const Got& g, int64_t clock, const std::vector<float>& values,
                const std::string& what) {
  ASSERT_TRUE(g.ok) << what << ": no push";
  EXPECT_EQ(g.h.type, static_cast<uint16_t>(MsgType::kPush)) << what;
  EXPECT_EQ(g.h.clock, clock) << what;
  EXPECT_EQ(g.h.aux, clock) << what;
  EXPECT_EQ(g.h.offset, 0u) << what;
  EXPECT_EQ(g.h.flags, 0u) << what;
  EXPECT_EQ(g.values, values) << what;
}

// Both workers subscribe to every row and run clocks [0, upto) in step, each
// update acknowledging the last push; returns with push `upto` received by
// both.
void RunInStep(Rig& rig, Model& model, int64_t upto) {
  for (int r = 0; r < 2; ++r)
    rig.Send(r, Frames(From(r, MsgType::kSubscribe, 0, kAll.size(), 0), kAll, {}));
  for (int64_t clock = 0; clock < upto; ++clock) {
    for (int r = 0; r < 2; ++r) rig.Send(r, model.Update(r, clock, clock));
    for (int r = 0; r < 2; ++r)
      ExpectPush(rig.Recv(r), clock + 1, model.table,
                 "worker " + std::to_string(r) + ", push " + std::to_string(clock + 1));
  }
}

// One worker whose every update acknowledges the push it read: the hold of
// each push is released before the next write, which then needs no copy.
// An update that does not acknowledge the held push writes into a copy: the
// hold is there.
TEST(ResyncShardTest, AcknowledgedPushesCostNoCopy) {
  Rig rig(TwoColumnConfig(1), 1);
  ASSERT_OK(rig.started);
  Model model;
  rig.Send(0, Frames(From(0, MsgType::kSubscribe, 0, kAll.size(), 0), kAll, {}));
  int64_t last_push = 0;
  for (int64_t clock = 0; clock < 20; ++clock) {
    rig.Send(0, model.Update(0, clock, last_push));
    const Got g = rig.Recv(0);
    ExpectPush(g, clock + 1, model.table, "push " + std::to_string(clock + 1));
    last_push = g.h.clock;
  }
  EXPECT_EQ(rig.shard->GetStats().push_copy_bytes, 0)
      << "an acknowledged push was still held when the next update was written";
  // Clock 20 acknowledging only push 19: push 20 is still held.
  rig.Send(0, model.Update(0, 20, 19));
  ExpectPush(rig.Recv(0), 21, model.table, "push 21");
  rig.shard->Stop();
  const ShardStats s = rig.shard->GetStats();
  EXPECT_EQ(s.push_copy_bytes, kTableBytes) << "the unacknowledged push was not held";
  EXPECT_EQ(s.frames_dropped, 0);
  EXPECT_EQ(s.pushes_sent, 21);
  EXPECT_EQ(s.repushes, 0);
}

// Worker 1 lost push m: worker 0's deltas of clock m are in the rows when
// worker 1 resyncs, yet it gets push m again exactly, from the held rows.
TEST(ResyncShardTest, ResyncGetsTheHeldPushExactly) {
  Rig rig(TwoColumnConfig(2), 2);
  ASSERT_OK(rig.started);
  Model model;
  const int64_t m = 3;
  RunInStep(rig, model, m);
  const std::vector<float> push_m = model.table;
  rig.Send(0, model.Update(0, m, m));
  ASSERT_TRUE(rig.Settle());
  rig.Send(1, Control(1, MsgType::kResync, m - 1));
  ExpectPush(rig.Recv(1), m, push_m, "push m again");
  rig.Send(1, model.Update(1, m, m));
  for (int r = 0; r < 2; ++r)
    ExpectPush(rig.Recv(r), m + 1, model.table, "worker " + std::to_string(r) + ", push m + 1");
  // Worker 0 got nothing else.
  EXPECT_FALSE(rig.Recv(0, 200).ok);
  rig.shard->Stop();
  const ShardStats s = rig.shard->GetStats();
  EXPECT_EQ(s.resyncs_received, 1);
  EXPECT_EQ(s.repushes, 1);
  EXPECT_EQ(s.frames_dropped, 0);
  // Clocks 1 to m: the first update of each meets a push worker 1 has not
  // acknowledged yet (its update carries that), and goes into a copy.
  EXPECT_EQ(s.push_copy_bytes, m * kTableBytes);
  EXPECT_EQ(s.pushes_sent, 2 * (m + 1) + 1);
}

// A push lost with its connection (the worker's socket closes right after
// its update; the push finds it gone or dies with it): the worker
// reconnects under the same id, resyncs, and gets it exactly.
TEST(ResyncShardTest, PushLostWithTheConnectionIsPushedAgain) {
  Rig rig(TwoColumnConfig(2), 2);
  ASSERT_OK(rig.started);
  Model model;
  RunInStep(rig, model, 1);
  rig.Send(0, model.Update(0, 1, 1));
  ASSERT_TRUE(rig.Settle());
  rig.worker(1).set(zmq::sockopt::linger, 2000);  // the update still leaves
  rig.Send(1, model.Update(1, 1, 1));
  rig.sockets[1].reset();
  ExpectPush(rig.Recv(0), 2, model.table, "worker 0, push 2");
  const std::vector<float> push_2 = model.table;
  ASSERT_TRUE(rig.Settle());
  rig.Send(0, model.Update(0, 2, 2));
  ASSERT_TRUE(rig.Settle());
  rig.sockets[1] = rig.Connect(1);
  rig.Send(1, Control(1, MsgType::kResync, 1));
  ExpectPush(rig.Recv(1), 2, push_2, "push 2 after the reconnect");
  rig.Send(1, model.Update(1, 2, 2));
  for (int r = 0; r < 2; ++r)
    ExpectPush(rig.Recv(r), 3, model.table, "worker " + std::to_string(r) + ", push 3");
  rig.shard->Stop();
  const ShardStats s = rig.shard->GetStats();
  EXPECT_EQ(s.resyncs_received, 1);
  EXPECT_EQ(s.repushes, 1);
  EXPECT_EQ(s.frames_dropped, 0);
}

// An Ack that comes before the other worker's update releases the hold in
// time: no copy at any clock.
TEST(ResyncShardTest, AckBeforeTheNextWriteAvoidsTheCopy) {
  Rig rig(TwoColumnConfig(2), 2);
  ASSERT_OK(rig.started);
  Model model;
  RunInStep(rig, model, 1);  // clock 0 writes no rows in place, pushes nothing before
  const int64_t copied = rig.shard->GetStats().push_copy_bytes;
  EXPECT_EQ(copied, 0);
  for (int64_t clock = 1; clock < 6; ++clock) {
    rig.Send(1, Control(1, MsgType::kAck, clock));
    ASSERT_TRUE(rig.Settle());
    rig.Send(0, model.Update(0, clock, clock));
    rig.Send(1, model.Update(1, clock, 0));  // acknowledges nothing more
    for (int r = 0; r < 2; ++r)
      ExpectPush(rig.Recv(r), clock + 1, model.table,
                 "worker " + std::to_string(r) + ", push " + std::to_string(clock + 1));
  }
  rig.shard->Stop();
  const ShardStats s = rig.shard->GetStats();
  EXPECT_EQ(s.push_copy_bytes, 0) << "the Ack did not release the held push";
  EXPECT_EQ(s.frames_dropped, 0);
  EXPECT_EQ(s.repushes, 0);
}

// Acks and Resyncs that lie (a push not sent yet), carry rows, payload,
// flags or parts, or name an unknown table, and an update acknowledging a
// push not sent yet: dropped and counted, and nothing in them is used (the
// hold stays, nothing is pushed again, the sums stay exact).
TEST(ResyncShardTest, MalformedAcksAndResyncsAreDropped) {
  Rig rig(TwoColumnConfig(2), 2);
  ASSERT_OK(rig.started);
  Model model;
  const int64_t m = 2;
  RunInStep(rig, model, m);
  int bad = 0;
  rig.Send(1, Control(1, MsgType::kAck, m + 1)), ++bad;
  rig.Send(1, Control(1, MsgType::kResync, m + 5)), ++bad;
  rig.Send(1, Control(1, MsgType::kAck, m, /*table=*/9)), ++bad;
  rig.Send(1, Control(1, MsgType::kResync, 0, /*table=*/9)), ++bad;
  {
    WireHeader h = From(1, MsgType::kResync, 0, 1, 0);  // a row
    rig.Send(1, Frames(h, {0}, {1, 1})), ++bad;
  }
  {
    auto f = Control(1, MsgType::kAck, m);  // a payload frame
    f.emplace_back(8);
    rig.Send(1, std::move(f)), ++bad;
  }
  for (MsgType type : {MsgType::kAck, MsgType::kResync}) {
    WireHeader h = From(1, type, 0, 0, 0);
    h.flags = transport::kFlagMore;
    rig.Send(1, Frames(h, {}, {})), ++bad;
    h.flags = 0;
    h.offset = 1;
    rig.Send(1, Frames(h, {}, {})), ++bad;
    h.offset = 0;
    h.aux = -1;
    rig.Send(1, Frames(h, {}, {})), ++bad;
  }
  // An update of worker 1's next clock acknowledging push m + 1: dropped
  // whole (its deltas are not in the model).
  rig.Send(1, Frames(From(1, MsgType::kUpdate, m, kAll.size(), m + 1), kAll,
                     std::vector<float>(kAll.size() * kWidth, 100.0f))),
      ++bad;
  ASSERT_TRUE(rig.Settle());
  const int64_t copied = rig.shard->GetStats().push_copy_bytes;
  // Worker 1 has not acknowledged push m: worker 0's write goes into a copy.
  rig.Send(0, model.Update(0, m, m));
  rig.Send(1, model.Update(1, m, m));
  for (int r = 0; r < 2; ++r)
    ExpectPush(rig.Recv(r), m + 1, model.table, "worker " + std::to_string(r) + ", push m + 1");
  EXPECT_FALSE(rig.Recv(1, 200).ok) << "a dropped Resync was answered";
  rig.Send(0, model.Update(0, m + 1, m + 1));
  rig.Send(1, model.Update(1, m + 1, m + 1));
  for (int r = 0; r < 2; ++r)
    ExpectPush(rig.Recv(r), m + 2, model.table, "worker " + std::to_string(r) + ", push m + 2");
  rig.shard->Stop();
  const ShardStats s = rig.shard->GetStats();
  EXPECT_EQ(s.frames_dropped, bad);
  EXPECT_EQ(s.resyncs_received, 0);
  EXPECT_EQ(s.repushes, 0);
  EXPECT_EQ(s.push_copy_bytes - copied, 2 * kTableBytes) << "a lying Ack released the held push";
}

// Without holding (resend_after_connection_loss off, or over inproc, whose
// connections cannot be lost): a Resync is counted and answered with
// nothing, and no write is ever copied aside for a hold.
void ResyncWithoutHold(bool inproc) {
  Config c = TwoColumnConfig(2);
  c.resend_after_connection_loss = inproc;
  Rig rig(c, 2, inproc);
  ASSERT_OK(rig.started);
  Model model;
  const int64_t m = 3;
  RunInStep(rig, model, m);
  rig.Send(0, model.Update(0, m, m));
  ASSERT_TRUE(rig.Settle());
  rig.Send(1, Control(1, MsgType::kResync, m - 1));
  ASSERT_TRUE(rig.Settle());
  EXPECT_FALSE(rig.Recv(1, 300).ok) << "a push was sent again with nothing held";
  rig.Send(1, model.Update(1, m, m));
  for (int r = 0; r < 2; ++r)
    ExpectPush(rig.Recv(r), m + 1, model.table, "worker " + std::to_string(r) + ", push m + 1");
  rig.shard->Stop();
  const ShardStats s = rig.shard->GetStats();
  EXPECT_EQ(s.resyncs_received, 1);
  EXPECT_EQ(s.repushes, 0);
  EXPECT_EQ(s.push_copy_bytes, 0);
  EXPECT_EQ(s.frames_dropped, 0);
  EXPECT_EQ(s.pushes_sent, 2 * (m + 1));
}

TEST(ResyncShardTest, ResendOffNeverPushesAgain) { ResyncWithoutHold(/*inproc=*/false); }
TEST(ResyncShardTest, InprocNeverHolds) { ResyncWithoutHold(/*inproc=*/true); }

// A worker that lost its connection before any push reached it sends its
// subscription again: the same rows again are taken silently (also when
// sent in parts), a subscription cut off after its first part restarts at
// offset 0, and different rows are dropped and counted. The worker stays in
// one push group: one push per clock, exact.
TEST(ResyncShardTest, RepeatedSubscriptionIsHarmless) {
  Rig rig(TwoColumnConfig(2), 2);
  ASSERT_OK(rig.started);
  Model model;
  auto subscribe = [](uint32_t rank, const std::vector<uint64_t>& rows, uint64_t offset,
                      bool more) {
    WireHeader h = From(rank, MsgType::kSubscribe, 0, rows.size(), 0);
    h.offset = offset;
    h.flags = more ? transport::kFlagMore : 0;
    return Frames(h, rows, {});
  };
  rig.Send(0, subscribe(0, kAll, 0, false));
  rig.Send(1, subscribe(1, {0, 1}, 0, true));  // cut off
  rig.Send(1, subscribe(1, kAll, 0, false));
  rig.Send(1, subscribe(1, kAll, 0, false));
  rig.Send(1, subscribe(1, {0, 1}, 0, true));
  rig.Send(1, subscribe(1, {2, 3}, 2, false));
  ASSERT_TRUE(rig.Settle());
  EXPECT_EQ(rig.shard->GetStats().frames_dropped, 0);
  rig.Send(1, subscribe(1, {0, 1, 2}, 0, false));
  rig.Send(1, subscribe(1, {1, 2, 3}, 0, false));
  ASSERT_TRUE(rig.Settle());
  EXPECT_EQ(rig.shard->GetStats().frames_dropped, 2);
  for (int64_t clock = 0; clock < 3; ++clock) {
    for (int r = 0; r < 2; ++r) rig.Send(r, model.Update(r, clock, clock));
    for (int r = 0; r < 2; ++r)
      ExpectPush(rig.Recv(r), clock + 1, model.table,
                 "worker " + std::to_string(r) + ", push " + std::to_string(clock + 1));
  }
  EXPECT_FALSE(rig.Recv(1, 200).ok) << "worker 1 was pushed to twice";
  rig.shard->Stop();
  const ShardStats s = rig.shard->GetStats();
  EXPECT_EQ(s.frames_dropped, 2);
  EXPECT_EQ(s.pushes_sent, 6);
}

// Pipelined updates: a worker that resyncs after an early part of the next
// push went out (it may be lost) restarts its cut-off update at offset 0
// (the Resync leaves its message in parts as it was) and gets the next push
// whole, alone; the others get its last part as usual.
TEST(ResyncShardTest, ResyncAfterAnEarlyPartGetsTheNextPushWhole) {
  Config c;
  c.num_workers = 2;
  c.tables = {{"t", 8, 16}};    // 64-byte rows
  c.pipeline_part_bytes = 128;  // an early part once two rows are ready
  Rig rig(c, 2);
  ASSERT_OK(rig.started);
  const std::vector<uint64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint64_t> low = {0, 1, 2, 3}, high = {4, 5, 6, 7};
  auto update = [](uint32_t rank, int64_t clock, const std::vector<uint64_t>& rows, uint64_t offset,
                   bool more, float value, int64_t aux) {
    WireHeader h = testing::Header(MsgType::kUpdate, 0, clock, rows.size(), 16);
    h.sender = rank;
    h.aux = aux;
    h.offset = offset;
    h.flags = more ? transport::kFlagMore : 0;
    return Frames(h, rows, std::vector<float>(rows.size() * 16, value));
  };
  for (int r = 0; r < 2; ++r) {
    WireHeader h = testing::Header(MsgType::kSubscribe, 0, 0, 8, 16);
    h.sender = r;
    rig.Send(r, Frames(h, all, {}));
  }
  for (int r = 0; r < 2; ++r) rig.Send(r, update(r, 0, all, 0, false, 1.0f, 0));
  for (int r = 0; r < 2; ++r) {
    const Got g = rig.Recv(r);
    ASSERT_TRUE(g.ok);
    EXPECT_EQ(g.values, std::vector<float>(8 * 16, 2.0f));
  }
  // Clock 1: worker 0 whole, worker 1 rows 0-3: an early part to both.
  rig.Send(0, update(0, 1, all, 0, false, 1.0f, 1));
  rig.Send(1, update(1, 1, low, 0, true, 2.0f, 1));
  for (int r = 0; r < 2; ++r) {
    const Got early = rig.Recv(r);
    ASSERT_TRUE(early.ok);
    EXPECT_EQ(early.h.clock, 2);
    EXPECT_EQ(early.h.row_count, 4u);
    EXPECT_TRUE(early.h.flags & transport::kFlagMore);
  }
  // Worker 1's connection came back: it resyncs and sends its update again.
  rig.Send(1, Control(1, MsgType::kResync, 1));
  rig.Send(1, update(1, 1, low, 0, true, 2.0f, 1));
  rig.Send(1, update(1, 1, high, 4, false, 2.0f, 1));
  const Got rest = rig.Recv(0);
  ASSERT_TRUE(rest.ok);
  EXPECT_EQ(rest.h.clock, 2);
  EXPECT_EQ(rest.h.offset, 4u);
  EXPECT_EQ(rest.h.row_count, 4u);
  EXPECT_EQ(rest.h.flags, 0u);
  EXPECT_EQ(rest.values, std::vector<float>(4 * 16, 5.0f));
  const Got whole = rig.Recv(1);
  ASSERT_TRUE(whole.ok);
  EXPECT_EQ(whole.h.clock, 2);
  EXPECT_EQ(whole.h.offset, 0u) << "the resynced worker got only the rest of the push";
  EXPECT_EQ(whole.h.row_count, 8u);
  EXPECT_EQ(whole.h.flags, 0u);
  EXPECT_EQ(whole.values, std::vector<float>(8 * 16, 5.0f));
  EXPECT_FALSE(rig.Recv(1, 200).ok);
  rig.shard->Stop();
  const ShardStats s = rig.shard->GetStats();
  EXPECT_EQ(s.resyncs_received, 1);
  EXPECT_EQ(s.repushes, 0);  // it had installed push 1
  EXPECT_EQ(s.repeated_rows_skipped, 4);
  EXPECT_EQ(s.early_push_parts, 1);
  EXPECT_EQ(s.frames_dropped, 0);
}

}  // namespace
}  // namespace geeps
