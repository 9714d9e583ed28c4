// Counters and timings of a worker and of the server shards.
#ifndef GEEPS_STATS_H_
#define GEEPS_STATS_H_

#include <cstdint>
#include <string>

#include "geeps/export.h"

namespace geeps {

// Bytes each stage of a worker's data path moved (docs/architecture.md,
// "Passes over the bytes"). Divided by the bytes of the rows read (or
// updated) per clock, each is that stage's number of passes over them.
struct GEEPS_EXPORT DataPathBytes {
  int64_t gather = 0;       // Read: cache rows -> the read buffer
  int64_t zero = 0;         // PreUpdate buffers and oplogs set to zero
  int64_t scatter_add = 0;  // Update: buffer -> oplog (and cache, read-my-writes)
  int64_t to_slot = 0;      // the oplog, or a direct Update's buffer -> the send slot
  int64_t pack = 0;         // updated rows copied into a message: non-consecutive ones, or a small
                            // update into its one frame (Config::pack_below_bytes)
  int64_t install = 0;      // a push's rows -> the cache (parts staged, own deltas re-added)
  int64_t app_copies = 0;   // CopyToHost / CopyFromHost

  // One JSON object, a key per field.
  std::string ToJson() const;
};

struct GEEPS_EXPORT WorkerStats {
  int rank = 0;
  int64_t clock = 0;             // clocks completed (the prologue is clock 0)
  int64_t iterations = 0;        // repeated iterations completed
  double read_wait_seconds = 0;  // time the application thread waited in Read
  int64_t reads_waited = 0;      // Reads that had to wait for fresh rows
  // Waits for pushes (a Read's or a Sync's) that polled without blocking
  // first (Config::spin_wait_us), and of those, the ones whose pushes came
  // before they had to block.
  int64_t waits_spun = 0;
  int64_t waits_ended_spinning = 0;
  // Its updates ask for pushes in the order of need now (Config::
  // push_in_read_order, adapt_push_order), and how often that changed.
  bool asks_read_order = false;
  int64_t push_order_switches = 0;
  int64_t messages_sent = 0;
  int64_t messages_received = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t pushes_installed = 0;  // fresh row blocks installed in the cache
  // Of those, installed by the application thread (while it waited for them
  // or had just sent): the rest by the channels' threads, in the background.
  int64_t pushes_installed_by_app = 0;
  // Of those, kept in the message that brought them instead of copied into
  // the cache (the host backend: docs/architecture.md, "Pushes kept where
  // they arrived").
  int64_t pushes_adopted = 0;
  // Updates whose buffer went straight to the send slot, bypassing the
  // oplog (the only Update of its table per clock, over consecutive cached
  // rows, without read-my-writes: docs/architecture.md, "Oplogs and slots").
  int64_t updates_direct = 0;
  // Reads that returned the cache rows in place, with no gather (BSP reads
  // of consecutive cached rows, without read-my-writes, whose table does
  // not advance while they are open).
  int64_t reads_in_place = 0;
  int64_t frames_dropped = 0;  // malformed or unexpected frames dropped
  // TCP/IPC connections to server partitions that were lost (reset or
  // closed) while the worker ran; ZeroMQ reconnects (docs/reliability.md,
  // "A connection that resets mid-job").
  int64_t connection_losses = 0;
  // Resends after a loss (Config::resend_after_connection_loss; queued at
  // once, sent by ZeroMQ once it has reconnected): one per loss, each a
  // Resync per table with rows there and the updates no push had included
  // yet, counted in updates_resent (docs/architecture.md, "Connection loss
  // and resend").
  int64_t reconnects = 0;
  int64_t updates_resent = 0;
  // Pushes that came again after a loss although this worker had them (its
  // Resync crossed the push): harmless, dropped without counting a frame.
  int64_t pushes_repeated = 0;
  DataPathBytes data_path;  // bytes moved per stage
  // The worker's device, "host:1 of 4" or "cuda:3 (NVIDIA H200, sm_90)";
  // "" until FinishVirtualIteration creates it (Config::device_ordinal).
  std::string device;
  uint64_t device_bytes_in_use = 0;
  // The memory manager (zero without a device memory budget).
  double memory_stall_seconds = 0;  // the application waited for buffers or copies
  // Bytes the memory manager moved between host and device memory: local
  // data swapped in / written back, and the rows of a shared table's cache
  // that it keeps in host memory, gathered for a Read / scattered from an
  // Update through their pinned staging buffers.
  int64_t bytes_host_to_device = 0;
  int64_t bytes_device_to_host = 0;
  uint64_t pool_bytes = 0;       // the access buffer pool
  uint64_t pool_high_water = 0;  // most pool bytes in use at once
  std::string memory_plan_json;  // the plan (what lives where); "" without one
  // Seconds the application waited, per recorded access ({"local#3":0.01,...}).
  std::string memory_stall_by_access_json;

