// A worker's device-side tables and its data path: the parameter caches and
// oplogs of the shared tables, the local tables, each recorded access's
// buffers and indexes, and the passes over the bytes between them (gather,
// scatter-add, swaps of local data, zeroing) on the application thread's
// stream (docs/architecture.md, "Per-worker state (client)", "Passes over
// the bytes").
//
// Threads: the application thread, except tables() (shared with the comm
// channels, each table under its mutex) and memory() (stats, any thread once
// built).
//
// Invariants:
//  - every device allocation is made once, at Allocate (and an update
//    buffer's second buffer at its first resend), and freed only by Free.
//  - an access buffer from the pool (pooled) is held only while its access
//    is open; an update buffer sent in place (send_refs) is zeroed or handed
//    out again only once ZeroMQ has released it and no slot keeps it for
//    resending.
#ifndef GEEPS_CLIENT_DATA_PATH_H_
#define GEEPS_CLIENT_DATA_PATH_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "client/adopted_rows.h"
#include "client/comm_channel.h"
#include "client/iteration_plan.h"
#include "client/memory_manager.h"
#include "client/op_sequence.h"
#include "client/oplog.h"
#include "client/swap_engine.h"
#include "client/table_cache.h"
#include "common/mutex.h"
#include "device/device.h"
#include "geeps/config.h"
#include "geeps/status.h"

namespace geeps::client {

// A run of an access's rows (in request order) whose cached rows live on
// one side: rows [out, out + count) of the buffer; device rows gather from /
// scatter to the device cache through index[index_at ..], host rows through
// host_index[index_at ..] and staging[index_at * width ..].
struct AccessRun {
  uint32_t out = 0, count = 0;
  bool on_device = true;
  uint32_t index_at = 0;
};

// Device memory of one recorded access.
struct AccessBuffers {
  float* buffer = nullptr;    // rows.size() * width
  uint32_t* index = nullptr;  // device: positions in the cache / local table
  bool contiguous = false;    // local access over consecutive rows
  float* direct = nullptr;    // contiguous local access: pointer into the table
  // Memory manager: `buffer` comes from the pool while the access is open
  // (reads, updates, local data in host memory).
  bool pooled = false;
  // `buffer` when it is this access's own (not the pool's, which lends it
  // on at the access's end), else null.
  float* own() const { return pooled ? nullptr : buffer; }
  float* host_rows = nullptr;  // local data in host memory: contiguous rows there
  float* staging = nullptr;    // ... or a pinned buffer to gather/scatter through
  // An in-place read of a push kept in its message: holds the message until
  // PostRead (the slice may move on to the next push meanwhile).
  std::shared_ptr<const AdoptedRows> adopted;
  // Reads and updates: the runs of rows by side (one device run when the
  // whole cache is on the device), and the host positions of host rows.
  std::vector<AccessRun> runs;
  std::vector<uint32_t> host_index;
  uint32_t host_count = 0;  // rows in host memory
  // Direct updates on a device whose memory the host can read: the update
  // is sent from `buffer` itself (no copy into the slot); this counts the
  // ZeroMQ messages still reading it, which PreUpdate waits out before
  // zeroing it again.
  std::shared_ptr<std::atomic<int>> send_refs;
  // A buffer sent in place is zeroed by a Read that waits for pushes once
  // ZeroMQ has released it (kPending until then); PreUpdate skips a
  // buffer that is kDone.
  enum class Zeroing { kNone, kPending, kDone };
  Zeroing zeroing = Zeroing::kNone;
  // Resend after a connection loss (TableCache::retain_until_acked): the
  // update of the last clock stays in `buffer` until a push acknowledges
  // it, so PreUpdate hands out this second buffer meanwhile (the two are
  // swapped with their refs and zeroing states); allocated when first
  // needed, never with a memory budget (the update is then copied into
  // its slot instead).
  float* alt = nullptr;
  std::shared_ptr<std::atomic<int>> alt_refs;
  Zeroing alt_zeroing = Zeroing::kNone;
  // A read returned in place and not yet PostRead (counted in the table's
  // open_in_place_reads).
  bool open_in_place = false;
};

class DataPath {
 public:
  // Everything outlives the data path. `stream` is the application thread's.
  DataPath(const Config* config, int rank, const OpSequence* seq, device::Device* device,
           device::Stream* stream, ClientCounters* counters);
  DataPath(const DataPath&) = delete;
  DataPath& operator=(const DataPath&) = delete;

  // ---- Setup, at FinishVirtualIteration, in this order.
  // The shared tables' caches from the plan (rows and slices), no memory;
  // then the memory manager under a device memory budget.
  Status BuildTables(const IterationPlan& plan);
  // Cache, oplogs, local tables, access buffers and indexes; the swap engine.
  Status Allocate();
  // Whether each shared table's cache lies wholly in device memory (for
  // IterationPlan::PlaceCaches).
  std::vector<bool> CacheOnDevice() const;
  // The direct updates sent in place from their own host-readable buffers.
  void PlanSendInPlace(const IterationPlan& plan);

