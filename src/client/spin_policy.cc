#include "client/spin_policy.h"

#include <algorithm>

namespace geeps::client {

int64_t SpinPolicy::SpinNs() const {
  if (budget_ns_ == 0 || average_ns_ > budget_ns_) return 0;
  return budget_ns_;
}

void SpinPolicy::Record(int64_t waited_ns) {
  if (budget_ns_ == 0) return;
  const int64_t counted = std::clamp<int64_t>(waited_ns, 0, kClampBudgets * budget_ns_);
  // Weight 1/4 for the newest wait.
  average_ns_ = (3 * average_ns_ + counted) / 4;
}

}  // namespace geeps::client
