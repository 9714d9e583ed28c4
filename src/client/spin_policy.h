// Whether a worker's wait for pushes spins (polls without blocking) before
// it blocks, and for how long (Config::spin_wait_us; docs/architecture.md,
// "Threads of the data path"). No clock and no sockets: the worker reports
// how long each wait took and asks, when the next one starts, how long it
// may spin.
//
// Why: a thread that blocks in poll() is woken by the kernel when its push
// arrives, and on a virtual machine waking a halted CPU costs tens of
// microseconds (a 4 KiB round trip: 125 us blocking, 57 us spinning, same
// ZeroMQ pair; docs/performance.md, "4 KiB: spinning before blocking").
//
// Rule: spin for the budget while the recent waits averaged within it
// (an average over about the last four, each counted at most at 4x the
// budget: after a single long stall the next wait blocks and the one
// after a short wait spins again; after a run of long waits, six short
// ones); else block at once. A budget of 0 never spins. Waits that the
// budget cannot cover (a wide model's push, a slow network, compute
// elsewhere) thus soon stop spinning, and cost at most a few budgets.
//
// Thread: one (the worker's application thread, under its API lock).
#ifndef GEEPS_CLIENT_SPIN_POLICY_H_
#define GEEPS_CLIENT_SPIN_POLICY_H_

#include <cstdint>

namespace geeps::client {

class SpinPolicy {
 public:
  // A recorded wait counts at most this many budgets in the average.
  static constexpr int64_t kClampBudgets = 4;

  explicit SpinPolicy(int64_t budget_ns) : budget_ns_(budget_ns > 0 ? budget_ns : 0) {}

  // How long the wait starting now may spin, in ns (0: block at once).
  int64_t SpinNs() const;
  // A wait ended after `waited_ns` (>= 0), spinning or not.
  void Record(int64_t waited_ns);
  // The average the rule compares with the budget (a figure for tests).
  int64_t average_ns() const { return average_ns_; }

 private:
  int64_t budget_ns_;
  int64_t average_ns_ = 0;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_SPIN_POLICY_H_
