// The host device's table of device blocks (by address, for range look-ups)
// and pinned blocks. Shared between the device and the tasks it queues, so
// that a task can check its pointers when it runs.
//
// Device blocks are known by the address the caller sees: the block's host
// address plus `offset` (0, or kOpaqueOffset in the opaque-pointer mode).
// Range checks take caller addresses; ToHost() turns a checked one back into
// the address the kernels use. Pinned blocks are always plain host memory.
// Thread-safe: every member takes mu_ except ToHost (a fixed offset).
#ifndef GEEPS_DEVICE_HOST_ALLOCATION_TABLE_H_
#define GEEPS_DEVICE_HOST_ALLOCATION_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <unordered_set>

#include "common/mutex.h"
#include "geeps/status.h"

namespace geeps::device::host {

class AllocationTable {
 public:
  // `budget`: bytes of device blocks allowed at once (0: no limit).
  // `ordinal`: the host device it belongs to. Every table is listed in a
  // process-wide registry while it lives, so that a pointer into another
  // device's memory is told apart from a pointer into no device's.
  AllocationTable(uint64_t budget, uintptr_t offset, int ordinal = 0);
  ~AllocationTable();
  AllocationTable(const AllocationTable&) = delete;
  AllocationTable& operator=(const AllocationTable&) = delete;

  // The host address of device address `p` (any address inside or just past
  // a block; the translation is a fixed offset, so no lock is needed).
  template <typename T>
  T* ToHost(T* p) const {
    if (offset_ == 0) return p;
    return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) - offset_);
  }

  // A device block of `bytes` (its device address); kResourceExhausted past
  // the budget or out of host memory.
  StatusOr<void*> Allocate(size_t bytes);
  // False when `p` is not a live device block.
  bool Free(void* p);

  StatusOr<void*> AllocatePinned(size_t bytes);
  // False when `p` is not a live pinned block.
  bool FreePinned(void* p);

  // Host memory [p, p + bytes) as a device block that this table does not
  // own (Free() refuses it, FreeAll() leaves it): its device address, or
  // null when bytes is 0 or the range overlaps a live block.
  void* Map(void* p, size_t bytes);
  // False when `p` is not a live mapped block.
  bool Unmap(void* p);

  // Frees every block (mapped ones are forgotten, not freed).
  void FreeAll();

  // Bytes of device blocks now allocated.
  uint64_t in_use() const;

  // Bytes from `p` to the end of the live device block holding it (its end
  // included, so that an empty range just past a block is inside), or nullopt.
  std::optional<size_t> Available(const void* p) const;

  // kInvalidArgument (when enqueuing) or kDeviceError (when running) unless
  // [p, p + bytes) lies inside one live device block; kInternal, naming both
  // devices, when p lies in a live block of a host device with another
  // ordinal (a worker using another device's memory: a bug in libgeeps).
  Status CheckRange(const char* op, const char* arg, const void* p, size_t bytes,
                    bool running) const;

 private:
  void* ToDevice(void* p) const {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) + offset_);
  }

  // Rounds up to HostDevice::kAlignment (to a page from
  // HostDevice::kPageAlignedFrom bytes, and starts there); a 0-byte block
  // still gets a distinct address.
  static StatusOr<void*> AlignedAlloc(size_t bytes);

  // The ordinal of another device's table (other than this one's) with a
  // live block holding p (strictly inside it), if any. REQUIRES: mu_ is not
  // held.
  std::optional<int> OtherDeviceHolding(const void* p) const GEEPS_EXCLUDES(mu_);

  const uint64_t budget_;
  const uintptr_t offset_;  // device address - host address
  const int ordinal_;
  mutable common::Mutex mu_;
  // Block (device address) -> bytes. std::less<> orders any two pointers.
  std::map<const char*, size_t, std::less<>> device_ GEEPS_GUARDED_BY(mu_);
  std::unordered_set<void*> pinned_ GEEPS_GUARDED_BY(mu_);
  std::unordered_set<const char*> mapped_ GEEPS_GUARDED_BY(mu_);  // device addresses
  uint64_t in_use_ GEEPS_GUARDED_BY(mu_) = 0;
};

}  // namespace geeps::device::host

#endif  // GEEPS_DEVICE_HOST_ALLOCATION_TABLE_H_
