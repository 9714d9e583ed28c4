// When a worker asks for its pushes in the order of need
// (src/client/push_order_policy.h), table-driven: each case feeds
// iterations (length, read wait) and checks the answer after each.
#include "client/push_order_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace geeps::client {
namespace {

using Mode = PushOrderPolicy::Mode;

struct Iteration {
  int64_t length_ms;
  int64_t waited_ms;
};

struct Case {
  std::string name;
  Mode mode;
  std::vector<Iteration> iterations;
  std::string expected;  // the answer after each iteration: 'o' asks, '.' does not
  int64_t switches;
};

std::string Answers(const Case& c, PushOrderPolicy* policy) {
  std::string answers;
  for (const Iteration& i : c.iterations) {
    policy->Observe(i.length_ms * 1000000, i.waited_ms * 1000000);
    answers += policy->asks() ? 'o' : '.';
  }
  return answers;
}

TEST(PushOrderPolicyTest, AnswersFollowTheShareOfTheIterationTheReadsWaited) {
  const std::vector<Case> cases = {
      // Compute hides the pushes (16 machines, 1000 ms): never asks.
      {"compute bound",
       Mode::kAdaptive,
       {{1100, 66}, {1100, 70}, {1100, 60}, {1100, 80}},
       "....",
       0},
      // The reads wait half the iteration (250 ms): asks after the first,
      // and keeps asking while the waits shrink (37%).
      {"network bound",
       Mode::kAdaptive,
       {{590, 277}, {500, 185}, {500, 190}, {500, 180}, {500, 185}},
       "ooooo",
       1},
      // Just over the upper bound: asks; between the bounds: stays.
      {"hysteresis on", Mode::kAdaptive, {{100, 31}, {100, 25}, {100, 25}, {100, 25}}, "oooo", 1},
      {"at the upper bound stays off",
       Mode::kAdaptive,
       {{100, 30}, {100, 30}, {100, 30}},
       "...",
       0},
      // The waits shrink below the lower bound: stops once the last three
      // iterations together waited less than 20% (40+10+10 of 300 is 20%).
      {"stops",
       Mode::kAdaptive,
       {{100, 40}, {100, 40}, {100, 40}, {100, 10}, {100, 10}, {100, 10}, {100, 10}},
       "ooooo..",
       2},
      // The judgement after a change sees only the new answer's iterations:
      // 90% then 0% (both together, 45%, would have kept it on).
      {"fresh window", Mode::kAdaptive, {{100, 90}, {100, 0}, {100, 0}}, "o..", 2},
      // One long wait among short ones is averaged by the window's time.
      {"one outlier", Mode::kAdaptive, {{100, 5}, {100, 5}, {1000, 100}, {100, 5}}, "....", 0},
      // Garbage in is clamped: a negative length or wait counts as none, a
      // wait longer than its iteration as the whole iteration (100 of 200).
      {"clamped", Mode::kAdaptive, {{-5, 10}, {100, -3}, {100, 500}}, "..o", 1},
      {"zero-length iterations", Mode::kAdaptive, {{0, 0}, {0, 0}, {0, 0}, {0, 0}}, "....", 0},
      // The fixed modes never change.
      {"always", Mode::kReadOrder, {{100, 0}, {100, 0}, {100, 0}, {100, 0}}, "oooo", 0},
      {"never", Mode::kAsReady, {{100, 90}, {100, 90}, {100, 90}, {100, 90}}, "....", 0},
  };
  for (const Case& c : cases) {
    PushOrderPolicy policy(c.mode);
    EXPECT_EQ(Answers(c, &policy), c.expected) << c.name;
    EXPECT_EQ(policy.switches(), c.switches) << c.name;
  }
}

TEST(PushOrderPolicyTest, StartsAsItsMode) {
  EXPECT_FALSE(PushOrderPolicy(Mode::kAdaptive).asks());
  EXPECT_FALSE(PushOrderPolicy(Mode::kAsReady).asks());
  EXPECT_TRUE(PushOrderPolicy(Mode::kReadOrder).asks());
}

}  // namespace
}  // namespace geeps::client
