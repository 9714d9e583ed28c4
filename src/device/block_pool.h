// BlockPool: a caching allocator over a slow, synchronising raw allocator
// (cudaMalloc / cudaFree, cudaHostAlloc / cudaFreeHost). Blocks are rounded
// up to a size class (four classes per power of two, at least kMinBlock
// bytes); a freed block goes back to its class's free list and is handed out
// again without calling the raw allocator, so that steady-state training
// (the same buffers every iteration) allocates nothing on the hot path and
// never calls cudaFree, which synchronises the whole device.
//
// The budget counts the bytes *requested* (as the host backend does), not
// the rounded sizes nor the cached free blocks. When the raw allocator fails,
// the pool releases its cached free blocks and tries once more.
//
// A failed raw allocation is handled by the pool (retried, or returned as a
// Status), so right after each one the pool calls the `clear_error` hook: on
// CUDA, cudaGetLastError(), so that the failed cudaMalloc's error does not
// stay latched in the runtime and turn up later in an unrelated check.
//
// It knows nothing of CUDA, so its logic is tested on every machine
// (tests/block_pool_test.cc). Thread safety: every method may be called from
// any thread; the raw allocator and the hook are called with the pool's mutex
// held.
#ifndef GEEPS_DEVICE_BLOCK_POOL_H_
#define GEEPS_DEVICE_BLOCK_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "geeps/status.h"

namespace geeps::device {

class BlockPool {
 public:
  // Returns a block of at least `bytes`, or an error (kResourceExhausted when
  // the memory is exhausted; the pool keeps the code and message).
  using RawAllocate = std::function<StatusOr<void*>(size_t bytes)>;
  using RawFree = std::function<void(void* p)>;
  // Called once after every failed RawAllocate call, before anything else.
  using ClearError = std::function<void()>;

  static constexpr size_t kMinBlock = 256;

  // `name` starts error messages ("cuda device"); `budget` 0 = no limit;
  // `clear_error` may be empty.
  BlockPool(std::string name, uint64_t budget, RawAllocate raw_allocate, RawFree raw_free,
            ClearError clear_error = nullptr);
  ~BlockPool();  // ReleaseAll()
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // kResourceExhausted when the budget would be exceeded; the message gives
  // the requested, in-use and budget bytes. 0 bytes gives a distinct block.
  StatusOr<void*> Allocate(size_t bytes);
  // False (and nothing done) when `p` is not a live block of this pool.
  bool Free(void* p);
  // Frees every block, live or cached, with the raw allocator.
  void ReleaseAll();
  // Frees the cached (free) blocks only.
  void ReleaseCached();

  uint64_t bytes_in_use() const;     // requested bytes of live blocks
  uint64_t bytes_cached() const;     // class bytes of free blocks
  uint64_t raw_allocations() const;  // calls of the raw allocator so far
  uint64_t budget() const { return budget_; }

  // The size class of a request (exposed for tests).
  static size_t ClassSize(size_t bytes);

 private:
  void ReleaseCachedLocked() GEEPS_REQUIRES(mu_);
  // raw_allocate_, then clear_error_ if it failed.
  StatusOr<void*> RawAllocateLocked(size_t bytes) GEEPS_REQUIRES(mu_);

  const std::string name_;
  const uint64_t budget_;
  const RawAllocate raw_allocate_;
  const RawFree raw_free_;
  const ClearError clear_error_;

  mutable common::Mutex mu_;
  struct Live {
    size_t requested;
    size_t class_size;
  };
  std::unordered_map<void*, Live> live_ GEEPS_GUARDED_BY(mu_);
  std::map<size_t, std::vector<void*>> free_ GEEPS_GUARDED_BY(mu_);
  uint64_t in_use_ GEEPS_GUARDED_BY(mu_) = 0;
  uint64_t cached_ GEEPS_GUARDED_BY(mu_) = 0;
  uint64_t raw_allocations_ GEEPS_GUARDED_BY(mu_) = 0;
};

}  // namespace geeps::device

#endif  // GEEPS_DEVICE_BLOCK_POOL_H_
