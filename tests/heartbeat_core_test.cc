// cluster::HeartbeatCore, the heartbeats' rules without sockets or threads,
// driven by a table of cases over transport::MemoryNetwork: every rank's
// core runs in steps of one heartbeat interval (100 ms of a simulated
// clock; the timeout is 1000 ms), and between steps the network delivers,
// drops, duplicates, reorders or delays what the cores sent, as the case
// says. Each case names what every rank must report lost (each loss once)
// and who must finish.
#include "cluster/heartbeat_core.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "test_names.h"
#include "transport/memory_link.h"

namespace geeps::cluster {
namespace {

using std::chrono::milliseconds;
using transport::ControlLink;
using transport::ControlMessage;
using transport::MemoryNetwork;

constexpr milliseconds kTimeout{1000};
constexpr milliseconds kStep{100};  // the interval: kTimeout / 10

enum class Fate { kDeliver, kDrop, kDuplicate, kHold };

// What the network does, at step `step`, to a message in flight.
using FateFn = std::function<Fate(const MemoryNetwork::Message&, int step)>;

struct Inject {  // a message a rank's link sends at a step, beside its core
  int step;
  int from;
  int to;
  std::string text;
};

struct Case {
  std::string name;
  int world = 3;
  int steps = 60;
  FateFn fate = nullptr;  // null: deliver everything
  bool newest_first = false;
  std::vector<int> crash_at;  // per rank: the step it stops at (-1: never)
  int leave_at = -1;          // the step every rank starts leaving (-1: never)
  std::vector<Inject> inject;
  // Per rank: the ranks it reports lost, in order; whether it finishes.
  std::vector<std::vector<int>> lost;
  std::vector<bool> finished;
  std::vector<int> drops;  // per rank (empty: none anywhere)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string Name(int rank) { return "r" + std::to_string(rank); }

// Rank 0's link receives from "r<rank>".
int RankOf(const std::string& name) { return std::stoi(name.substr(1)); }

bool FromRank(const MemoryNetwork::Message& m, int rank) { return m.from == Name(rank); }

// Every rank's core and link, stepped together.
class Job {
 public:
  explicit Job(const Case& c) : c_(c), start_(HeartbeatCore::Clock::now()) {
    for (int r = 0; r < c.world; ++r) {
      links_.push_back(net_.Open(Name(r), r == 0 ? "" : Name(0)));
      cores_.emplace_back(r, c.world, kTimeout, start_);
    }
    lost_.resize(c.world);
    drops_.assign(c.world, 0);
  }

  void Run() {
    for (int step = 1; step <= c_.steps; ++step) {
      Network(step);
      for (int r = 0; r < c_.world; ++r)
        if (Alive(r, step)) Step(r, step);
      for (const Inject& i : c_.inject)
        if (i.step == step) links_[i.from]->Send(Name(i.to), i.text);
    }
  }

  const std::vector<std::vector<int>>& lost() const { return lost_; }
  const std::vector<int>& drops() const { return drops_; }
  bool finished(int r) const { return cores_[r].finished(); }

 private:
  bool Alive(int r, int step) const {
    return c_.crash_at.empty() || c_.crash_at[r] < 0 || step < c_.crash_at[r];
  }

  // The messages in flight meet their fate.
  void Network(int step) {
    if (!c_.fate) return net_.DeliverAll(c_.newest_first);
    size_t i = 0;
    while (i < net_.in_flight()) {
      switch (c_.fate(net_.InFlight()[i], step)) {
        case Fate::kDeliver:
          net_.Deliver(i);
          break;
        case Fate::kDrop:
          net_.Drop(i);
          break;
        case Fate::kDuplicate:
          net_.Duplicate(i);
          net_.Deliver(i);
          net_.Deliver(i);
          break;
        case Fate::kHold:
          ++i;
          break;
      }
    }
  }

  void Step(int r, int step) {
    const auto now = start_ + kStep * step;
    HeartbeatCore::Output out;
    ControlMessage m;
    while (links_[r]->TryReceive(&m))
      cores_[r].OnMessage(r == 0 ? RankOf(m.from) : 0, m.text, now, &out);
    cores_[r].OnTick(now, c_.leave_at >= 0 && step >= c_.leave_at, &out);
    for (const HeartbeatCore::Send& s : out.sends) links_[r]->Send(Name(s.to), s.text);
    for (const HeartbeatCore::Lost& l : out.lost) {
      EXPECT_EQ(l.why.code(), StatusCode::kUnavailable);
      EXPECT_NE(l.why.message().find("rank " + std::to_string(l.rank)), std::string::npos)
          << l.why.message();
      lost_[r].push_back(l.rank);
    }
    drops_[r] += static_cast<int>(out.drops.size());
  }

