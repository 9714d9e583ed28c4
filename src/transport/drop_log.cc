#include "transport/drop_log.h"

#include "common/logging.h"

namespace geeps::transport {

bool DropLog::Drop(const std::string& what, unsigned kind) {
  counter_->fetch_add(1, std::memory_order_relaxed);
  const uint32_t bit = 1u << (kind < kKinds ? kind : kKinds - 1);
  if ((logged_ & bit) == 0) {
    logged_ |= bit;
    GEEPS_LOG(Warning) << who_ << ": dropped a frame (" << what
                       << "); further drops of this kind are only counted";
  }
  return false;
}

bool DropLog::logged(unsigned kind) const {
  return (logged_ & (1u << (kind < kKinds ? kind : kKinds - 1))) != 0;
}

}  // namespace geeps::transport
