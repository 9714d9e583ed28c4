// A worker's cached state of one shared table, shared by the application
// thread and the worker's communication threads.
//
// Invariants (all guarded by `mu`):
//  - cached rows have positions 0..rows.size()-1 (sorted by row). `runs`
//    cover the positions in order; a run's rows live in device memory
//    (cache/oplog, at device index `at` onwards) or, under a device memory
//    budget that cannot hold them, in pinned host memory (host_cache/
//    host_oplog, at host index `at` onwards). Within each side, indexes
//    follow positions, so any range of positions is a few contiguous pieces.
//  - cache holds the table's cached rows (`rows`, sorted: every row the
//    worker reads or updates), as of the last push of each partition, plus,
//    with read-my-writes, this worker's deltas the servers had not included.
//  - oplog holds this worker's deltas of the current clock not yet handed to
//    the communication threads (zero where none); its slots are the Oplog's
//    (oplog.h).
//  - slices[i].age only grows.
//  - a push in parts is written into the cache part by part only while no
//    in-place read is open, and a Read waits while a slice it covers is
//    being written so (slices[i].installing): no reader sees half a push.
#ifndef GEEPS_CLIENT_TABLE_CACHE_H_
#define GEEPS_CLIENT_TABLE_CACHE_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "device/device.h"
#include "geeps/config.h"

namespace geeps::client {

class AdoptedRows;  // client/adopted_rows.h
struct OplogSlot;   // client/oplog.h

// The rows of a table in one server partition.
struct PartitionSlice {
  int partition = 0;
  uint64_t row_begin = 0, row_end = 0;  // the partition's row span
  uint32_t cache_begin = 0;             // first cached row in the span
  uint32_t cache_count = 0;             // cached rows in the span
  std::vector<uint64_t> update_rows;    // rows this worker updates (sorted)
  std::vector<uint32_t> update_pos;     // their positions in the cache
  int64_t age = 0;                      // minimum clock of the last installed push
  int64_t included = 0;                 // this worker's clocks included in that push
  // A push in parts is being written straight into the cache (or one was
  // cut off there): the slice's cache rows are a mix of two pushes, and a
  // Read of them waits until a whole push has been installed.
  bool installing = false;
  // A push has been installed: the partition has this worker's subscription
  // (else a resend after a connection loss sends the subscription again).
  bool push_installed = false;
  // The last push, kept in the message that brought it instead of copied
  // into the cache (adopted_rows.h): while set, the slice's rows in `cache`
  // are stale, and whoever reads them there first copies these in
  // (DataPath::Materialize). Null: the cache holds the rows.
  std::shared_ptr<const AdoptedRows> adopted;
};

// Consecutive cached positions [begin, begin + count) on one side.
struct CacheRun {
  uint32_t begin = 0;
  uint32_t count = 0;
  bool on_device = true;
  uint32_t at = 0;  // index of `begin` in the device or host arrays
};

struct TableCache {
  TableId id = 0;
  uint32_t width = 0;
  // Where the repeated iteration first reads the table among the tables it
  // reads (1 = first; 0: not read there). Sent with the subscriptions: the
  // partitions push a clock's tables in this order (server/push_schedule.h).
  uint32_t read_rank = 0;
  std::vector<uint64_t> rows;   // cached rows, sorted
  float* cache = nullptr;       // device memory, device_rows * width
  float* oplog = nullptr;       // device memory, device_rows * width
  float* host_cache = nullptr;  // pinned host memory, host_rows * width
  float* host_oplog = nullptr;  // pinned host memory, host_rows * width
  uint32_t device_rows = 0, host_rows = 0;
  std::vector<CacheRun> runs;  // fixed after FinishVirtualIteration

  common::Mutex mu;
  std::condition_variable cv;
  bool oplog_dirty GEEPS_GUARDED_BY(mu) = false;
  // Reads returned in place (the cache rows themselves) and not yet
  // PostRead: while any is open, pushes in parts go through a staging
  // buffer instead of straight into the cache.
  int open_in_place_reads GEEPS_GUARDED_BY(mu) = 0;
  // Recorded on the application's stream at the PostRead of a read in
  // place (DataPath::CloseInPlaceRead): kernels queued before it may still
  // read the cache rows, so an install into the cache waits for it on its
  // channel's stream (CommChannel::InstallRows). `recorded`: since the last
  // install that waited for it.
  std::unique_ptr<device::Event> in_place_reads_done GEEPS_GUARDED_BY(mu);
  bool in_place_reads_recorded GEEPS_GUARDED_BY(mu) = false;
  // Partitions with a non-empty span. Not GEEPS_GUARDED_BY(mu): the vector
  // and each slice's span fields are fixed after DataPath::BuildTables and
  // read without the lock; age, included, installing and push_installed are
  // written under both mu and the io_mu_ of the slice's comm channel, and
  // read under either (an annotation cannot name single fields of the
  // elements, nor "either of two"); `adopted` is read and written under mu.
  std::vector<PartitionSlice> slices;
  std::vector<std::unique_ptr<OplogSlot>> slots GEEPS_GUARDED_BY(mu);
  std::deque<OplogSlot*> retained GEEPS_GUARDED_BY(mu);  // by clock, oldest first
  // Resend after a connection loss (Config::resend_after_connection_loss,
  // over TCP/IPC): a slot stays in use, its update ready to be sent again,
  // until every partition's push includes its clock. A direct update sent
  // in place from its update buffer keeps that buffer the same way: it is
  // not zeroed or handed out again while such a slot names it.
  bool retain_until_acked = false;

  size_t floats() const { return rows.size() * width; }

  // The side and index of cached position `pos` (< rows.size()), as a
  // one-row run. O(log runs).
  CacheRun Locate(uint32_t pos) const {
    auto it = std::upper_bound(runs.begin(), runs.end(), pos,
                               [](uint32_t p, const CacheRun& r) { return p < r.begin; });
    const CacheRun& r = *(it - 1);
    return CacheRun{pos, 1, r.on_device, r.at + (pos - r.begin)};
  }

  // Calls f(const CacheRun& piece, offset) for the pieces of positions
  // [begin, begin + count), in order; `piece` is clipped to the range (its
  // `at` adjusted) and `offset` is piece.begin - begin.
  template <typename F>
  void ForPieces(uint32_t begin, uint32_t count, F&& f) const {
    const uint32_t end = begin + count;
    for (const CacheRun& r : runs) {
      const uint32_t lo = std::max(begin, r.begin), hi = std::min(end, r.begin + r.count);
      if (lo >= hi) continue;
      f(CacheRun{lo, hi - lo, r.on_device, r.at + (lo - r.begin)}, lo - begin);
    }
  }
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_TABLE_CACHE_H_