  // One JSON object, a key per field (data_path nested).
  std::string ToJson() const;
};

struct GEEPS_EXPORT ShardStats {
  int shard = 0;                // which shard (Process: -1 when the process has none)
  int64_t updates_applied = 0;  // update messages applied
  int64_t rows_applied = 0;
  int64_t pushes_sent = 0;
  int64_t bytes_received = 0;
  int64_t bytes_sent = 0;
  int64_t frames_dropped = 0;  // malformed or unexpected frames dropped
  // Bytes each stage of the shard's data path moved (docs/architecture.md,
  // "Passes over the bytes").
  int64_t apply_bytes = 0;           // update rows added into the rows (or a clock's buffer)
  int64_t fold_bytes = 0;            // a finished clock's buffer folded into the rows
  int64_t push_copy_bytes = 0;       // rows copied into push messages (or copied
                                     // aside because a push still held them)
  int64_t push_zero_copy_bytes = 0;  // rows sent in pushes straight from the rows
  // Push parts sent before the minimum clock advanced: rows every worker had
  // updated for the clock (pipelined updates, Config::pipeline_part_bytes).
  int64_t early_push_parts = 0;
  // Update rows received again and not applied again: a worker resent a
  // clock it had already completed here, or restarted a message in parts
  // the shard had partly applied (after a connection reset). Not errors.
  int64_t repeated_rows_skipped = 0;
  // TCP/IPC connections to this shard that ended: a worker's at its end, a
  // lost one, or a stranger's cut off (an oversized frame, a failed CURVE
  // handshake). ZeroMQ drops those frames before the shard sees them.
  int64_t connections_closed = 0;
  // Times a worker's routing id came from a new connection while the one
  // its messages came on was still open (the newest takes it over: a stale
  // connection, or another process using the id; docs/reliability.md).
  int64_t routing_id_handovers = 0;
  // Resends after a connection loss: Resync messages received, and pushes
  // sent again from the held rows of the last push because the worker had
  // not installed it.
  int64_t resyncs_received = 0;
  int64_t repushes = 0;
  // Pushes held back until another table's push of the same clock had gone
  // out: the clock's pushes leave in the order the workers read the tables
  // (docs/architecture.md, "Pushes in the order of need").
  int64_t pushes_deferred = 0;

  // Adds the counters of `other` (e.g. of another channel of the shard).
  void Add(const ShardStats& other);
  // One JSON object, a key per field.
  std::string ToJson() const;
};

// One machine's relay (Config::aggregate_per_machine: the workers of a
// machine send their summed updates through it, and it shares each push
// among them; docs/architecture.md, "Machine-level aggregation").
struct GEEPS_EXPORT RelayStats {
  int machine = -1;               // the machine's index; -1: no relay here
  int64_t updates_up = 0;         // summed updates sent to the partitions
  int64_t pushes_shared = 0;      // pushes handed to the machine's workers
  int64_t frames_dropped = 0;     // malformed or unexpected frames
  int64_t connection_losses = 0;  // to the partitions
  int64_t updates_resent = 0;     // sent again after those losses
  // One JSON object, a key per field.
  std::string ToJson() const;
};

}  // namespace geeps

#endif  // GEEPS_STATS_H_
