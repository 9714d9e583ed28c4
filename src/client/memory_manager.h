// The memory manager of one worker with a device memory budget: the plan
// (what lives in device memory, what in pinned host memory), the access
// buffer pool (one device region handed out by memory::BufferPool), and its
// statistics. The indexes stay in device memory (the fixed part of the
// budget); the planner places the local tables and the cached parameter rows
// (each with its oplog row) in device or pinned host memory, and sizes the
// pool for the Read/PreUpdate buffers and the buffers of local data living
// in host memory.
//
// Threads: Acquire/Release and the counters may be used from any thread.
#ifndef GEEPS_CLIENT_MEMORY_MANAGER_H_
#define GEEPS_CLIENT_MEMORY_MANAGER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "client/op_sequence.h"
#include "client/table_cache.h"
#include "device/device.h"
#include "geeps/config.h"
#include "geeps/stats.h"
#include "geeps/status.h"
#include "memory/buffer_pool.h"
#include "memory/planner.h"

namespace geeps::client {

class MemoryManager {
 public:
  // Plans for `seq` under config.device_memory_budget, of which
  // `fixed_bytes` are already taken by the indexes. `tables[t]` holds the
  // cached rows of shared table t (null for a local table). Errors:
  // kResourceExhausted with the numbers when the budget is too small for
  // Config::memory_guarantee.
  static StatusOr<std::unique_ptr<MemoryManager>> Create(
      const Config& config, int rank, const OpSequence& seq,
      const std::vector<std::unique_ptr<TableCache>>& tables, uint64_t fixed_bytes,
      device::Device* device);
  ~MemoryManager();

  // Whether local table `table` lives in device memory.
  bool LocalOnDevice(TableId table) const { return local_on_device_[table]; }
  // Per cached position of shared table `table`: whether the row (and its
  // oplog row) lives in device memory.
  const std::vector<bool>& CacheRowsOnDevice(TableId table) const {
    return plan_.row_on_device[shared_index_[table]];
  }

  // Which recorded access a stall is charged to.
  enum class Kind { kRead = 0, kUpdate = 1, kLocal = 2 };
  struct AccessRef {
    Kind kind;
    int handle;
  };

  // A pool buffer of `bytes`, waiting at most `timeout` for one to free up.
  // A wait is charged to `who` (the application's access); none for the
  // background threads' own waits.
  StatusOr<float*> Acquire(uint64_t bytes, std::chrono::milliseconds timeout,
                           const AccessRef* who = nullptr);
  void Release(const float* buffer);
  // A pool buffer only if a free block of at least `reserve` bytes stays
  // after it (so a prefetch never takes, or fragments, what the
  // application's own accesses need); else null.
  float* TryAcquireLeaving(uint64_t bytes, uint64_t reserve);
  // Wakes every wait for a buffer with kCancelled (shutdown).
  void CancelWaits() { pool_->Cancel(); }

  // The application waited `t` in access `who`.
  void AddStall(const AccessRef& who, std::chrono::nanoseconds t);
  void AddCopy(bool to_device, uint64_t bytes) {
    (to_device ? h2d_bytes_ : d2h_bytes_).fetch_add(static_cast<int64_t>(bytes));
  }
  // Fills the memory fields of `stats`.
  void FillStats(WorkerStats* stats) const;
  const memory::Plan& plan() const { return plan_; }

 private:
  MemoryManager(device::Device* device, memory::Plan plan);

  device::Device* device_;
  memory::Plan plan_;
  void* region_ = nullptr;  // device memory of the pool
  std::unique_ptr<memory::BufferPool> pool_;
  std::vector<bool> local_on_device_;  // by TableId
  std::vector<int> shared_index_;      // by TableId: index among shared tables
  std::string plan_json_;
  std::atomic<int64_t> stall_ns_{0}, h2d_bytes_{0}, d2h_bytes_{0};
  int first_id_[3] = {0, 0, 0};                              // of reads, updates, local accesses
  std::unique_ptr<std::atomic<int64_t>[]> stall_by_access_;  // ns, by access id
  int num_accesses_ = 0;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_MEMORY_MANAGER_H_
