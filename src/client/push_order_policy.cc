#include "client/push_order_policy.h"

#include <algorithm>

namespace geeps::client {

void PushOrderPolicy::Observe(int64_t iteration_ns, int64_t read_wait_ns) {
  if (mode_ != Mode::kAdaptive) return;
  iteration_[seen_ % kWindow] = std::max<int64_t>(iteration_ns, 0);
  waited_[seen_ % kWindow] =
      std::clamp<int64_t>(read_wait_ns, 0, std::max<int64_t>(iteration_ns, 0));
  ++seen_;
  int64_t total = 0, waited = 0;
  for (size_t i = 0; i < std::min(seen_, kWindow); ++i) {
    total += iteration_[i];
    waited += waited_[i];
  }
  if (total <= 0) return;
  const double fraction = static_cast<double>(waited) / static_cast<double>(total);
  const bool next = asks_ ? fraction >= kOffBelow : fraction > kOnAbove;
  if (next != asks_) {
    asks_ = next;
    ++switches_;
    seen_ = 0;  // the next judgement sees only iterations under the new answer
  }
}

}  // namespace geeps::client
