// The transport seam (src/transport/sockets.h, routing_id.h): each socket
// role's options as set by its factory, read back from the socket; errors
// as Status naming the endpoint; the routing-id codec.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "transport/routing_id.h"
#include "transport/security.h"
#include "transport/socket_util.h"
#include "transport/sockets.h"

namespace geeps::transport {
namespace {

// Waits (at most 5 s) until `socket` has a message queued.
bool WaitForInput(zmq::socket_t& socket) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (HasInput(socket)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

TEST(TransportSocketsTest, ShardRouterOptions) {
  zmq::context_t context;
  std::string actual;
  auto router = BindShardRouter(context, "inproc://shard-router-options", 12345, nullptr, &actual);
  ASSERT_TRUE(router.ok()) << router.status();
  zmq::socket_t& s = **router;
  EXPECT_EQ(actual, "inproc://shard-router-options");
  EXPECT_EQ(s.get(zmq::sockopt::type), ZMQ_ROUTER);
  EXPECT_EQ(s.get(zmq::sockopt::maxmsgsize), 12345);
  EXPECT_EQ(s.get(zmq::sockopt::sndhwm), 0);
  EXPECT_EQ(s.get(zmq::sockopt::rcvhwm), 0);
  EXPECT_EQ(s.get(zmq::sockopt::linger), 1000);
  EXPECT_EQ(s.get(zmq::sockopt::mechanism), ZMQ_NULL);
  // ZMQ_ROUTER_MANDATORY cannot be read back: a message to a routing id no
  // one holds fails instead of vanishing.
  try {
    s.send(zmq::str_buffer("w9"), zmq::send_flags::sndmore);
    s.send(zmq::str_buffer("x"), zmq::send_flags::dontwait);
    ADD_FAILURE() << "a send to an unknown routing id did not fail";
  } catch (const zmq::error_t& e) {
    EXPECT_EQ(e.num(), EHOSTUNREACH);
  }
}

TEST(TransportSocketsTest, ShardRouterReportsTheBoundPort) {
  zmq::context_t context;
  std::string actual;
  auto router = BindShardRouter(context, "tcp://127.0.0.1:*", 4096, nullptr, &actual);
  ASSERT_TRUE(router.ok()) << router.status();
  EXPECT_EQ(actual.rfind("tcp://127.0.0.1:", 0), 0u) << actual;
  EXPECT_NE(actual, "tcp://127.0.0.1:*");
}

TEST(TransportSocketsTest, WorkerDealerOptionsAndRoutingId) {
  zmq::context_t context;
  auto router = BindShardRouter(context, "inproc://worker-dealer", 1 << 20);
  ASSERT_TRUE(router.ok()) << router.status();
  auto dealer = ConnectWorkerDealer(context, "inproc://worker-dealer", 3, 999);
  ASSERT_TRUE(dealer.ok()) << dealer.status();
  zmq::socket_t& d = **dealer;
  EXPECT_EQ(d.get(zmq::sockopt::type), ZMQ_DEALER);
  EXPECT_EQ(d.get(zmq::sockopt::routing_id), "w3");
  EXPECT_EQ(d.get(zmq::sockopt::maxmsgsize), 999);
  EXPECT_EQ(d.get(zmq::sockopt::sndhwm), 0);
  EXPECT_EQ(d.get(zmq::sockopt::rcvhwm), 0);
  EXPECT_EQ(d.get(zmq::sockopt::linger), 1000);
  EXPECT_EQ(d.get(zmq::sockopt::mechanism), ZMQ_NULL);
  EXPECT_GE(SocketFd(d), 0);
  EXPECT_GE(SocketFd(**router), 0);

  // The partition reads the worker's rank from the first frame.
  d.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  ASSERT_TRUE(WaitForInput(**router));
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(TryRecvMultipart(**router, &context, &frames));
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(ParseWorkerRoutingId(frames[0].data(), frames[0].size(), 4), 3);
  EXPECT_EQ(frames[1].to_string(), "hello");
  EXPECT_FALSE(HasInput(**router));
}

TEST(TransportSocketsTest, ControlRouterAndDealerOptions) {
  zmq::context_t context;
  auto router = BindControlRouter(context, "tcp://127.0.0.1:*");
  ASSERT_TRUE(router.ok()) << router.status();
  zmq::socket_t& r = **router;
  EXPECT_EQ(r.get(zmq::sockopt::type), ZMQ_ROUTER);
  EXPECT_EQ(r.get(zmq::sockopt::maxmsgsize), kControlFrameLimit);
  EXPECT_EQ(r.get(zmq::sockopt::linger), 1000);
  const std::string endpoint = r.get(zmq::sockopt::last_endpoint);

  const std::string id = NewPeerRoutingId(5);
  auto dealer = ConnectControlDealer(context, endpoint, id);
  ASSERT_TRUE(dealer.ok()) << dealer.status();
  zmq::socket_t& d = **dealer;
  EXPECT_EQ(d.get(zmq::sockopt::type), ZMQ_DEALER);
  EXPECT_EQ(d.get(zmq::sockopt::routing_id), id);
  EXPECT_EQ(d.get(zmq::sockopt::maxmsgsize), kControlFrameLimit);
  EXPECT_EQ(d.get(zmq::sockopt::linger), 1000);

  // The coordinator reads the rank from the first frame.
  d.send(zmq::str_buffer("HB"), zmq::send_flags::none);
  ASSERT_TRUE(WaitForInput(r));
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(TryRecvMultipart(r, &context, &frames));
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(ParsePeerRoutingId(frames[0].to_string()), 5);
  EXPECT_EQ(frames[1].to_string(), "HB");
}

TEST(TransportSocketsTest, CurveOnlyOffInproc) {
  zmq::context_t context;
  auto keys = NewCurveKeys();
  if (!keys.ok()) GTEST_SKIP() << keys.status();
  auto security = SecurityConfig::Start(&context, *keys);
  ASSERT_TRUE(security.ok()) << security.status();
  const SecurityConfig* sec = security->get();
  {
    auto tcp = BindShardRouter(context, "tcp://127.0.0.1:*", 4096, sec);
    ASSERT_TRUE(tcp.ok()) << tcp.status();
    EXPECT_EQ((*tcp)->get(zmq::sockopt::mechanism), ZMQ_CURVE);
    const std::string endpoint = (*tcp)->get(zmq::sockopt::last_endpoint);
    auto inproc = BindShardRouter(context, "inproc://curve-off", 4096, sec);
    ASSERT_TRUE(inproc.ok()) << inproc.status();
    EXPECT_EQ((*inproc)->get(zmq::sockopt::mechanism), ZMQ_NULL);
    auto control = BindControlRouter(context, "tcp://127.0.0.1:*", sec);
    ASSERT_TRUE(control.ok()) << control.status();
    EXPECT_EQ((*control)->get(zmq::sockopt::mechanism), ZMQ_CURVE);
    auto peer = ConnectControlDealer(context, (*control)->get(zmq::sockopt::last_endpoint),
                                     PeerRoutingId(1, 0), sec);
    ASSERT_TRUE(peer.ok()) << peer.status();
    EXPECT_EQ((*peer)->get(zmq::sockopt::mechanism), ZMQ_CURVE);
    auto dealer = ConnectWorkerDealer(context, endpoint, 0, 4096, sec);
    ASSERT_TRUE(dealer.ok()) << dealer.status();
    EXPECT_EQ((*dealer)->get(zmq::sockopt::mechanism), ZMQ_CURVE);
    auto plain = ConnectWorkerDealer(context, "inproc://curve-off", 0, 4096, sec);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ((*plain)->get(zmq::sockopt::mechanism), ZMQ_NULL);
  }
}

TEST(TransportSocketsTest, WakeSockets) {
  zmq::context_t context;
  auto pull = BindWakePull(context, "inproc://wake-test");
  ASSERT_TRUE(pull.ok()) << pull.status();
  EXPECT_EQ((*pull)->get(zmq::sockopt::type), ZMQ_PULL);
  auto push = ConnectWakePush(context, "inproc://wake-test");
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ((*push)->get(zmq::sockopt::type), ZMQ_PUSH);
  EXPECT_EQ((*push)->get(zmq::sockopt::linger), 0);
  WakeUp(&context, "inproc://wake-test");
  EXPECT_TRUE(WaitForInput(**pull));
}

TEST(TransportSocketsTest, DisconnectMonitor) {
  zmq::context_t context;
  auto router = BindShardRouter(context, "tcp://127.0.0.1:*", 4096);
  ASSERT_TRUE(router.ok()) << router.status();
  auto monitor = NewDisconnectMonitor(context, **router, "tcp://127.0.0.1:*");
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  EXPECT_EQ((*monitor)->get(zmq::sockopt::type), ZMQ_PAIR);
  EXPECT_GE(SocketFd(**monitor), 0);
  EXPECT_EQ(CountDisconnects(**monitor), 0);
  StopMonitor(**router, *monitor);
  EXPECT_EQ(*monitor, nullptr);
}

TEST(TransportSocketsTest, ErrorsNameTheEndpoint) {
  zmq::context_t context;
  auto bad = BindShardRouter(context, "bogus://nowhere", 4096);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(bad.status().message().find("shard: cannot bind bogus://nowhere: "), std::string::npos)
      << bad.status();

  auto dealer = ConnectWorkerDealer(context, "tcp://no-port-here", 2, 4096);
  ASSERT_FALSE(dealer.ok());
  EXPECT_EQ(dealer.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(dealer.status().message().find("tcp://no-port-here"), std::string::npos)
      << dealer.status();

  // A port in use: the cause is ZeroMQ's ("Address already in use").
  auto first = BindControlRouter(context, "tcp://127.0.0.1:*");
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string endpoint = (*first)->get(zmq::sockopt::last_endpoint);
  auto second = BindControlRouter(context, endpoint);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("cannot bind the coordinator at " + endpoint + ": "),
            std::string::npos)
      << second.status();

  auto control = ConnectControlDealer(context, "nonsense", "r1.00", nullptr);
  ASSERT_FALSE(control.ok());
  EXPECT_NE(control.status().message().find("nonsense"), std::string::npos) << control.status();

  auto pull = BindWakePull(context, "inproc://wake-twice");
  ASSERT_TRUE(pull.ok()) << pull.status();
  auto again = BindWakePull(context, "inproc://wake-twice");
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("inproc://wake-twice"), std::string::npos)
      << again.status();
}

TEST(RoutingIdTest, WorkerIds) {
  EXPECT_EQ(WorkerRoutingId(12), "w12");
  for (int rank : {0, 1, 9, 10, 12345, 2147483647}) {
    const std::string id = WorkerRoutingId(rank);
    EXPECT_EQ(ParseWorkerRoutingId(id.data(), id.size(), 2147483647),
              rank == 2147483647 ? -1 : rank)
        << id;
  }
  EXPECT_EQ(ParseWorkerRoutingId("w12", 3, 13), 12);
  EXPECT_EQ(ParseWorkerRoutingId("w12", 3, 12), -1);  // not below num_workers
  EXPECT_EQ(ParseWorkerRoutingId("w01", 3, 12), -1);  // leading zero
  EXPECT_EQ(ParseWorkerRoutingId("x1", 2, 12), -1);
  EXPECT_EQ(ParseWorkerRoutingId("w", 1, 12), -1);
  EXPECT_EQ(ParseWorkerRoutingId("w-1", 3, 12), -1);
  EXPECT_EQ(ParseWorkerRoutingId("w1 ", 3, 12), -1);
  EXPECT_EQ(ParseWorkerRoutingId("w123456789012", 13, 12), -1);  // too long
}

TEST(RoutingIdTest, PeerIds) {
  EXPECT_EQ(PeerRoutingId(7, 0xabc), "r7.0000000000000abc");
  EXPECT_EQ(ParsePeerRoutingId(PeerRoutingId(7, 0xabc)), 7);
  for (int rank : {0, 1, 10, 9999999}) {
    const std::string id = NewPeerRoutingId(rank);
    EXPECT_EQ(id.size(), 2 + std::to_string(rank).size() + 16) << id;
    EXPECT_EQ(ParsePeerRoutingId(id), rank) << id;
  }
  // Random nonces: two processes claiming one rank are told apart.
  EXPECT_NE(NewPeerRoutingId(3), NewPeerRoutingId(3));
  for (const std::string& bad :
       {std::string(""), std::string("r"), std::string("r1"), std::string("r1."),
        std::string("r.ab"), std::string("r01.ab"), std::string("r-1.ab"), std::string("x1.ab"),
        std::string("r1ab"), std::string("r1.xyz"), std::string("r1.ab "),
        std::string("r12345678.ab"), "r1." + std::string(38, 'a')}) {
    EXPECT_EQ(ParsePeerRoutingId(bad), -1) << bad;
  }
  EXPECT_EQ(ParsePeerRoutingId("r1." + std::string(37, 'a')), 1);  // 40 characters at most
}

}  // namespace
}  // namespace geeps::transport
