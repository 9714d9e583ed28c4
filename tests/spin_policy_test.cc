// Whether a wait for pushes spins before it blocks (src/client/
// spin_policy.h), table-driven: each case feeds waits and checks, before
// each, whether the next wait would spin.
#include "client/spin_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace geeps::client {
namespace {

struct Case {
  std::string name;
  int64_t budget_us;
  std::vector<int64_t> waits_us;
  std::string expected;  // before each wait: 's' spins (for the budget), '.' blocks at once
};

TEST(SpinPolicyTest, SpinsWhileTheRecentWaitsAveragedWithinTheBudget) {
  const std::vector<Case> cases = {
      // The round trips of a small model: always spins.
      {"short waits", 200, {60, 70, 55, 80, 65}, "sssss"},
      // A budget of 0 never spins.
      {"off", 0, {60, 70, 55}, "..."},
      // Waits of 20 ms against 1 ms: the first spins (nothing known yet),
      // each counted as 4 ms: the average is 1 ms after one (still
      // spins), 1.75 ms after two.
      {"long waits", 1000, {20000, 20000, 20000, 20000}, "ss.."},
      // Long stalls among short waits: each counted at 4 budgets (800 us),
      // so the wait after one blocks at once (average 215 us) and after
      // two (361); three short waits later the average is back under the
      // budget (180) and the waits spin again.
      {"stalls", 200, {50, 50, 100000, 100000, 50, 50, 50, 50, 50}, "sss....ss"},
      // Waits just over the budget stop spinning once the average is over
      // (104 us after seven).
      {"just over", 100, {120, 120, 120, 120, 120, 120, 120, 120, 120, 120}, "sssssss..."},
      // A negative wait (a clock that went back) counts as zero.
      {"negative", 100, {-5000, 90}, "ss"},
  };
  for (const Case& c : cases) {
    SpinPolicy policy(c.budget_us * 1000);
    std::string got;
    for (int64_t w : c.waits_us) {
      const int64_t spin = policy.SpinNs();
      EXPECT_TRUE(spin == 0 || spin == c.budget_us * 1000) << c.name << ": " << spin;
      got += spin > 0 ? 's' : '.';
      policy.Record(w * 1000);
    }
    EXPECT_EQ(got, c.expected) << c.name << " (average at the end " << policy.average_ns() / 1000
                               << " us)";
  }
}

TEST(SpinPolicyTest, ANegativeBudgetIsOff) {
  SpinPolicy policy(-1);
  EXPECT_EQ(policy.SpinNs(), 0);
  policy.Record(10);
  EXPECT_EQ(policy.SpinNs(), 0);
}

}  // namespace
}  // namespace geeps::client
