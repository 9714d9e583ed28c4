// A worker's cached state of one shared table, shared by the application
// thread and the worker's communication threads.
//
// Invariants (all guarded by `mu`):
//  - cache holds the table's cached rows (`rows`, sorted: every row the
//    worker reads or updates), as of the last push of each partition, plus,
//    with read-my-writes, this worker's deltas the servers had not included.
//  - oplog holds this worker's deltas of the current clock not yet handed to
//    the communication threads (zero where none).
//  - slices[i].age only grows.
#ifndef GEEPS_CLIENT_TABLE_CACHE_H_
#define GEEPS_CLIENT_TABLE_CACHE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "geeps/config.h"

namespace geeps::client {

// The rows of a table in one server partition.
struct PartitionSlice {
  int partition = 0;
  uint64_t row_begin = 0, row_end = 0;    // the partition's row span
  uint32_t cache_begin = 0;               // first cached row in the span
  uint32_t cache_count = 0;               // cached rows in the span
  std::vector<uint64_t> update_rows;      // rows this worker updates (sorted)
  std::vector<uint32_t> update_pos;       // their positions in the cache
  int64_t age = 0;       // minimum clock of the last installed push
  int64_t included = 0;  // this worker's clocks included in that push
};

// One clock's deltas of a table, copied to host memory for sending.
struct OplogSlot {
  float* host = nullptr;  // pinned, rows.size() * width floats
  int64_t clock = 0;
  bool dirty = false;     // any delta at all
  bool checkpoint = false;  // asks the partitions to checkpoint at clock + 1
  int pending_sends = 0;  // communication threads yet to send it
  bool retained = false;  // kept for read-my-writes re-application
  bool in_use = false;
};

struct TableCache {
  TableId id = 0;
  uint32_t width = 0;
  std::vector<uint64_t> rows;  // cached rows, sorted
  float* cache = nullptr;      // device memory, rows.size() * width
  float* oplog = nullptr;      // device memory, rows.size() * width

  std::mutex mu;
  std::condition_variable cv;
  bool oplog_dirty = false;
  std::vector<PartitionSlice> slices;  // partitions with a non-empty span
  std::vector<std::unique_ptr<OplogSlot>> slots;
  std::deque<OplogSlot*> retained;     // by clock, oldest first

  size_t floats() const { return rows.size() * width; }
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_TABLE_CACHE_H_
