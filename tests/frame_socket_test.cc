// transport::Frame and transport::Socket, the data plane's frames and
// sockets by names without ZeroMQ's header: owned, copied, shared and lent
// bytes (a lent buffer handed back exactly once, after the receiver closed
// its frame), whole messages in and out, the errors, the source connection
// of a received frame.
#include "transport/frame.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "transport/socket.h"
#include "transport/socket_util.h"

namespace geeps::transport {
namespace {

using std::chrono::milliseconds;

// A worker's DEALER (rank 3) connected to a shard's ROUTER at `endpoint`.
struct Pair {
  explicit Pair(const std::string& endpoint) {
    auto c = NewContext();
    EXPECT_TRUE(c.ok());
    context = std::move(c).value();
    auto r = BindShardSocket(*context, endpoint, 1 << 20, nullptr, &bound);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    router = std::move(r).value();
    auto d = ConnectWorkerSocket(*context, bound, 3, 1 << 20);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    dealer = std::move(d).value();
  }
  // Receives one message on `s` within 5 s.
  bool Receive(Socket& s, std::vector<Frame>* frames) {
    for (int i = 0; i < 100; ++i) {
      if (s.TryReceive(context.get(), frames)) return true;
      PollSockets({&s}, milliseconds(50));
    }
    return false;
  }
  ContextPtr context;
  std::string bound;
  Socket router;
  Socket dealer;
};

TEST(FrameTest, OwnedCopiedAndMovedBytes) {
  Frame empty;
  EXPECT_EQ(empty.size(), 0u);
  Frame filled(5);
  std::memcpy(filled.data(), "hello", 5);
  EXPECT_EQ(filled.to_string(), "hello");
  const std::string text = "a copy";
  Frame copy(text.data(), text.size());
  EXPECT_EQ(copy.to_string(), text);
  EXPECT_NE(copy.data(), static_cast<const void*>(text.data()));
  Frame moved(std::move(filled));  // a small frame's bytes move with it
  EXPECT_EQ(moved.to_string(), "hello");
  EXPECT_EQ(filled.size(), 0u);  // NOLINT(bugprone-use-after-move): empty by contract
  copy = std::move(moved);
  EXPECT_EQ(copy.to_string(), "hello");
}

TEST(FrameTest, SharedBytesOutliveTheFirstFrame) {
  std::vector<char> big(100000, 'x');
  auto first = std::make_unique<Frame>(big.data(), big.size());
  Frame second;
  second.Share(*first);
  EXPECT_EQ(second.data(), first->data());  // no copy
  first.reset();
  EXPECT_EQ(second.size(), big.size());
  EXPECT_EQ(static_cast<const char*>(second.data())[99999], 'x');
}

void Count(void* /*data*/, void* hint) { static_cast<std::atomic<int>*>(hint)->fetch_add(1); }

TEST(FrameTest, ALentBufferComesBackOnceAfterTheReceiverIsDone) {
  Pair p("inproc://frame-lent");
  std::vector<float> rows(4096, 1.5f);
  std::atomic<int> back{0};
  Frame header(std::string("H").data(), 1);
  Frame payload = Frame::Lend(rows.data(), rows.size() * sizeof(float), &Count, &back);
  p.dealer.Send(header, true);
  p.dealer.Send(payload, false);
  EXPECT_EQ(payload.size(), 0u);  // sent: the frame is empty
  std::vector<Frame> frames;
  ASSERT_TRUE(p.Receive(p.router, &frames));
  ASSERT_EQ(frames.size(), 3u);  // routing id, header, payload
  EXPECT_EQ(frames[0].to_string(), "w3");
  EXPECT_TRUE(frames[0].more());
  EXPECT_FALSE(frames[2].more());
  EXPECT_EQ(frames[2].data(), static_cast<const void*>(rows.data()));  // inproc: no copy
  EXPECT_EQ(back.load(), 0);
  frames.clear();
  for (int i = 0; i < 100 && back.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(back.load(), 1);
}

TEST(SocketTest, WholeMessagesInOrderAndNothingWhenEmpty) {
  Pair p("inproc://socket-order");
  std::vector<Frame> frames;
  EXPECT_FALSE(p.router.TryReceive(p.context.get(), &frames));
  EXPECT_GE(p.router.fd(), 0);
  for (int i = 0; i < 3; ++i) {
    p.dealer.Send("m" + std::to_string(i), true);
    p.dealer.Send(std::string("end"), false);
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(p.Receive(p.router, &frames));
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(frames[1].to_string(), "m" + std::to_string(i));
  }
  // Back to the worker by its routing id.
  p.router.Send(std::string("w3"), true);
  p.router.Send(std::string("push"), false);
  ASSERT_TRUE(p.Receive(p.dealer, &frames));
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].to_string(), "push");
  EXPECT_EQ(frames[0].source_fd(), -1);  // inproc has no descriptor
}

TEST(SocketTest, AFrameOverTcpNamesItsConnection) {
  Pair p("tcp://127.0.0.1:*");
  p.dealer.Send(std::string("hello"), false);
  std::vector<Frame> frames;
  ASSERT_TRUE(p.Receive(p.router, &frames));
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_GE(frames[1].source_fd(), 0);
}

TEST(SocketTest, AClosedContextIsAnErrorThatSaysSo) {
  Pair p("inproc://socket-closed");
  std::thread closer([&] { p.context->shutdown(); });
  closer.join();
  std::vector<Frame> frames;
  try {
    p.router.TryReceive(p.context.get(), &frames);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(e.context_closed()) << e.what();
  }
}

TEST(SocketTest, PollSocketsWaitsAtMostItsLimit) {
  Pair p("inproc://socket-poll");
  const auto start = std::chrono::steady_clock::now();
  PollSockets({&p.router, &p.dealer}, milliseconds(100));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(90));
}

}  // namespace
}  // namespace geeps::transport