  std::vector<std::unique_ptr<TableCache>>& tables() { return tables_; }
  TableCache& table(TableId id) { return *tables_[id]; }
  AccessBuffers& read_buf(int32_t h) { return read_bufs_[h]; }
  AccessBuffers& update_buf(int32_t h) { return update_bufs_[h]; }
  size_t num_reads() const { return read_bufs_.size(); }
  size_t num_updates() const { return update_bufs_.size(); }
  size_t num_locals() const { return local_bufs_.size(); }
  MemoryManager* memory() const { return memory_.get(); }  // null without a budget
  SwapEngine* swap() const { return swap_.get(); }         // null: swaps at the access

  // ---- The data path (application thread).
  // Copies the rows of `slices` (indexes into t.slices) that are kept in
  // their push's message (PartitionSlice::adopted) into the cache, for
  // whoever reads them there.
  Status Materialize(TableCache& t, const std::vector<int>& slices) GEEPS_REQUIRES(t.mu);
  // A read's rows from the cache into its (pool) buffer.
  Status Gather(int32_t h, TableCache& t) GEEPS_REQUIRES(t.mu);
  // Closes a read returned in place (PostRead). Work the application queued
  // on its stream before this call may still read the rows: an event is
  // recorded there that every later install into the cache waits for
  // (TableCache::in_place_reads_done), and a push kept in its message
  // (AccessBuffers::adopted) is let go only once the stream gets here.
  Status CloseInPlaceRead(TableCache& t, AccessBuffers& b) GEEPS_REQUIRES(t.mu);
  // An update's buffer into the oplog (and the cache with `read_my_writes`),
  // then its pool buffer back. Takes t.mu.
  Status Scatter(int32_t h, bool read_my_writes);
  // The buffer PreUpdate hands out, zeroed: a pool buffer, the second
  // buffer when the first is kept for resending, after ZeroMQ has released
  // it (or a kDeadlineExceeded after `timeout`). `peer_failure` (when given)
  // is asked while it waits: a non-OK answer (a lost process, a failed
  // worker: ZeroMQ may never let go of a message to a dead peer) ends the
  // wait with that status.
  StatusOr<float*> PrepareUpdate(int32_t h, Oplog& oplog, std::chrono::milliseconds timeout,
                                 const std::function<Status()>& peer_failure = {});
  // Local accesses: the rows handed out at LocalAccess / LocalRead, and their
  // write-back at PostLocalAccess.
  StatusOr<float*> OpenLocal(int32_t h);
  Status CloseLocal(int32_t h);
  // The pool buffer of a managed access, taken / returned.
  Status AcquireBuffer(AccessBuffers& b, uint64_t bytes, MemoryManager::AccessRef who);
  Status ReleaseBuffer(AccessBuffers& b);
  // CopyRows of valid rows (checked by the caller) into host memory `out`.
  Status CopyRows(TableId table, const std::vector<RowIndex>& rows, float* out);
  // Zeroes the update buffers sent in place that ZeroMQ has released, while
  // the application thread would only wait (Worker::WaitForPushes); returns
  // whether one is still held.
  bool ZeroReleasedUpdateBuffers();

  // ---- The end.
  // After the channels stop: waits (at most kReleaseWait) until ZeroMQ has
  // released the update buffers sent in place; whether it still holds one
  // (then no device memory may be freed).
  bool UpdateBuffersStillSending() const;
  // The swap engine and the memory manager go first (the pool lives in
  // device memory); then, unless ZeroMQ still holds an update buffer,
  // FreeMemory frees every allocation (and lets go of pushes kept in their
  // messages).
  void DropManagers();
  void FreeMemory();

 private:
  StatusOr<float*> AllocFloats(size_t count);
  StatusOr<float*> AllocPinned(size_t floats);  // zeroed
  StatusOr<uint32_t*> UploadIndex(const std::vector<uint32_t>& index);
  // Device bytes outside the memory manager's plan: indexes, buffers of
  // scattered local accesses.
  uint64_t FixedDeviceBytes() const;
  Status AllocateTables();
  Status BuildAccesses();
  // Index and runs of a read or update access over the cached rows.
  Status BuildCacheAccess(const RecordedAccess& a, const TableCache& t, AccessBuffers& b);
  Status BuildSwapEngine();
  // PrepareUpdate of a buffer whose last update is kept for resending: hands
  // out the other buffer (AccessBuffers::alt), or, where there is none,
  // copies the kept update into its slot so the buffer is free again.
  Status FreeKeptBuffer(AccessBuffers& b, TableCache& t, Oplog& oplog, size_t floats);
  // Copies a managed local access between host memory and its pool buffer.
  Status SwapLocal(const RecordedAccess& a, const AccessBuffers& b, bool to_device, int handle);
  // Fills `floats` floats of device memory with zeros on the stream and
  // waits (counted as zero_bytes).
  Status ZeroBuffer(float* buffer, size_t floats);

  const Config* config_;
  const int rank_;
  const OpSequence* seq_;
  device::Device* device_;
  device::Stream* stream_;
  ClientCounters* counters_;
  std::vector<void*> allocations_;  // device memory to free
  std::vector<void*> pinned_allocations_;
  std::vector<std::unique_ptr<TableCache>> tables_;  // shared tables; null if local
  std::vector<float*> local_tables_;                 // local tables; null if unused
  std::vector<bool> local_on_host_;                  // local table in pinned host memory
  std::unique_ptr<MemoryManager> memory_;            // null without a budget
  std::unique_ptr<SwapEngine> swap_;                 // null: swaps on the app thread
  std::vector<AccessBuffers> read_bufs_, update_bufs_, local_bufs_;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_DATA_PATH_H_
