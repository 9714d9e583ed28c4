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

#include "geeps/config.h"
#include "transport/control_messages.h"
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

// A rank's process that connects again while the coordinator still holds
// its earlier connection (not yet seen to end: a reconnect under load, a
// half-open TCP connection) takes its routing id over: without
// ZMQ_ROUTER_HANDOVER ZeroMQ ignores the newcomer and every message of the
// rank is lost (ControlPlaneSealTest failed so in CI).
TEST(TransportSocketsTest, ControlRouterHandsARanksIdToItsNewestConnection) {
  zmq::context_t context;
  auto router = BindControlRouter(context, "tcp://127.0.0.1:*");
  ASSERT_TRUE(router.ok()) << router.status();
  zmq::socket_t& r = **router;
  const std::string endpoint = r.get(zmq::sockopt::last_endpoint);
  const std::string id = PeerRoutingId(3, 0x33);
  std::vector<zmq::message_t> frames;
  auto old_connection = ConnectControlDealer(context, endpoint, id);
  ASSERT_TRUE(old_connection.ok()) << old_connection.status();
  (*old_connection)->send(zmq::str_buffer("old"), zmq::send_flags::none);
  ASSERT_TRUE(WaitForInput(r));
  ASSERT_TRUE(TryRecvMultipart(r, &context, &frames));
  EXPECT_EQ(frames[1].to_string(), "old");

  auto new_connection = ConnectControlDealer(context, endpoint, id);  // the old one stays open
  ASSERT_TRUE(new_connection.ok()) << new_connection.status();
  (*new_connection)->send(zmq::str_buffer("new"), zmq::send_flags::none);
  ASSERT_TRUE(WaitForInput(r));
  ASSERT_TRUE(TryRecvMultipart(r, &context, &frames));
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].to_string(), id);
  EXPECT_EQ(frames[1].to_string(), "new");
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

