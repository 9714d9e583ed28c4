#include "device/block_pool.h"

#include <new>
#include <sstream>
#include <utility>

#include "common/mutex.h"

namespace geeps::device {

BlockPool::BlockPool(std::string name, uint64_t budget, RawAllocate raw_allocate, RawFree raw_free,
                     ClearError clear_error)
    : name_(std::move(name)),
      budget_(budget),
      raw_allocate_(std::move(raw_allocate)),
      raw_free_(std::move(raw_free)),
      clear_error_(std::move(clear_error)) {}

BlockPool::~BlockPool() { ReleaseAll(); }

size_t BlockPool::ClassSize(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  // Four classes per power of two: 2^k, 1.25, 1.5, 1.75 x 2^k, so at most
  // a quarter is wasted; the step is a multiple of kMinBlock / 4 >= 64.
  size_t power = kMinBlock;
  while (power * 2 < bytes && power * 2 > power) power *= 2;
  const size_t step = power / 4;
  const size_t rounded = (bytes + step - 1) / step * step;
  return rounded < bytes ? bytes : rounded;  // overflow: exact size
}

StatusOr<void*> BlockPool::Allocate(size_t bytes) {
  common::MutexLock lock(&mu_);
  if (budget_ != 0 && (bytes > budget_ || in_use_ > budget_ - bytes)) {
    std::ostringstream os;
    os << name_ << ": Allocate(" << bytes << " bytes) exceeds the device memory budget: requested "
       << bytes << " bytes, in use " << in_use_ << " bytes, budget " << budget_ << " bytes";
    return ResourceExhaustedError(os.str());
  }
  const size_t class_size = ClassSize(bytes);
  void* p = nullptr;
  auto it = free_.find(class_size);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    cached_ -= class_size;
  } else {
    StatusOr<void*> raw = RawAllocateLocked(class_size);
    if (!raw.ok() && cached_ > 0) {
      // Cached blocks of other classes may be what is missing.
      ReleaseCachedLocked();
      raw = RawAllocateLocked(class_size);
    }
    if (!raw.ok()) {
      std::ostringstream os;
      os << name_ << ": Allocate(" << bytes << " bytes, in use " << in_use_
         << " bytes) failed: " << raw.status().message();
      return Status(raw.status().code(), os.str());
    }
    p = *raw;
    ++raw_allocations_;
  }
  try {
    live_.emplace(p, Live{bytes, class_size});
  } catch (const std::bad_alloc&) {
    free_[class_size].push_back(p);  // may throw too: then it leaks, rarely
    cached_ += class_size;
    return ResourceExhaustedError(name_ + ": out of host memory");
  }
  in_use_ += bytes;
  return p;
}

bool BlockPool::Free(void* p) {
  common::MutexLock lock(&mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return false;
  const Live block = it->second;
  live_.erase(it);
  in_use_ -= block.requested;
  try {
    free_[block.class_size].push_back(p);
    cached_ += block.class_size;
  } catch (const std::bad_alloc&) {
    raw_free_(p);  // cannot cache it: give it back
  }
  return true;
}

StatusOr<void*> BlockPool::RawAllocateLocked(size_t bytes) {
  StatusOr<void*> raw = raw_allocate_(bytes);
  // Handled here (retried or returned): nothing of it may stay behind.
  if (!raw.ok() && clear_error_) clear_error_();
  return raw;
}

void BlockPool::ReleaseCachedLocked() {
  for (auto& [class_size, blocks] : free_) {
    for (void* p : blocks) raw_free_(p);
  }
  free_.clear();
  cached_ = 0;
}

void BlockPool::ReleaseCached() {
  common::MutexLock lock(&mu_);
  ReleaseCachedLocked();
}

void BlockPool::ReleaseAll() {
  common::MutexLock lock(&mu_);
  ReleaseCachedLocked();
  for (const auto& [p, block] : live_) raw_free_(p);
  live_.clear();
  in_use_ = 0;
}

uint64_t BlockPool::bytes_in_use() const {
  common::MutexLock lock(&mu_);
  return in_use_;
}

uint64_t BlockPool::bytes_cached() const {
  common::MutexLock lock(&mu_);
  return cached_;
}

uint64_t BlockPool::raw_allocations() const {
  common::MutexLock lock(&mu_);
  return raw_allocations_;
}

}  // namespace geeps::device
