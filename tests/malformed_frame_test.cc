// Malformed and unexpected frames sent to a shard are dropped and counted;
// they never crash it or change its rows.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "cluster/embedded_cluster_testing.h"
#include "geeps/embedded_cluster.h"
#include "host_view.h"
#include "process_util.h"
#include "server/shard_channel.h"
#include "shard_wire_util.h"
#include "test_util.h"
#include "transport/socket_util.h"
#include "transport/tsan.h"
#include "transport/wire.h"

namespace geeps {
namespace {

using transport::MsgType;
using transport::WireHeader;

using testing::Frames;
using testing::Header;
using testing::RecvPush;
using testing::Send;

TEST(MalformedFrameTest, ShardDropsAndCountsEveryBadFrame) {
  Config c;
  c.num_workers = 1;
  c.tables = {{"t", 10, 3}, {"local", 4, 2, true}};
  zmq::context_t ctx;
  testing::g_context = &ctx;
  server::ShardChannel shard(&ctx, c, 0, "inproc://shard-under-test");
  ASSERT_OK(shard.Start());
  const auto socket = testing::WorkerSocket(ctx, 0, "inproc://shard-under-test");
  zmq::socket_t& w = *socket;

  int bad = 0;
  const std::vector<float> three(3, 1.0f);
  // Framing: empty header, short header, garbage, extra frames.
  w.send(zmq::str_buffer(""), zmq::send_flags::none), ++bad;
  w.send(zmq::str_buffer("short"), zmq::send_flags::none), ++bad;
  {
    WireHeader h = Header(MsgType::kUpdate, 0, 0, 1, 3);
    auto f = Frames(h, {1}, three);
    f.emplace_back(4);
    Send(w, std::move(f)), ++bad;
  }
  // Header fields that need the shard's state.
  Send(w, Frames(Header(MsgType::kUpdate, 9, 0, 1, 3), {1}, three)), ++bad;         // no table 9
  Send(w, Frames(Header(MsgType::kUpdate, 1, 0, 1, 2), {1}, {1, 1})), ++bad;        // local table
  Send(w, Frames(Header(MsgType::kUpdate, 0, 0, 1, 4), {1}, {1, 1, 1, 1})), ++bad;  // width
  Send(w, Frames(Header(MsgType::kUpdate, 0, 0, 1, 3), {10}, three)), ++bad;        // row range
  Send(w, Frames(Header(MsgType::kUpdate, 0, 0, 2, 3), {5, 2}, {1, 1, 1, 1, 1, 1})), ++bad;
  Send(w, Frames(Header(MsgType::kUpdate, 0, 3, 1, 3), {1}, three)), ++bad;  // clock 3
  Send(w, Frames(Header(MsgType::kPush, 0, 1, 0, 3), {}, {})), ++bad;        // wrong direction
  Send(w, Frames(Header(MsgType::kPush, 0, 1, 1, 3), {}, three)), ++bad;     // a push with rows
  {
    WireHeader h = Header(MsgType::kUpdate, 0, 0, 1, 3);
    h.sender = 5;  // does not match the routing id
    Send(w, Frames(h, {1}, three)), ++bad;
  }
  {
    auto f = Frames(Header(MsgType::kUpdate, 0, 0, 1, 3), {1}, three);
    f[2] = zmq::message_t(11);  // truncated payload
    Send(w, std::move(f)), ++bad;
  }
  // A good subscription and two good clocks: the pushes are exact.
  Send(w, Frames(Header(MsgType::kSubscribe, 0, 0, 2, 3), {2, 7}, {}));
  Send(w, Frames(Header(MsgType::kSubscribe, 0, 0, 1, 3), {3}, {})), ++bad;  // second one
  Send(w, Frames(Header(MsgType::kUpdate, 0, 0, 2, 3), {2, 3}, {1, 2, 3, 4, 5, 6}));
  int64_t clock = -1;
  std::vector<float> rows = RecvPush(w, &clock);
  EXPECT_EQ(clock, 1);
  EXPECT_EQ(rows, (std::vector<float>{1, 2, 3, 0, 0, 0}));
  // Clock 0 again: a repeat (a resend), skipped and counted apart, not a drop.
  Send(w, Frames(Header(MsgType::kUpdate, 0, 0, 1, 3), {2}, three));
  Send(w, Frames(Header(MsgType::kUpdate, 0, 1, 1, 3), {7}, {10, 20, 30}));
  rows = RecvPush(w, &clock);
  EXPECT_EQ(clock, 2);
  EXPECT_EQ(rows, (std::vector<float>{1, 2, 3, 10, 20, 30}));
  shard.Stop();
  EXPECT_EQ(shard.GetStats().frames_dropped, bad);
  EXPECT_EQ(shard.GetStats().repeated_rows_skipped, 1);
  EXPECT_EQ(shard.GetStats().updates_applied, 2);
  std::vector<float> all = shard.RowsForTesting(0);
  ASSERT_EQ(all.size(), 30u);
  EXPECT_EQ(all[2 * 3], 1.0f);
  EXPECT_EQ(all[3 * 3 + 2], 6.0f);
  EXPECT_EQ(all[1 * 3], 0.0f);  // every bad update to row 1 was dropped
}

// Past the first clock a shard adds the current clock's deltas straight into
// its rows, which is only sound because every worker has subscribed by then:
// a subscription that comes later is dropped, and pushes stay exact.
TEST(MalformedFrameTest, SubscriptionAfterTheFirstClockIsDropped) {
  Config c;
  c.num_workers = 2;
  c.tables = {{"t", 4, 2}};
  testing::ShardRig rig(c, "inproc://shard-late-subscribe", 2);
  ASSERT_OK(rig.started);
  server::ShardChannel& shard = rig.shard;
  zmq::socket_t &w0 = rig.worker(0), &w1 = rig.worker(1);
  auto update = [](uint32_t sender, int64_t clock, float v) {
    WireHeader h = Header(MsgType::kUpdate, 0, clock, 1, 2);
    h.sender = sender;
    return Frames(h, {1}, {v, v});
  };
  Send(w0, Frames(Header(MsgType::kSubscribe, 0, 0, 1, 2), {1}, {}));
  Send(w0, update(0, 0, 1));
  Send(w1, update(1, 0, 2));
  int64_t clock = -1;
  EXPECT_EQ(RecvPush(w0, &clock), (std::vector<float>{3, 3}));
  EXPECT_EQ(clock, 1);
  Send(w0, update(0, 1, 10));  // into the rows at once
  {
    WireHeader h = Header(MsgType::kSubscribe, 0, 0, 1, 2);
    h.sender = 1;
    Send(w1, Frames(h, {1}, {}));  // too late: dropped, no push to w1
  }
  Send(w1, update(1, 1, 20));
  EXPECT_EQ(RecvPush(w0, &clock), (std::vector<float>{33, 33}));
  EXPECT_EQ(clock, 2);
  w1.set(zmq::sockopt::rcvtimeo, 200);
  zmq::message_t none;
  EXPECT_FALSE(w1.recv(none));
  shard.Stop();
  EXPECT_EQ(shard.GetStats().frames_dropped, 1);
}

// A worker that resends what a connection reset may have lost (issue 15,
// docs/architecture.md "Connection loss and resend") does no harm: an update
// of a clock it completed is skipped, and a message in parts that restarts
// at offset 0 after some parts arrived applies only the rows not applied
// before. Sums stay exact; none of it counts as a dropped frame.
TEST(MalformedFrameTest, RepeatedAndRestartedUpdatesLeaveExactSums) {
  Config c;
  c.num_workers = 1;
  c.tables = {{"t", 4, 2}};
  testing::ShardRig rig(c, "inproc://shard-repeats", 1);
  ASSERT_OK(rig.started);
  server::ShardChannel& shard = rig.shard;
  zmq::socket_t& w = rig.worker(0);
  // An update part of `clock` over `rows`, each value v; `more`: not the last.
  auto part = [](int64_t clock, std::vector<uint64_t> rows, uint64_t offset, float v, bool more) {
    WireHeader h = Header(MsgType::kUpdate, 0, clock, rows.size(), 2);
    h.offset = offset;
    h.flags = more ? transport::kFlagMore : 0;
    return Frames(h, rows, std::vector<float>(rows.size() * 2, v));
  };
  Send(w, Frames(Header(MsgType::kSubscribe, 0, 0, 4, 2), {0, 1, 2, 3}, {}));
  Send(w, part(0, {0, 1, 2, 3}, 0, 1, false));
  int64_t clock = -1;
  EXPECT_EQ(RecvPush(w, &clock), std::vector<float>(8, 1.0f));
  EXPECT_EQ(clock, 1);
  Send(w, part(0, {0, 1, 2, 3}, 0, 1, false));  // clock 0 again: skipped
  // Clock 1 in two parts; the first arrives, then the whole message again.
  Send(w, part(1, {0, 1}, 0, 2, true));
  Send(w, part(1, {0, 1}, 0, 2, true));
  Send(w, part(1, {2, 3}, 2, 2, false));
  EXPECT_EQ(RecvPush(w, &clock), std::vector<float>(8, 3.0f));
  EXPECT_EQ(clock, 2);
  // Clock 2 restarted twice, cut differently the second time.
  Send(w, part(2, {0, 1, 2}, 0, 4, true));
  Send(w, part(2, {0}, 0, 4, true));
  Send(w, part(2, {1, 2, 3}, 1, 4, false));
  EXPECT_EQ(RecvPush(w, &clock), std::vector<float>(8, 7.0f));
  EXPECT_EQ(clock, 3);
  shard.Stop();
  const ShardStats st = shard.GetStats();
  EXPECT_EQ(st.frames_dropped, 0);
  EXPECT_EQ(st.repeated_rows_skipped, 4 + 2 + 3);
  EXPECT_EQ(st.rows_applied, 12);
}

// A stranger that sends a frame larger than any legal one (here one byte
// over transport::LargestFrameBytes) is disconnected by ZeroMQ when the
// frame's header announces it (ZMQ_MAXMSGSIZE), before anything is
// allocated for it: the frame never reaches the shard, whose workers go on.
// Before, every frame up to 2 GB was received whole (256 MiB frames from a
// foreign socket grew the process by 604 MB).
TEST(MalformedFrameTest, AFrameOverTheLimitDisconnectsItsSender) {
  Config c;
  c.num_workers = 1;
  c.tables = {{"t", 8, 4}};
  c.max_message_bytes = 4096;
  const int64_t limit = transport::LargestFrameBytes(c);
  zmq::context_t ctx;
  testing::g_context = &ctx;
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(testing::FreePort());
  server::ShardChannel shard(&ctx, c, 0, endpoint);
  ASSERT_OK(shard.Start());
  // The stranger, watched for its disconnection.
  zmq::socket_t stranger(ctx, zmq::socket_type::dealer);
  stranger.set(zmq::sockopt::routing_id, "intruder");
  stranger.set(zmq::sockopt::reconnect_ivl, -1);  // stay disconnected
  ASSERT_EQ(zmq_socket_monitor(stranger.handle(), "inproc://stranger-events",
                               ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED),
            0);
  zmq::socket_t events(ctx, zmq::socket_type::pair);
  events.set(zmq::sockopt::rcvtimeo, 10000);
  events.connect("inproc://stranger-events");
  auto next_event = [&events]() -> int {
    zmq::message_t id, addr;
    if (!events.recv(id)) return -1;
    (void)events.recv(addr);
    uint16_t e;
    std::memcpy(&e, id.data(), sizeof(e));
    return e;
  };
  stranger.connect(endpoint);
  ASSERT_EQ(next_event(), ZMQ_EVENT_CONNECTED);
  std::vector<char> big(static_cast<size_t>(limit) + 1, 'x');
  stranger.send(zmq::buffer(big), zmq::send_flags::none);
  EXPECT_EQ(next_event(), ZMQ_EVENT_DISCONNECTED) << "the stranger was not disconnected";
  // A legal frame of exactly the limit is not refused: a worker's update
  // in one part of max_message_bytes, and the shard answers.
  const auto socket = testing::WorkerSocket(ctx, 0, endpoint);
  zmq::socket_t& w = *socket;
  const std::vector<uint64_t> rows = {0, 1, 2, 3, 4, 5, 6, 7};
  Send(w, Frames(Header(MsgType::kSubscribe, 0, 0, 8, 4), rows, {}));
  Send(w, Frames(Header(MsgType::kUpdate, 0, 0, 8, 4), rows, std::vector<float>(32, 2.0f)));
  int64_t clock = -1;
  EXPECT_EQ(RecvPush(w, &clock), std::vector<float>(32, 2.0f));
  // The cut-off connection is counted (the shard's socket monitor).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (shard.GetStats().connections_closed < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  shard.Stop();
  const ShardStats s = shard.GetStats();
  EXPECT_EQ(s.connections_closed, 1) << "the stranger's disconnection was not counted";
  EXPECT_EQ(s.frames_dropped, 0) << "the oversized frame reached the shard";
  EXPECT_LT(s.bytes_received, limit) << "the oversized frame reached the shard";
}

// A stranger connects with a worker's routing id before that worker starts
// and sends frames the shard drops; the real worker then connects with the
// same id. It takes the id over (ZMQ_ROUTER_HANDOVER) and its job goes on;
// before, ZeroMQ kept the first connection and dropped every message of
// the real worker, and the job failed after its timeout blaming a slow
// worker.
TEST(MalformedFrameTest, AWorkerTakesItsRoutingIdOverFromASquatter) {
  Config c;
  c.num_workers = 1;
  c.tables = {{"t", 4, 2}};
  zmq::context_t ctx;
  testing::g_context = &ctx;
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(testing::FreePort());
  server::ShardChannel shard(&ctx, c, 0, endpoint);
  ASSERT_OK(shard.Start());
  ::testing::internal::CaptureStderr();
  const auto squatter = testing::WorkerSocket(ctx, 0, endpoint);
  squatter->send(zmq::str_buffer("not a message"), zmq::send_flags::none);
  // Wait until the shard has seen (and dropped) it: the squatter holds w0.
  for (int i = 0; i < 500 && shard.GetStats().frames_dropped == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(shard.GetStats().frames_dropped, 1);
  const auto socket = testing::WorkerSocket(ctx, 0, endpoint);
  zmq::socket_t& w = *socket;
  const std::vector<uint64_t> rows = {0, 1, 2, 3};
  Send(w, Frames(Header(MsgType::kSubscribe, 0, 0, 4, 2), rows, {}));
  Send(w, Frames(Header(MsgType::kUpdate, 0, 0, 4, 2), rows, std::vector<float>(8, 3.0f)));
  int64_t clock = -1;
  EXPECT_EQ(RecvPush(w, &clock), std::vector<float>(8, 3.0f))
      << "the real worker's messages did not reach the shard";
  EXPECT_EQ(clock, 1);
  // Judged once the squatter's connection has stayed open for 2 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (shard.GetStats().routing_id_handovers == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  shard.Stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(shard.GetStats().routing_id_handovers, 1);
  EXPECT_NE(log.find("messages of worker 0 (routing id w0) came from a new connection while "
                     "the one they came from stayed open"),
            std::string::npos)
      << log;
}

// A worker whose connection ended and that connects again (a reconnect
// after a loss) is not taken for a handover: nothing is counted or logged.
TEST(MalformedFrameTest, AReconnectIsNotAHandover) {
  Config c;
  c.num_workers = 1;
  c.tables = {{"t", 4, 2}};
  zmq::context_t ctx;
  testing::g_context = &ctx;
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(testing::FreePort());
  server::ShardChannel shard(&ctx, c, 0, endpoint);
  ASSERT_OK(shard.Start());
  const std::vector<uint64_t> rows = {0, 1, 2, 3};
  {
    const auto first = testing::WorkerSocket(ctx, 0, endpoint);
    first->set(zmq::sockopt::linger, 2000);
    Send(*first, Frames(Header(MsgType::kSubscribe, 0, 0, 4, 2), rows, {}));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (shard.GetStats().connections_closed < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(shard.GetStats().connections_closed, 1);
  const auto socket = testing::WorkerSocket(ctx, 0, endpoint);
  Send(*socket, Frames(Header(MsgType::kUpdate, 0, 0, 4, 2), rows, std::vector<float>(8, 3.0f)));
  int64_t clock = -1;
  EXPECT_EQ(RecvPush(*socket, &clock), std::vector<float>(8, 3.0f));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past the grace period
  shard.Stop();
  EXPECT_EQ(shard.GetStats().routing_id_handovers, 0);
  EXPECT_EQ(shard.GetStats().frames_dropped, 0);
}

// A worker whose update of a clock does not come (here: late by more than
// half of Config::timeout) is named by the shard that waits for it, while
// the other worker has sent its own: a Read that times out cannot know which
// worker is missing, the shard can.
TEST(MalformedFrameTest, AShardNamesTheWorkerItWaitsFor) {
  Config c;
  c.num_workers = 2;
  c.tables = {{"layer", 4, 2}};
  c.timeout = std::chrono::milliseconds(2000);
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ::testing::internal::CaptureStderr();
  const Status st = (*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                           testing::RecordReadUpdateClock(ps, 0, RowRange(0, 4)));
    for (int i = 0; i < 3; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(h.read));
      (void)w;
      GEEPS_RETURN_IF_ERROR(ps.PostRead(h.read));
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.update));
      (void)d;
      // Worker 1 is late with clock 2 by 1.6 s: past the shard's 1 s (and
      // its 200 ms poll), within the Read's 2 s.
      if (ps.rank() == 1 && i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1600));
      GEEPS_RETURN_IF_ERROR(ps.Update(h.update));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    return Status::OK();
  });
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_OK(st);
  // Iteration 1 completes clock 2 (the recorded prologue is clock 0).
  EXPECT_NE(log.find("table 0 ('layer'): clock 2 has waited"), std::string::npos) << log;
  EXPECT_NE(log.find("for the update of worker 1 (the others have sent theirs)"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("worker 0 ("), std::string::npos) << log;
}

// Random and truncated frames from strangers hit every shard while a cluster
// trains; its sums stay exact and the shards count the drops.
TEST(MalformedFrameTest, InjectedFramesLeaveClusterSumsExact) {
  Config c;
  c.num_workers = 2;
  c.num_shards = 2;
  c.num_channels = 2;
  c.tables = {{"t", 20, 3}};
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  std::atomic<bool> done{false};
  std::thread injector([&] {
    zmq::context_t* ctx = internal::EmbeddedClusterAccess::ZmqContext(**cluster);
    testing::g_context = ctx;
    std::mt19937 rng(1);
    std::vector<std::unique_ptr<zmq::socket_t>> socks;
    const char* ids[] = {"w7", "bogus", "w00", ""};
    for (int s = 0; s < 2; ++s) {
      for (int k = 0; k < 2; ++k) {
        auto sock = std::make_unique<zmq::socket_t>(*ctx, zmq::socket_type::dealer);
        sock->set(zmq::sockopt::linger, 0);
        const char* id = ids[(s * 2 + k) % 4];
        if (*id) sock->set(zmq::sockopt::routing_id, id);
        sock->connect(internal::EmbeddedClusterAccess::ShardEndpoint(s, k));
        socks.push_back(std::move(sock));
      }
    }
    WireHeader h = Header(MsgType::kUpdate, 0, 0, 1, 3);
    for (int i = 0; i < 400 && !done.load(); ++i) {
      zmq::socket_t& sock = *socks[i % socks.size()];
      std::vector<zmq::message_t> frames;
      if (i % 2 == 0) {
        frames = Frames(h, {static_cast<uint64_t>(i % 20)}, {1e6f, 1e6f, 1e6f});
        frames.back() = zmq::message_t(rng() % 12);  // truncated
      } else {
        for (int f = 0, n = 1 + rng() % 3; f < n; ++f) {
          zmq::message_t m(rng() % 64);
          for (size_t b = 0; b < m.size(); ++b) static_cast<unsigned char*>(m.data())[b] = rng();
          frames.push_back(std::move(m));
        }
      }
      Send(sock, std::move(frames));
      if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  Status st = (*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    const auto rows = RowRange(0, 20);
    GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                           testing::RecordReadUpdateClock(ps, 0, rows));
    const ReadHandle r = h.read;
    const UpdateHandle u = h.update;
    for (int i = 0; i < 30; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* buffer, ps.Read(r));
      GEEPS_ASSIGN_OR_RETURN(const std::vector<float> v, testing::ReadBuffer(ps, buffer, 60));
      for (int k = 0; k < 60; ++k)
        W_CHECK(v[k] == static_cast<float>(2 * i * (k % 3 + 1)), "inexact sum");
      GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
      std::vector<float> deltas(60);
      for (int k = 0; k < 60; ++k) deltas[k] = static_cast<float>(k % 3 + 1);
      GEEPS_RETURN_IF_ERROR(testing::WriteBuffer(ps, d, deltas));
      GEEPS_RETURN_IF_ERROR(ps.Update(u));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Status::OK();
  });
  done.store(true);
  injector.join();
  ASSERT_OK(st);
  int64_t dropped = 0;
  for (int s = 0; s < 2; ++s) dropped += (*cluster)->GetShardStats(s).frames_dropped;
  EXPECT_GT(dropped, 0);
}

}  // namespace
}  // namespace geeps