// Without keys: the data plane's tcp/ipc sockets use PLAIN with the job
// token (a client only once the token is known), the control plane's PLAIN
// with the rank's routing id; inproc sockets stay plain.
TEST(TransportSocketsTest, JobTokenAndRankIds) {
  zmq::context_t context;
  auto security = SecurityConfig::StartWithToken(&context);
  ASSERT_TRUE(security.ok()) << security.status();
  SecurityConfig* sec = security->get();
  EXPECT_FALSE(sec->curve());
  auto tcp = BindShardRouter(context, "tcp://127.0.0.1:*", 4096, sec);
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  EXPECT_EQ((*tcp)->get(zmq::sockopt::mechanism), ZMQ_PLAIN);
  EXPECT_EQ((*tcp)->get(zmq::sockopt::plain_server), 1);
  EXPECT_EQ((*tcp)->get(zmq::sockopt::handshake_ivl), 10000);
  const std::string endpoint = (*tcp)->get(zmq::sockopt::last_endpoint);
  auto control = BindControlRouter(context, "tcp://127.0.0.1:*", sec);
  ASSERT_TRUE(control.ok()) << control.status();
  EXPECT_EQ((*control)->get(zmq::sockopt::mechanism), ZMQ_PLAIN);
  EXPECT_EQ((*control)->get(zmq::sockopt::zap_domain), "geeps-control");
  auto peer = ConnectControlDealer(context, (*control)->get(zmq::sockopt::last_endpoint),
                                   PeerRoutingId(1, 0), sec);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ((*peer)->get(zmq::sockopt::mechanism), ZMQ_PLAIN);
  EXPECT_EQ((*peer)->get(zmq::sockopt::plain_username), "geeps-rank");
  EXPECT_EQ((*peer)->get(zmq::sockopt::plain_password), PeerRoutingId(1, 0));
  // A data client before the token: refused, naming the endpoint (an empty
  // PLAIN password would silently mean no mechanism at all).
  auto early = ConnectWorkerDealer(context, endpoint, 0, 4096, sec);
  ASSERT_FALSE(early.ok());
  EXPECT_NE(early.status().message().find(endpoint), std::string::npos) << early.status();
  const std::string token = NewJobToken();
  ASSERT_TRUE(sec->SetJobToken(token).ok());
  auto dealer = ConnectWorkerDealer(context, endpoint, 0, 4096, sec);
  ASSERT_TRUE(dealer.ok()) << dealer.status();
  EXPECT_EQ((*dealer)->get(zmq::sockopt::mechanism), ZMQ_PLAIN);
  EXPECT_EQ((*dealer)->get(zmq::sockopt::plain_password), token);
  auto inproc = ConnectWorkerDealer(context, "inproc://token-off", 0, 4096, sec);
  ASSERT_TRUE(inproc.ok()) << inproc.status();
  EXPECT_EQ((*inproc)->get(zmq::sockopt::mechanism), ZMQ_NULL);
  // The token is set once: the same again is fine, another or a malformed
  // one is refused.
  EXPECT_TRUE(sec->SetJobToken(token).ok());
  EXPECT_EQ(sec->SetJobToken(NewJobToken()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sec->SetJobToken("xyz").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sec->job_token(), token);
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

TEST(RoutingIdTest, JobTokens) {
  const std::string a = NewJobToken(), b = NewJobToken();
  EXPECT_TRUE(ValidJobToken(a)) << a;
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);  // 128 random bits each
  for (const std::string& bad :
       {std::string(), std::string(31, 'a'), std::string(33, 'a'), std::string(31, 'a') + "G",
        std::string(31, 'a') + "A", std::string(31, 'a') + " "})
    EXPECT_FALSE(ValidJobToken(bad)) << bad;
}

// The frame limit follows the job: the largest part of a shared table
// (its rows' indexes or values), not the 1 GiB default of
// max_message_bytes; a packed message (under pack_below_bytes, header,
// indexes and values in one frame) raises it to that size.
TEST(FrameLimitTest, LargestFrameFollowsTheJob) {
  Config c;
  c.tables = {{"small", 100, 4}};
  EXPECT_EQ(LargestFrameBytes(c), c.pack_below_bytes + kFrameSlackBytes);
  c.pack_below_bytes = 1024;  // the small table's whole update: 56 + 800 + 1600 bytes unpacked
  EXPECT_EQ(LargestFrameBytes(c), 100 * 16 + kFrameSlackBytes);
  c.pack_below_bytes = 0;
  EXPECT_EQ(LargestFrameBytes(c), 100 * 16 + kFrameSlackBytes);
  c.tables.push_back({"narrow", 1000, 1});  // indexes (8 bytes) outweigh values
  EXPECT_EQ(LargestFrameBytes(c), 1000 * 8 + kFrameSlackBytes);
  TableSpec local{"local", 1u << 20, 64};
  local.local = true;  // never sent: no effect
  c.tables.push_back(local);
  EXPECT_EQ(LargestFrameBytes(c), 1000 * 8 + kFrameSlackBytes);
  c.tables.push_back({"big", 1u << 20, 16});  // 64 MiB: parts of max_message_bytes
  c.max_message_bytes = 1u << 20;
  EXPECT_EQ(LargestFrameBytes(c), (1 << 20) + kFrameSlackBytes);
  c.tables.push_back({"wide", 2, 1u << 19});  // a 2 MiB row: one row per part
  EXPECT_EQ(LargestFrameBytes(c), (2 << 20) + kFrameSlackBytes);
}

// WELCOME carries the job token; a malformed one, or words after it, make
// the WELCOME malformed.
TEST(ControlMessagesTest, WelcomeCarriesTheJobToken) {
  PeerInfo a;
  a.rank = 0;
  a.endpoints = {"tcp://h:1"};
  JobLayout layout = MakeLayout({a});
  layout.token = NewJobToken();
  layout.resume_clock = 7;
  auto back = DecodeWelcome(EncodeWelcome(layout), 1, 1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->token, layout.token);
  EXPECT_EQ(back->resume_clock, 7);
  layout.resume_clock = 0;
  back = DecodeWelcome(EncodeWelcome(layout), 1, 1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->token, layout.token);
  const std::string text = EncodeWelcome(layout);
  EXPECT_FALSE(DecodeWelcome(text + " extra", 1, 1).ok());
  EXPECT_FALSE(DecodeWelcome(text.substr(0, text.size() - 1), 1, 1).ok());
  EXPECT_FALSE(DecodeWelcome(text + "\nRESUME 3", 1, 1).ok());  // out of order
  layout.token.clear();
  back = DecodeWelcome(EncodeWelcome(layout), 1, 1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->token, "");
}

}  // namespace
}  // namespace geeps::transport
