// The control plane's message layer (transport/control_link.h): ZeroMQ's
// links over inproc and loopback tcp, and the in-memory network that the
// protocol cores' tests drive (transport/memory_link.h).
#include "transport/control_link.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "transport/memory_link.h"

namespace geeps::transport {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Waits up to 5 s for one message on `link`.
bool ReceiveWithin(ControlLink& link, ControlMessage* m) {
  const auto deadline = steady_clock::now() + milliseconds(5000);
  while (steady_clock::now() < deadline) {
    if (link.TryReceive(m)) return true;
    link.Wait(milliseconds(50));
  }
  return false;
}

TEST(ControlLinkTest, RoundTripOverZeroMq) {
  zmq::context_t context;
  auto coordinator = BindControlLink(context, "inproc://control-link-test", nullptr);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().ToString();
  auto rank = ConnectControlLink(context, "inproc://control-link-test", "r1.abc", nullptr);
  ASSERT_TRUE(rank.ok()) << rank.status().ToString();
  (*rank)->Send("ignored", "HELLO 1");
  ControlMessage m;
  ASSERT_TRUE(ReceiveWithin(**coordinator, &m));
  EXPECT_EQ(m.from, "r1.abc");
  EXPECT_EQ(m.text, "HELLO 1");
  EXPECT_TRUE(m.one_frame);
  (*coordinator)->Send("r1.abc", "WELCOME");
  ASSERT_TRUE(ReceiveWithin(**rank, &m));
  EXPECT_EQ(m.from, "");
  EXPECT_EQ(m.text, "WELCOME");
  // To a name nobody has: gone, and nothing breaks.
  (*coordinator)->Send("r9.zzz", "HB");
  EXPECT_TRUE((*coordinator)->status().ok());
}

TEST(ControlLinkTest, AMessageOfTwoFramesIsMarked) {
  zmq::context_t context;
  auto coordinator = BindControlLink(context, "inproc://control-link-frames", nullptr);
  ASSERT_TRUE(coordinator.ok());
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::routing_id, "r2.x");
  raw.connect("inproc://control-link-frames");
  raw.send(zmq::str_buffer("HB"), zmq::send_flags::sndmore);
  raw.send(zmq::str_buffer("HB"), zmq::send_flags::none);
  ControlMessage m;
  ASSERT_TRUE(ReceiveWithin(**coordinator, &m));
  EXPECT_FALSE(m.one_frame);
  EXPECT_EQ(m.text, "");
  EXPECT_EQ(m.from, "r2.x");
}

TEST(ControlLinkTest, APortInUseIsUnavailable) {
  zmq::context_t context;
  auto first = BindControlLink(context, "tcp://127.0.0.1:*", nullptr);
  ASSERT_TRUE(first.ok());
  zmq::socket_t probe(context, zmq::socket_type::router);
  probe.bind("tcp://127.0.0.1:*");
  const std::string taken = probe.get(zmq::sockopt::last_endpoint);
  auto second = BindControlLink(context, taken, nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(taken), std::string::npos) << second.status().message();
}

TEST(ControlLinkTest, WakeEndsAWaitEarly) {
  zmq::context_t context;
  auto link = BindControlLink(context, "inproc://control-link-wake", nullptr);
  ASSERT_TRUE(link.ok());
  std::thread waker([&] {
    std::this_thread::sleep_for(milliseconds(50));
    (*link)->Wake();
  });
  const auto start = steady_clock::now();
  (*link)->Wait(milliseconds(20000));
  waker.join();
  EXPECT_LT(steady_clock::now() - start, milliseconds(10000));
  // A Wake with nobody waiting ends the next Wait.
  (*link)->Wake();
  const auto again = steady_clock::now();
  (*link)->Wait(milliseconds(20000));
  EXPECT_LT(steady_clock::now() - again, milliseconds(10000));
}

TEST(ControlLinkTest, AClosedContextFailsTheLinkWithAStatus) {
  auto context = std::make_unique<zmq::context_t>();
  auto link = BindControlLink(*context, "inproc://control-link-closed", nullptr);
  ASSERT_TRUE(link.ok());
  std::thread closer([&] { context->shutdown(); });
  closer.join();
  ControlMessage m;
  EXPECT_FALSE((*link)->TryReceive(&m));
  EXPECT_FALSE((*link)->status().ok());
  (*link)->Wait(milliseconds(20000));  // returns at once
  link->reset();
}

TEST(MemoryNetworkTest, MessagesWaitUntilDelivered) {
  MemoryNetwork net;
  auto hub = net.Open("r0");
  auto a = net.Open("r1", "r0");
  auto b = net.Open("r2", "r0");
  a->Send("anything", "one");
  b->Send("", "two");
  a->Send("", "three");
  ControlMessage m;
  EXPECT_FALSE(hub->TryReceive(&m));
  ASSERT_EQ(net.in_flight(), 3u);
  EXPECT_EQ(net.InFlight()[0].to, "r0");
  EXPECT_TRUE(net.Drop(0));       // "one"
  EXPECT_TRUE(net.Duplicate(1));  // "three" twice
  EXPECT_TRUE(net.Deliver(2));    // the second "three"
  EXPECT_FALSE(net.Deliver(7));
  net.DeliverAll(/*reversed=*/true);  // "three", then "two"
  std::vector<std::string> got;
  while (hub->TryReceive(&m)) got.push_back(m.from + ":" + m.text);
  EXPECT_EQ(got, (std::vector<std::string>{"r1:three", "r1:three", "r2:two"}));
  EXPECT_EQ(net.delivered(), 3);
  EXPECT_EQ(net.dropped(), 1);
  hub->Send("r2", "HB");
  net.DeliverAll();
  ASSERT_TRUE(b->TryReceive(&m));
  EXPECT_EQ(m.from, "");
  EXPECT_EQ(m.text, "HB");
  EXPECT_FALSE(a->TryReceive(&m));
}

// A network that delivers at once, with rank 0's link and rank 1's.
class AtOnceTest : public ::testing::Test {
 protected:
  AtOnceTest() { net_.set_deliver_at_once(true); }
  MemoryNetwork net_;
  std::unique_ptr<ControlLink> hub_ = net_.Open("r0");
  std::unique_ptr<ControlLink> a_ = net_.Open("r1", "r0");
};

TEST_F(AtOnceTest, DeliversInOrderAndAClosedLinkLosesItsMail) {
  a_->Send("", "x");
  a_->Send("", "y");
  EXPECT_EQ(net_.in_flight(), 0u);
  ControlMessage m;
  ASSERT_TRUE(hub_->TryReceive(&m));
  EXPECT_EQ(m.text, "x");
  ASSERT_TRUE(hub_->TryReceive(&m));
  EXPECT_EQ(m.text, "y");
  a_.reset();
  hub_->Send("r1", "to nobody");
  EXPECT_EQ(net_.delivered(), 3);
  // A link reopened under the name starts empty.
  auto again = net_.Open("r1", "r0");
  EXPECT_FALSE(again->TryReceive(&m));
}

TEST_F(AtOnceTest, WaitEndsOnMailOrWake) {
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(50));
    a_->Send("", "HB");
  });
  const auto start = steady_clock::now();
  ControlMessage m;
  EXPECT_TRUE(ReceiveWithin(*hub_, &m));
  sender.join();
  EXPECT_LT(steady_clock::now() - start, milliseconds(5000));
  hub_->Wake();
  const auto again = steady_clock::now();
  hub_->Wait(milliseconds(20000));
  EXPECT_LT(steady_clock::now() - again, milliseconds(10000));
}

}  // namespace
}  // namespace geeps::transport
