// The order of a partition's pushes across tables (src/server/push_schedule.h),
// without sockets: each case feeds the pushes a partition's tables produce,
// in the order their clocks complete, through the shard channel's use of
// the schedule (send now, or defer and send what a send releases), and
// checks the order they went out in.
#include "server/push_schedule.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace geeps {
namespace {

using server::PushOrder;
using server::PushSchedule;
using Clock = PushSchedule::Clock;

struct Ready {
  uint32_t table;
  int64_t clock;
  bool final_part = true;
};

// "t<table>@<clock>" per push sent, in order ("...p" for a part that is
// not the push's last).
std::string Name(uint32_t table, const PushOrder& o) {
  return "t" + std::to_string(table) + "@" + std::to_string(o.clock) + (o.final_part ? "" : "p");
}

std::vector<std::string> Feed(PushSchedule& s, const std::vector<Ready>& ready) {
  std::vector<std::string> sent;
  auto send = [&](uint32_t table, const PushOrder& o) {
    sent.push_back(Name(table, o));
    if (o.final_part) s.Sent(table, o.clock);
  };
  for (const Ready& r : ready) {
    PushOrder o;
    o.clock = r.clock;
    o.final_part = r.final_part;
    if (s.MustWait(r.table, r.clock)) {
      s.Defer(r.table, o, Clock::now());
      continue;
    }
    send(r.table, o);
    while (auto d = s.TakeReady()) send(d->table, d->order);
  }
  return sent;
}

// The clock's pushes as a backward pass completes them: last table first.
std::vector<Ready> Backward(int tables, int64_t clock) {
  std::vector<Ready> r;
  for (int t = tables - 1; t >= 0; --t) r.push_back({static_cast<uint32_t>(t), clock});
  return r;
}

std::vector<Ready> Concat(std::vector<std::vector<Ready>> parts) {
  std::vector<Ready> all;
  for (auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

struct Case {
  std::string name;
  std::vector<uint32_t> ranks;  // per table (0: not read)
  std::vector<Ready> ready;
  std::vector<std::string> want;
};

class PushScheduleTest : public ::testing::TestWithParam<Case> {};

TEST_P(PushScheduleTest, SendsInTheOrderOfNeed) {
  const Case& c = GetParam();
  PushSchedule s(c.ranks.size(), std::chrono::seconds(10));
  for (uint32_t t = 0; t < c.ranks.size(); ++t) s.SetRank(t, c.ranks[t]);
  s.Ask(3, true);  // a worker's updates ask for the order
  EXPECT_EQ(Feed(s, c.ready), c.want);
  EXPECT_EQ(s.deferred(), 0u) << "a push was left deferred";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PushScheduleTest,
    ::testing::Values(
        // The first clock: no table has pushed before, so nothing waits.
        Case{"FirstClockGoesAsItCompletes", {1, 2, 3}, Backward(3, 1), {"t2@1", "t1@1", "t0@1"}},
        // From then on a clock's pushes go in read order, the first table's
        // (completed last, by the backward pass) releasing the others.
        Case{"LaterClocksGoInReadOrder",
             {1, 2, 3, 4},
             Concat({Backward(4, 1), Backward(4, 2), Backward(4, 3)}),
             {"t3@1", "t2@1", "t1@1", "t0@1", "t0@2", "t1@2", "t2@2", "t3@2", "t0@3", "t1@3",
              "t2@3", "t3@3"}},
        // Ranks, not table ids: table 2 is read first.
        Case{"RanksNotIds",
             {2, 3, 1},
             Concat({{{0, 1}, {1, 1}, {2, 1}}, {{0, 2}, {1, 2}, {2, 2}}}),
             {"t0@1", "t1@1", "t2@1", "t2@2", "t0@2", "t1@2"}},
        // A table not read in the iteration (rank 0) neither waits nor
        // holds others back.
        Case{"UnreadTablesAreFree",
             {0, 1, 0},
             Concat({Backward(3, 1), Backward(3, 2)}),
             {"t2@1", "t1@1", "t0@1", "t2@2", "t1@2", "t0@2"}},
        // A table that never pushed (no subscriber here) holds nothing.
        Case{"TablesThatNeverPushHoldNothing",
             {1, 2},
             {{1, 1}, {1, 2}, {1, 3}},
             {"t1@1", "t1@2", "t1@3"}},
        // SSP: a table's next clock completes while its previous push still
        // waits: it stays behind it, and both follow the first table's.
        Case{"ATablesOwnPushesStayInOrder",
             {1, 2},
             {{0, 1}, {1, 1}, {1, 2}, {1, 3}, {0, 2}, {0, 3}},
             {"t0@1", "t1@1", "t0@2", "t1@2", "t0@3", "t1@3"}},
        // A push that waits goes as soon as the first table's push does.
        Case{"ReleasedByTheFirstTablesPush",
             {1, 2},
             {{1, 1}, {0, 1}, {1, 2}, {0, 2}},
             {"t1@1", "t0@1", "t0@2", "t1@2"}},
        // Pipelined pushes: a push's early part and its rest keep their order.
        Case{"PartsStayInOrder",
             {1, 2},
             {{0, 1}, {1, 1}, {1, 2, false}, {1, 2}, {0, 2}},
             {"t0@1", "t1@1", "t0@2", "t1@2p", "t1@2"}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(PushScheduleRankTest, TheFirstNonZeroRankWins) {
  PushSchedule s(2, std::chrono::seconds(1));
  s.SetRank(0, 0);
  s.SetRank(0, 2);
  s.SetRank(0, 1);
  s.SetRank(7, 1);  // no such table: ignored
  EXPECT_EQ(s.rank(0), 2u);
  EXPECT_EQ(s.rank(1), 0u);
}

// Only the next push of a table in step is waited for: one two clocks
// behind (after an overdue push went) holds nothing back.
TEST(PushScheduleRankTest, ALaggingTableHoldsNothing) {
  PushSchedule s(2, std::chrono::seconds(1));
  s.SetRank(0, 1);
  s.SetRank(1, 2);
  s.Ask(0, true);
  s.Sent(0, 1);
  EXPECT_TRUE(s.MustWait(1, 2));
  EXPECT_FALSE(s.MustWait(0, 2));  // the first table waits for none
  s.Sent(1, 2);
  EXPECT_FALSE(s.MustWait(1, 3));
}

TEST(PushScheduleRankTest, AHeldPushGoesOnceOverdue) {
  PushSchedule s(2, std::chrono::milliseconds(100));
  s.SetRank(0, 1);
  s.SetRank(1, 2);
  s.Ask(0, true);
  s.Sent(0, 1);
  s.Sent(1, 1);
  ASSERT_TRUE(s.MustWait(1, 2));  // table 0 pushes clock 2 first
  const auto t0 = Clock::now();
  PushOrder o;
  o.clock = 2;
  s.Defer(1, o, t0);
  EXPECT_FALSE(s.TakeReady().has_value());
  EXPECT_FALSE(s.TakeOverdue(t0 + std::chrono::milliseconds(99)).has_value());
  auto d = s.TakeOverdue(t0 + std::chrono::milliseconds(100));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->table, 1u);
  EXPECT_EQ(d->order.clock, 2);
  EXPECT_EQ(s.deferred(), 0u);
}

// The rule holds while some worker's latest update asks for it
// (kFlagReadOrder), table-driven: each step is one update's answer, then
// what the schedule says of it.
TEST(PushScheduleAskTest, TheOrderHoldsWhileAnyWorkerAsks) {
  struct Step {
    int worker;
    bool asks;
    bool released;  // Ask's result: the last asker stopped
    bool ordered;
  };
  const std::vector<Step> steps = {
      {0, false, false, false},                                                  // nobody has asked
      {0, true, false, true},   {1, true, false, true}, {0, true, false, true},  // again: no change
      {0, false, false, true},                           // worker 1 still asks
      {1, false, true, false},                           // the last asker stopped
      {1, false, false, false}, {5, true, false, true},  // a rank not seen before
      {-1, true, false, true},                           // no such worker: ignored
      {5, false, true, false},
  };
  PushSchedule s(2, std::chrono::seconds(1));
  s.SetRank(0, 1);
  s.SetRank(1, 2);
  s.Sent(0, 1);
  s.Sent(1, 1);
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& st = steps[i];
    EXPECT_EQ(s.Ask(st.worker, st.asks), st.released) << "step " << i;
    EXPECT_EQ(s.ordered(), st.ordered) << "step " << i;
    // Table 1's push of clock 2 waits for table 0's only while ordered.
    EXPECT_EQ(s.MustWait(1, 2), st.ordered) << "step " << i;
  }
}

// When the last asker stops, the held pushes may all go (TakeReady).
TEST(PushScheduleAskTest, StoppingReleasesTheHeldPushes) {
  PushSchedule s(3, std::chrono::seconds(10));
  for (uint32_t t = 0; t < 3; ++t) s.SetRank(t, t + 1);
  s.Ask(0, true);
  for (uint32_t t = 0; t < 3; ++t) s.Sent(t, 1);
  for (uint32_t t : {2u, 1u}) {
    ASSERT_TRUE(s.MustWait(t, 2));
    PushOrder o;
    o.clock = 2;
    s.Defer(t, o, Clock::now());
  }
  EXPECT_FALSE(s.TakeReady().has_value());
  EXPECT_TRUE(s.Ask(0, false));
  std::vector<uint32_t> went;
  while (auto d = s.TakeReady()) went.push_back(d->table);
  EXPECT_EQ(went, (std::vector<uint32_t>{1, 2}));  // lowest rank first
  EXPECT_EQ(s.deferred(), 0u);
}

}  // namespace
}  // namespace geeps
