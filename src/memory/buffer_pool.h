// BufferPool: an arena allocator over one contiguous region, for the access
// buffer pool of the GPU/CPU memory manager (docs/memory-manager.md).
//
// The pool never reads or writes the region: it hands out offsets from the
// base pointer, so the region may be device memory. Placement is first fit
// (lowest address that fits) over free blocks that are kept coalesced, so
// the result of a sequence of calls is deterministic; the memory planner
// (planner.h) replays the recorded access sequence on a BufferPool to size
// the pool.
//
// Thread safety: every method may be called from any thread. The expected use
// is one thread allocating (the worker's alloc thread) and another freeing
// (its reclaim thread); AllocateWait blocks the allocating thread until a
// Free makes room.
#ifndef GEEPS_MEMORY_BUFFER_POOL_H_
#define GEEPS_MEMORY_BUFFER_POOL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <optional>

#include "common/mutex.h"
#include "geeps/status.h"

namespace geeps::memory {

// The default alignment of a buffer (that of cudaMalloc). Block sizes are
// rounded up to a multiple of the alignment asked for.
inline constexpr uint64_t kDefaultAlignment = 256;

class BufferPool {
 public:
  using Clock = std::chrono::steady_clock;

  // A pool over [base, base + size). base may be nullptr (offsets only); it is
  // used only to align addresses, so a base aligned to the largest alignment
  // asked for makes offsets and addresses align alike.
  BufferPool(void* base, uint64_t size);
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  // REQUIRES: no thread is blocked in AllocateWait (Cancel() and join first).
  ~BufferPool() = default;

  // Reserves round_up(bytes, alignment) bytes whose address (base + offset)
  // is a multiple of `alignment`, at the lowest such address that fits.
  // Returns the offset from base. Errors: kInvalidArgument (bytes == 0, or
  // alignment not a power of two); kResourceExhausted when no free block fits
  // now (the message gives requested, in use, largest free block and size).
  // Never blocks.
  StatusOr<uint64_t> Allocate(uint64_t bytes, uint64_t alignment = kDefaultAlignment);
  // As Allocate, but nullopt instead of any error.
  std::optional<uint64_t> TryAllocate(uint64_t bytes, uint64_t alignment = kDefaultAlignment);
  // As Allocate, but when nothing fits now, blocks until a Free makes room,
  // `deadline` passes (kDeadlineExceeded) or Cancel() is called (kCancelled).
  // A request that could not fit even in the empty pool is kResourceExhausted
  // at once, without waiting.
  StatusOr<uint64_t> AllocateWait(uint64_t bytes, Clock::time_point deadline,
                                  uint64_t alignment = kDefaultAlignment);

  // Returns the block at `offset` (as returned by an Allocate call) to the
  // pool and wakes waiters. kInvalidArgument for any other offset (including
  // a block already freed).
  Status Free(uint64_t offset);

  // Wakes every AllocateWait with kCancelled; later AllocateWait calls return
  // kCancelled at once. Allocate, TryAllocate and Free keep working (so that
  // buffers can still be returned while the worker shuts down).
  void Cancel();
  bool cancelled() const;

  void* base() const { return base_; }
  uint64_t size() const { return size_; }
  // base + offset, computed without dereferencing. nullptr if base is.
  void* Address(uint64_t offset) const;

  // Bytes in allocated blocks (after rounding) now.
  uint64_t bytes_in_use() const;
  // The most bytes_in_use() has ever been.
  uint64_t high_water_mark() const;
  // The highest end (offset + block size) of any block ever allocated: the
  // size a pool needs to have replayed the same calls with the same offsets.
  uint64_t high_water_extent() const;
  // The largest free block now (0 when full).
  uint64_t largest_free_block() const;
  // Blocks allocated now.
  size_t allocations() const;
  // Free blocks now (1 for an empty pool: free blocks are coalesced).
  size_t free_blocks() const;
  // AllocateWait calls blocked now, waiting for a Free (tests wait for it
  // instead of sleeping).
  size_t waiters() const;

 private:
  // The offset of the first fit, or nullopt.
  std::optional<uint64_t> FitLocked(uint64_t block, uint64_t alignment) GEEPS_REQUIRES(mu_);
  // The error for a request that does not fit now.
  Status ExhaustedLocked(uint64_t bytes, uint64_t block) const GEEPS_REQUIRES(mu_);
  uint64_t LargestFreeLocked() const GEEPS_REQUIRES(mu_);

  void* const base_;
  const uint64_t size_;

  mutable common::Mutex mu_;
  std::condition_variable freed_;
  std::map<uint64_t, uint64_t> free_ GEEPS_GUARDED_BY(mu_);  // offset -> size, coalesced
  std::map<uint64_t, uint64_t> used_ GEEPS_GUARDED_BY(mu_);  // offset -> block size
  uint64_t in_use_ GEEPS_GUARDED_BY(mu_) = 0;
  size_t waiters_ GEEPS_GUARDED_BY(mu_) = 0;
  uint64_t high_water_ GEEPS_GUARDED_BY(mu_) = 0;
  uint64_t high_extent_ GEEPS_GUARDED_BY(mu_) = 0;
  bool cancelled_ GEEPS_GUARDED_BY(mu_) = false;
};

}  // namespace geeps::memory

#endif  // GEEPS_MEMORY_BUFFER_POOL_H_
