// The memory planner of the GPU/CPU memory manager: given a worker's recorded
// access sequence and a device memory budget, decides which local data
// batches and which cached parameter rows live in device memory, and how big
// the access buffer pool is. A pure function: no device, no threads, no
// state. The model (what the peak counts, the order things are placed and
// evicted in, the levels) is in docs/memory-manager.md.
#ifndef GEEPS_MEMORY_PLANNER_H_
#define GEEPS_MEMORY_PLANNER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "geeps/status.h"
#include "memory/buffer_pool.h"

namespace geeps::memory {

// The guarantees a plan must give; each level implies the ones before it.
enum class Level {
  kNone = 0,                // the pool holds the peak once: it works, with stalls
  kDoubleBuffering = 1,     // pool >= 2 * peak: the next buffers fill while in use
  kAllLocalOnDevice = 2,    // and every local data batch lives on the device
  kWholeCacheOnDevice = 3,  // and every cached parameter row lives on the device
};
const char* LevelName(Level level);

// The rows of one shared table that the worker caches. On the device each
// costs 2 * row_bytes (the cache row and its oplog row).
struct CacheTable {
  uint64_t rows = 0;
  uint64_t row_bytes = 0;
};

// One batch of local data (the rows of a recorded LocalAccess).
struct LocalBatch {
  uint64_t bytes = 0;
};

enum class AccessKind { kRead, kUpdate, kLocal };

// One recorded access (a Read, PreUpdate or LocalAccess handle).
struct AccessInfo {
  AccessKind kind = AccessKind::kRead;
  // kRead/kUpdate: index into PlanInput::tables; kLocal: into local_batches.
  int table = 0;
  // The size of its buffer, when it needs one from the pool.
  uint64_t bytes = 0;
  // kRead/kUpdate: positions (< tables[table].rows) of the cached rows it
  // touches, in request order. Ignored for kLocal.
  std::vector<uint64_t> cache_rows;
};

enum class OpKind { kOpen, kClose };

// One op of the sequence: opening (Read, PreUpdate, LocalAccess) or closing
// (PostRead, Update, PostLocalAccess) the access `access`.
struct PlanOp {
  OpKind kind = OpKind::kOpen;
  int access = 0;  // index into PlanInput::accesses
};

struct PlanInput {
  uint64_t budget_bytes = 0;  // device bytes the plan may use; > 0
  Level required_level = Level::kDoubleBuffering;
  std::vector<CacheTable> tables;
  std::vector<LocalBatch> local_batches;
  std::vector<AccessInfo> accesses;
  // The sequence in order. An access is opened, then closed, before it is
  // opened again; nothing is left open at the end.
  std::vector<PlanOp> ops;
  // Pool buffers are rounded up to this (a power of two), as BufferPool does.
  uint64_t buffer_alignment = kDefaultAlignment;
  // The leftover budget enlarges the pool up to this many bytes; 0 = no cap.
  uint64_t max_pool_bytes = 0;
};

// A half-open range [begin, end) of cached-row positions.
using RowRange = std::pair<uint64_t, uint64_t>;

struct Plan {
  uint64_t budget_bytes = 0;
  Level level = Level::kNone;  // the highest level this plan meets
  // Max over the sequence of the (rounded) bytes of the pool buffers open at
  // once, for this placement.
  uint64_t peak_bytes = 0;
  // The pool size that a first-fit pool needs to replay the sequence in order
  // (allocate at open, free at close) without ever waiting: >= peak_bytes.
  uint64_t fit_extent_bytes = 0;
  // The least pool this placement works with at the required level.
  uint64_t pool_min_bytes = 0;
  uint64_t pool_bytes = 0;
  uint64_t local_device_bytes = 0;  // local batches on the device
  uint64_t local_total_bytes = 0;   // all local batches
  uint64_t cache_device_bytes = 0;  // 2 * row_bytes per device row
  uint64_t cache_total_bytes = 0;   // if every cached row were on the device
  // pool + local_device_bytes + cache_device_bytes <= budget_bytes.
  uint64_t device_bytes_used = 0;

  std::vector<bool> local_on_device;             // per local batch
  std::vector<std::vector<bool>> row_on_device;  // [table][cached row]
  std::vector<uint64_t> device_rows;             // per table: rows on device
  // Per access: whether it takes a buffer from the pool (reads and updates
  // always; local accesses when their batch is in host memory).
  std::vector<bool> access_needs_pool;

  // The device rows of `table` as sorted, disjoint ranges.
  std::vector<RowRange> DeviceRowRanges(size_t table) const;
  // A few lines for logs and error reports.
  std::string Describe() const;
  // One JSON object (device rows as ranges, not one flag per row).
  std::string ToJson() const;
};

// Plans the placement. Errors: kInvalidArgument for a malformed input (the
// message names the access, op or table); kResourceExhausted when the budget
// is below the least budget that can work at all, or below the least budget
// of input.required_level; the message gives the budget, that minimum, the
// peak, the pool needed, the local and the cache bytes.
StatusOr<Plan> MakePlan(const PlanInput& input);

// The least budget for which MakePlan(input with required_level = level)
// succeeds (input.budget_bytes is ignored). Errors as MakePlan's
// kInvalidArgument, or kResourceExhausted if it does not fit in 64 bits.
StatusOr<uint64_t> MinimumBudget(const PlanInput& input, Level level);

}  // namespace geeps::memory

#endif  // GEEPS_MEMORY_PLANNER_H_
