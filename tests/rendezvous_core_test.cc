// cluster::RendezvousCore, rank 0's rules for the joins, driven by a table
// of cases over transport::MemoryNetwork: processes send their HELLO over
// in-memory links, the network loses, repeats or reorders them as the case
// says, and rank 0's core gets what arrives. Each case names whether the
// job may start, or the error, and what every process heard.
#include "cluster/rendezvous_core.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "test_names.h"
#include "transport/memory_link.h"

namespace geeps::cluster {
namespace {

using transport::ControlMessage;
using transport::MemoryNetwork;
using transport::PeerInfo;

constexpr int kWorld = 3;
constexpr uint64_t kFingerprint = 0xfeed;
constexpr int kChannels = 2;

PeerInfo Server(int rank, int endpoints = kChannels) {
  PeerInfo p;
  p.rank = rank;
  p.role = ProcessRole::kWorkerAndServer;
  for (int k = 0; k < endpoints; ++k)
    p.endpoints.push_back("tcp://10.0.0." + std::to_string(rank) + ":" + std::to_string(7000 + k));
  return p;
}

struct Hello {     // a process and what it says
  std::string id;  // its routing id, "r<rank>.<nonce>"
  std::string text;
};

std::string HelloOf(const PeerInfo& p, int world = kWorld, uint64_t fp = kFingerprint) {
  return transport::EncodeHello(p, world, fp);
}

enum class Net { kInOrder, kReversed, kTwice, kFirstLost };

struct Case {
  std::string name;
  std::vector<Hello> hellos;
  Net net = Net::kInOrder;
  bool complete = false;
  std::string error;  // a substring of the failure (or of Expire's error)
  // What each process heard, each message's first word, in order.
  std::map<std::string, std::vector<std::string>> heard;
  int drops = 0;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  const Hello one{"r1.a", HelloOf(Server(1))};
  const Hello two{"r2.b", HelloOf(Server(2))};
  std::vector<Case> cases;
  cases.push_back(
      {.name = "both join",
       .hellos = {one, two},
       .complete = true,
       .heard = {{"r1.a", {"WAIT", "WAIT", "WELCOME"}}, {"r2.b", {"WAIT", "WELCOME"}}}});
  cases.push_back(
      {.name = "hellos reordered",
       .hellos = {one, two},
       .net = Net::kReversed,
       .complete = true,
       .heard = {{"r1.a", {"WAIT", "WELCOME"}}, {"r2.b", {"WAIT", "WAIT", "WELCOME"}}}});
  cases.push_back(
      {.name = "every hello twice",
       .hellos = {one, two},
       .net = Net::kTwice,
       .complete = true,
       .heard = {{"r1.a", {"WAIT", "WAIT", "WELCOME"}}, {"r2.b", {"WAIT", "WELCOME"}}}});
  cases.push_back({.name = "a hello lost",
                   .hellos = {two, one},
                   .net = Net::kFirstLost,
                   .error = "rank 2 did not join within 500 ms",
                   .heard = {{"r1.a", {"WAIT", "ABORT"}}, {"r2.b", {}}}});
  cases.push_back(
      {.name = "a worker without endpoints",
       .hellos = {{"r1.a", HelloOf(PeerInfo{1, ProcessRole::kWorker, {}, "", {}})}, two},
       .complete = true,
       .heard = {{"r1.a", {"WAIT", "WAIT", "WELCOME"}}, {"r2.b", {"WAIT", "WELCOME"}}}});
  cases.push_back({.name = "two processes as rank 1",
                   .hellos = {one, {"r1.f", HelloOf(Server(1))}},
                   .error = "two processes started as rank 1",
                   .heard = {{"r1.a", {"WAIT", "ABORT"}}, {"r1.f", {"ABORT"}}}});
  cases.push_back({.name = "a rank beyond the world",
                   .hellos = {one, {"r5.c", HelloOf(Server(5))}},
                   .error = "a process started as rank 5, but the world size is 3",
                   .heard = {{"r1.a", {"WAIT", "ABORT"}}, {"r5.c", {"ABORT"}}}});
  cases.push_back({.name = "a second rank 0",
                   .hellos = {{"r0.d", HelloOf(Server(0))}},
                   .error = "two processes started as rank 0",
                   .heard = {{"r0.d", {"ABORT"}}}});
  cases.push_back({.name = "another world size",
                   .hellos = {one, {"r2.b", HelloOf(Server(2), 4)}},
                   .error = "rank 2 has world size 4, rank 0 has 3",
                   .heard = {{"r1.a", {"WAIT", "WAIT", "ABORT"}}, {"r2.b", {"WAIT", "ABORT"}}}});
  cases.push_back({.name = "another config",
                   .hellos = {{"r1.a", HelloOf(Server(1), kWorld, 1)}},
                   .error = "rank 1's config differs from rank 0's",
                   .heard = {{"r1.a", {"WAIT", "ABORT"}}}});
  cases.push_back({.name = "one endpoint for two channels",
                   .hellos = {{"r1.a", HelloOf(Server(1, 1))}},
                   .error = "rank 1 reported 1 shard endpoints, expected 2",
                   .heard = {{"r1.a", {"WAIT", "ABORT"}}}});
  cases.push_back({.name = "a malformed hello is dropped, then the right one joins",
                   .hellos = {{"r1.a", "HELLO nonsense"}, {"r1.a", "HB"}, one, two},
                   .complete = true,
                   .heard = {{"r1.a", {"WAIT", "WAIT", "WELCOME"}}, {"r2.b", {"WAIT", "WELCOME"}}},
                   .drops = 2});
  cases.push_back({.name = "a hello under another rank's id is dropped",
                   .hellos = {{"r2.b", HelloOf(Server(1))}, one, two},
                   .complete = true,
                   .heard = {{"r1.a", {"WAIT", "WAIT", "WELCOME"}}, {"r2.b", {"WAIT", "WELCOME"}}},
                   .drops = 1});
  return cases;
}

std::string FirstWord(const std::string& text) { return text.substr(0, text.find(' ')); }

class RendezvousCoreTest : public ::testing::TestWithParam<Case> {};

TEST_P(RendezvousCoreTest, JoinsAndRefusals) {
  const Case& c = GetParam();
  MemoryNetwork net;
  auto rank0 = net.Open("r0.self");
  std::map<std::string, std::unique_ptr<transport::ControlLink>> links;
  for (const auto& [id, heard] : c.heard) links[id] = net.Open(id, "r0.self");
  for (const Hello& h : c.hellos) {
    if (!links.count(h.id)) links[h.id] = net.Open(h.id, "r0.self");
    links[h.id]->Send("", h.text);
  }
  switch (c.net) {
    case Net::kInOrder:
      net.DeliverAll();
      break;
    case Net::kReversed:
      net.DeliverAll(/*reversed=*/true);
      break;
    case Net::kTwice:
      for (size_t i = 0; i < net.in_flight(); i += 2) net.Duplicate(i);
      net.DeliverAll();
      break;
    case Net::kFirstLost:
      net.Drop(0);
      net.DeliverAll();
      break;
  }
  RendezvousCore core(Server(0), kWorld, kFingerprint, kChannels);
  RendezvousCore::Output out;
  ControlMessage m;
  while (rank0->TryReceive(&m)) core.OnMessage(m.from, m.text, m.one_frame, &out);
  EXPECT_EQ(core.complete(), c.complete) << core.failure().ToString();
  if (core.complete()) {
    core.Welcome(transport::MakeLayout(core.peers()), &out);
    EXPECT_EQ(core.peers()[1].rank, 1);
    EXPECT_EQ(core.peers()[2].endpoints, Server(2).endpoints);
    EXPECT_EQ(core.peer_ids()[1], "r1.a");
    EXPECT_EQ(core.peer_ids()[2], "r2.b");
    EXPECT_EQ(core.Missing(), "no rank");
  } else if (core.failure().ok()) {
    const Status expired = core.Expire(std::chrono::milliseconds(500), &out);
    EXPECT_EQ(expired.code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(expired.message().find(c.error), std::string::npos) << expired.message();
  } else {
    EXPECT_EQ(core.failure().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(core.failure().message().find(c.error), std::string::npos)
        << core.failure().message();
  }
  EXPECT_EQ(static_cast<int>(out.drops.size()), c.drops);
  for (const RendezvousCore::Send& s : out.sends) rank0->Send(s.to, s.text);
  net.DeliverAll();
  for (const auto& [id, expected] : c.heard) {
    std::vector<std::string> heard;
    while (links[id]->TryReceive(&m)) {
      heard.push_back(FirstWord(m.text));
      if (heard.back() == "ABORT" && !c.error.empty())
        EXPECT_NE(m.text.find(c.error), std::string::npos) << m.text;
    }
    EXPECT_EQ(heard, expected) << id;
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return ::geeps::testing::CamelCaseName(info.param.name);
}

INSTANTIATE_TEST_SUITE_P(Hellos, RendezvousCoreTest, ::testing::ValuesIn(Cases()), CaseName);

TEST(RendezvousCoreTest, WaitNamesTheMissingRanksAndAFailedJobHearsNoMore) {
  RendezvousCore core(Server(0), 4, kFingerprint, kChannels);
  RendezvousCore::Output out;
  core.OnMessage("r2.b", HelloOf(Server(2), 4), true, &out);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].to, "r2.b");
  EXPECT_EQ(out.sends[0].text, "WAIT ranks 1, 3");
  core.OnMessage("r2.b", "ignored", false, &out);  // two frames
  EXPECT_EQ(out.drops, std::vector<std::string>{"rendezvous frame count"});
  core.OnMessage("r9.e", HelloOf(Server(9), 4), true, &out);
  EXPECT_FALSE(core.failure().ok());
  out = {};
  core.OnMessage("r1.a", HelloOf(Server(1), 4), true, &out);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_FALSE(core.complete());
}

// The chooser's refusal reaches every rank that joined.
TEST(RendezvousCoreTest, AbortAllTellsEveryRankIn) {
  RendezvousCore core(Server(0), kWorld, kFingerprint, kChannels);
  RendezvousCore::Output out;
  core.OnMessage("r1.a", HelloOf(Server(1)), true, &out);
  core.OnMessage("r2.b", HelloOf(Server(2)), true, &out);
  ASSERT_TRUE(core.complete());
  out = {};
  core.AbortAll("no common checkpoint", &out);
  ASSERT_EQ(out.sends.size(), 2u);
  EXPECT_EQ(out.sends[0].to, "r1.a");
  EXPECT_EQ(out.sends[1].text, "ABORT no common checkpoint");
}

}  // namespace
}  // namespace geeps::cluster