  const Case& c_;
  const HeartbeatCore::Clock::time_point start_;
  MemoryNetwork net_;
  std::vector<std::unique_ptr<ControlLink>> links_;
  std::vector<HeartbeatCore> cores_;
  std::vector<std::vector<int>> lost_;
  std::vector<int> drops_;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({.name = "quiet", .lost = {{}, {}, {}}, .finished = {false, false, false}});
  cases.push_back({.name = "everyone leaves",
                   .leave_at = 20,
                   .lost = {{}, {}, {}},
                   .finished = {true, true, true}});
  // Rank 2's messages lost for 0.7 s: under the timeout, nobody is lost.
  cases.push_back({.name = "rank 2 silent below the timeout",
                   .fate =
                       [](const MemoryNetwork::Message& m, int step) {
                         return FromRank(m, 2) && step >= 10 && step < 17 ? Fate::kDrop
                                                                          : Fate::kDeliver;
                       },
                   .lost = {{}, {}, {}},
                   .finished = {false, false, false}});
  // ... and for good: rank 0 reports it and tells rank 1; rank 2, no longer
  // answered, reports rank 0.
  cases.push_back(
      {.name = "rank 2 silent past the timeout",
       .fate = [](const MemoryNetwork::Message& m,
                  int step) { return FromRank(m, 2) && step >= 10 ? Fate::kDrop : Fate::kDeliver; },
       .lost = {{2}, {2}, {0}},
       .finished = {false, false, true}});
  cases.push_back({.name = "every message twice, then everyone leaves",
                   .fate = [](const MemoryNetwork::Message&, int) { return Fate::kDuplicate; },
                   .leave_at = 30,
                   .lost = {{}, {}, {}},
                   .finished = {true, true, true}});
  cases.push_back({.name = "each step's messages newest first, then everyone leaves",
                   .newest_first = true,
                   .leave_at = 30,
                   .lost = {{}, {}, {}},
                   .finished = {true, true, true}});
  // Everything held and let go every fifth step: up to 0.5 s late, in bursts.
  cases.push_back({.name = "messages delayed half the timeout, then everyone leaves",
                   .fate = [](const MemoryNetwork::Message&,
                              int step) { return step % 5 == 0 ? Fate::kDeliver : Fate::kHold; },
                   .leave_at = 30,
                   .lost = {{}, {}, {}},
                   .finished = {true, true, true}});
  cases.push_back({.name = "rank 2 crashes",
                   .crash_at = {-1, -1, 10},
                   .lost = {{2}, {2}, {}},
                   .finished = {false, false, false}});
  // LOST comes twice; rank 1 reports rank 2 once.
  cases.push_back({.name = "rank 2 crashes and every message comes twice",
                   .fate = [](const MemoryNetwork::Message&, int) { return Fate::kDuplicate; },
                   .crash_at = {-1, -1, 10},
                   .lost = {{2}, {2}, {}},
                   .finished = {false, false, false}});
  cases.push_back({.name = "rank 0 crashes",
                   .crash_at = {10, -1, -1},
                   .lost = {{}, {0}, {0}},
                   .finished = {false, true, true}});
  // Rank 0 waits for the lost rank to be declared lost, then says DONE;
  // rank 1, which has left, is not told of the loss.
  cases.push_back({.name = "leaving with a crashed rank",
                   .crash_at = {-1, -1, 5},
                   .leave_at = 8,
                   .lost = {{2}, {}, {}},
                   .finished = {true, true, false}});
  // The first BYE of rank 1 is lost: the next one, a step later, counts.
  cases.push_back(
      {.name = "a lost BYE is sent again",
       .fate =
           [dropped = std::make_shared<bool>(false)](const MemoryNetwork::Message& m, int) {
             if (*dropped || m.text != "BYE") return Fate::kDeliver;
             *dropped = true;
             return Fate::kDrop;
           },
       .leave_at = 20,
       .lost = {{}, {}, {}},
       .finished = {true, true, true}});
  // Messages the rules do not know are dropped and counted; a LOST that
  // names no rank of the job too.
  cases.push_back({.name = "unknown and malformed messages",
                   .inject = {{5, 0, 1, "LOST x"},
                              {6, 0, 1, "LOST 99"},
                              {7, 0, 1, "HELLO?"},
                              {8, 1, 0, "FOO"},
                              {9, 2, 0, "HELLO again"}},
                   .lost = {{}, {}, {}},
                   .finished = {false, false, false},
                   .drops = {1, 3, 0}});
  return cases;
}

class HeartbeatCoreTest : public ::testing::TestWithParam<Case> {};

TEST_P(HeartbeatCoreTest, LossesAndEndings) {
  const Case& c = GetParam();
  Job job(c);
  job.Run();
  for (int r = 0; r < c.world; ++r) {
    EXPECT_EQ(job.lost()[r], c.lost[r]) << "rank " << r;
    EXPECT_EQ(job.finished(r), c.finished[r]) << "rank " << r;
    EXPECT_EQ(job.drops()[r], c.drops.empty() ? 0 : c.drops[r]) << "rank " << r;
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return ::geeps::testing::CamelCaseName(info.param.name);
}

INSTANTIATE_TEST_SUITE_P(Faults, HeartbeatCoreTest, ::testing::ValuesIn(Cases()), CaseName);

// The loss is declared after the timeout and within one interval of it.
TEST(HeartbeatCoreTest, LossIsDeclaredWithinAnIntervalOfTheTimeout) {
  const auto t0 = HeartbeatCore::Clock::now();
  HeartbeatCore coordinator(0, 2, kTimeout, t0);
  HeartbeatCore::Output out;
  coordinator.OnMessage(1, "HB", t0, &out);
  coordinator.OnTick(t0 + kTimeout, false, &out);
  EXPECT_TRUE(out.lost.empty());
  coordinator.OnTick(t0 + kTimeout + kStep, false, &out);
  ASSERT_EQ(out.lost.size(), 1u);
  EXPECT_EQ(out.lost[0].rank, 1);
  EXPECT_NE(out.lost[0].why.message().find("no heartbeat for 1000 ms"), std::string::npos);
}

// After DONE a rank ignores everything, even a LOST.
TEST(HeartbeatCoreTest, NothingCountsAfterDone) {
  const auto t0 = HeartbeatCore::Clock::now();
  HeartbeatCore peer(1, 3, kTimeout, t0);
  HeartbeatCore::Output out;
  peer.OnMessage(0, "DONE", t0, &out);
  EXPECT_TRUE(peer.finished());
  peer.OnMessage(0, "LOST 2", t0, &out);
  peer.OnTick(t0 + 10 * kTimeout, true, &out);
  EXPECT_TRUE(out.lost.empty());
  EXPECT_TRUE(out.sends.empty());
}

}  // namespace
}  // namespace geeps::cluster
