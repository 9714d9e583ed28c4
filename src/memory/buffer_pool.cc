#include "memory/buffer_pool.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/mutex.h"

namespace geeps::memory {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// round_up(x, a) for a power of two, or nullopt on overflow.
std::optional<uint64_t> RoundUp(uint64_t x, uint64_t a) {
  if (x > kMax - (a - 1)) return std::nullopt;
  return (x + a - 1) & ~(a - 1);
}

}  // namespace

BufferPool::BufferPool(void* base, uint64_t size) : base_(base), size_(size) {
  if (size_ > 0) free_.emplace(0, size_);
}

void* BufferPool::Address(uint64_t offset) const {
  if (base_ == nullptr) return nullptr;
  return static_cast<char*>(base_) + offset;
}

std::optional<uint64_t> BufferPool::FitLocked(uint64_t block, uint64_t alignment) {
  const uint64_t base_addr = reinterpret_cast<uintptr_t>(base_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t off = it->first;
    const uint64_t len = it->second;
    const std::optional<uint64_t> aligned = RoundUp(base_addr + off, alignment);
    if (!aligned) continue;
    const uint64_t pad = *aligned - (base_addr + off);
    if (pad > len || len - pad < block) continue;
    const uint64_t start = off + pad;
    const uint64_t rest = len - pad - block;
    free_.erase(it);
    if (pad > 0) free_.emplace(off, pad);
    if (rest > 0) free_.emplace(start + block, rest);
    used_.emplace(start, block);
    in_use_ += block;
    high_water_ = std::max(high_water_, in_use_);
    high_extent_ = std::max(high_extent_, start + block);
    return start;
  }
  return std::nullopt;
}

uint64_t BufferPool::LargestFreeLocked() const {
  uint64_t largest = 0;
  for (const auto& [off, len] : free_) largest = std::max(largest, len);
  return largest;
}

Status BufferPool::ExhaustedLocked(uint64_t bytes, uint64_t block) const {
  return ResourceExhaustedError(
      "buffer pool: no free block fits " + std::to_string(bytes) + " bytes (" +
      std::to_string(block) + " after rounding); in use " + std::to_string(in_use_) + " of " +
      std::to_string(size_) + " bytes in " + std::to_string(used_.size()) +
      " blocks, largest free block " + std::to_string(LargestFreeLocked()) + " bytes");
}

namespace {

// Checks the arguments and computes the block size. `never` is set when the
// request could not fit even in the empty pool.
Status CheckRequest(uint64_t bytes, uint64_t alignment, const void* base, uint64_t size,
                    uint64_t* block, bool* never) {
  if (bytes == 0) return InvalidArgumentError("buffer pool: cannot allocate 0 bytes");
  if (!IsPowerOfTwo(alignment))
    return InvalidArgumentError("buffer pool: alignment " + std::to_string(alignment) +
                                " is not a power of two");
  const std::optional<uint64_t> rounded = RoundUp(bytes, alignment);
  const uint64_t base_addr = reinterpret_cast<uintptr_t>(base);
  const std::optional<uint64_t> first = RoundUp(base_addr, alignment);
  *never =
      !rounded || !first || *first - base_addr > size || size - (*first - base_addr) < *rounded;
  *block = rounded.value_or(kMax);
  return Status::OK();
}

}  // namespace

StatusOr<uint64_t> BufferPool::Allocate(uint64_t bytes, uint64_t alignment) {
  uint64_t block = 0;
  bool never = false;
  GEEPS_RETURN_IF_ERROR(CheckRequest(bytes, alignment, base_, size_, &block, &never));
  common::MutexLock lock(&mu_);
  if (!never) {
    if (std::optional<uint64_t> off = FitLocked(block, alignment)) return *off;
  }
  return ExhaustedLocked(bytes, block);
}

std::optional<uint64_t> BufferPool::TryAllocate(uint64_t bytes, uint64_t alignment) {
  StatusOr<uint64_t> r = Allocate(bytes, alignment);
  if (!r.ok()) return std::nullopt;
  return *r;
}

StatusOr<uint64_t> BufferPool::AllocateWait(uint64_t bytes, Clock::time_point deadline,
                                            uint64_t alignment) {
  uint64_t block = 0;
  bool never = false;
  GEEPS_RETURN_IF_ERROR(CheckRequest(bytes, alignment, base_, size_, &block, &never));
  common::MutexLock lock(&mu_);
  if (never) {
    return ResourceExhaustedError("buffer pool: " + std::to_string(bytes) +
                                  " bytes can never fit in a pool of " + std::to_string(size_) +
                                  " bytes");
  }
  while (true) {
    if (cancelled_)
      return CancelledError("buffer pool: cancelled while waiting for " + std::to_string(bytes) +
                            " bytes");
    if (std::optional<uint64_t> off = FitLocked(block, alignment)) return *off;
    ++waiters_;
    const std::cv_status woke = lock.WaitUntil(freed_, deadline);
    --waiters_;
    if (woke == std::cv_status::timeout) {
      // A Free may have raced with the timeout: one last try.
      if (cancelled_) continue;
      if (std::optional<uint64_t> off = FitLocked(block, alignment)) return *off;
      return DeadlineExceededError("buffer pool: waited past the deadline for " +
                                   std::to_string(bytes) + " bytes; in use " +
                                   std::to_string(in_use_) + " of " + std::to_string(size_) +
                                   ", largest free block " + std::to_string(LargestFreeLocked()));
    }
  }
}

Status BufferPool::Free(uint64_t offset) {
  {
    common::MutexLock lock(&mu_);
    auto it = used_.find(offset);
    if (it == used_.end())
      return InvalidArgumentError("buffer pool: no allocated block at offset " +
                                  std::to_string(offset));
    uint64_t off = it->first;
    uint64_t len = it->second;
    used_.erase(it);
    in_use_ -= len;
    auto next = free_.lower_bound(off);
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        off = prev->first;
        len += prev->second;
        free_.erase(prev);
      }
    }
    if (next != free_.end() && off + len == next->first) {
      len += next->second;
      free_.erase(next);
    }
    free_.emplace(off, len);
  }
  freed_.notify_all();
  return Status::OK();
}

void BufferPool::Cancel() {
  {
    common::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  freed_.notify_all();
}

bool BufferPool::cancelled() const {
  common::MutexLock lock(&mu_);
  return cancelled_;
}

uint64_t BufferPool::bytes_in_use() const {
  common::MutexLock lock(&mu_);
  return in_use_;
}

uint64_t BufferPool::high_water_mark() const {
  common::MutexLock lock(&mu_);
  return high_water_;
}

uint64_t BufferPool::high_water_extent() const {
  common::MutexLock lock(&mu_);
  return high_extent_;
}

uint64_t BufferPool::largest_free_block() const {
  common::MutexLock lock(&mu_);
  return LargestFreeLocked();
}

size_t BufferPool::allocations() const {
  common::MutexLock lock(&mu_);
  return used_.size();
}

size_t BufferPool::free_blocks() const {
  common::MutexLock lock(&mu_);
  return free_.size();
}

size_t BufferPool::waiters() const {
  common::MutexLock lock(&mu_);
  return waiters_;
}

}  // namespace geeps::memory
