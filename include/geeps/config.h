// Configuration of a libgeeps job: its tables, its shape and its tunables.
#ifndef GEEPS_CONFIG_H_
#define GEEPS_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "geeps/export.h"
#include "geeps/status.h"

namespace geeps {

using TableId = uint32_t;
using RowIndex = uint64_t;

// Slack value meaning "no staleness bound" (asynchronous mode). A Read with
// this slack never waits for other workers (except for the prologue, below).
constexpr int kUnboundedSlack = std::numeric_limits<int>::max();

// A table of `num_rows` rows of `row_width` floats each. Tables are numbered
// by their position in Config::tables (TableId 0, 1, ...).
struct TableSpec {
  std::string name;
  uint64_t num_rows = 0;   // 1 .. 2^32 - 1 (caches index rows with 32-bit offsets)
  uint32_t row_width = 0;  // floats per row, >= 1
  // false: a shared parameter table (Read / PreUpdate / Update), sharded over
  //        the servers.
  // true:  worker-private local data (LocalAccess), never sent anywhere; each
  //        worker has its own copy, zero-initialised.
  bool local = false;
};

enum class DeviceKind {
  kAuto,  // CUDA when a GPU is present, else host
  kHost,  // device memory is host memory under a byte budget
  kCuda,  // an NVIDIA GPU (error where none exists or CUDA was not built)
};

// What the memory manager must guarantee when a device memory budget is set
// (each level implies the ones before it). A budget that cannot give it is an
// error at FinishVirtualIteration.
enum class MemoryGuarantee {
  kNone,                // the access buffer pool holds the peak once
  kDoubleBuffering,     // the pool holds twice the peak (prefetch overlaps use)
  kAllLocalOnDevice,    // and all local data stays in device memory
  kWholeCacheOnDevice,  // and every cached parameter row (with its oplog row)
};

// Whether a job starts from a checkpoint (docs/operations.md).
enum class ResumeMode {
  kOff,        // start from zero; old checkpoints in checkpoint_dir are ignored
  kRequired,   // restore the newest complete checkpoint; none is an error
  kIfPresent,  // restore the newest complete checkpoint if there is one
};

struct Config {
  std::vector<TableSpec> tables;

  int num_workers = 1;   // workers (one application thread each)
  int num_shards = 1;    // server shards; each owns a contiguous row range
  int num_channels = 1;  // sockets + threads per shard (and per worker)

  // A worker sees its own updates at once, re-applied on top of every refresh
  // from the servers (see docs/api.md).
  bool read_my_writes = false;

  // The host backend only: a direct update (docs/architecture.md, "Oplogs
  // and slots") is sent from the application's update buffer itself
  // instead of a copy in its send slot, saving one pass over the update.
  // Off by default because it is not isolated: a write into that buffer
  // after Update, while ZeroMQ still sends from it, reaches the servers and
  // every worker (docs/api.md, "Writing through the pointers libgeeps
  // returns"). On CUDA, updates are always copied.
  bool send_updates_in_place = false;

  // Servers add the updates of a clock in worker rank order, so that a run is
  // bitwise reproducible whatever the arrival order, channel count or timing
  // (costs a buffer per worker and clock on the servers).
  bool deterministic_bsp = false;

  // Machine-level aggregation (off by default; docs/operations.md, "Several
  // GPUs per machine"): the workers of one machine add their updates of a
  // clock together, in rank order, and one relay per machine sends the sum to
  // every partition as the machine's one participant and shares each push
  // with them. Reads see what they see without it (BSP exact, SSP's bound per
  // worker). In a multi-process job the machines are the worker processes
  // with the same ProcessOptions::machine (GEEPS_MACHINE, else the host
  // name); in an EmbeddedCluster, `workers_per_machine` consecutive ranks
  // (0: all of them one machine; it must be 0 in a multi-process job).
  bool aggregate_per_machine = false;
  int workers_per_machine = 0;  // in [0, num_workers]

  // Slack of VirtualRead calls that give none. 0 = BSP.
  int default_slack = 0;

  DeviceKind device = DeviceKind::kAuto;
  // The device (ordinal) of every worker of this process; -1 = automatic:
  // worker w of a process gets (local_rank * workers_in_process + w) mod
  // device_count, where local_rank is the process's index on its machine
  // (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or GEEPS_LOCAL_RANK; 0 for an
  // EmbeddedCluster) and device_count the GPUs (CUDA) or host_devices (host).
  // An ordinal >= device_count is kInvalidArgument at EmbeddedCluster::Start
  // and Process::Join. GEEPS_DEVICE_ORDINAL sets it (ApplyEnvironment).
  int device_ordinal = -1;
  // Host backend: how many host devices a process presents (each with its
  // own memory; an operation on another device's buffer is kInternal), so
  // that device selection is tested without GPUs. GEEPS_HOST_DEVICES sets it
  // (ApplyEnvironment). In [1, 1024].
  int host_devices = 1;
  // Device memory each worker may use, in bytes. 0 = no limit. With a budget,
  // the memory manager plans at FinishVirtualIteration what lives in device
  // memory and what in (pinned) host memory; see docs/memory-manager.md.
  uint64_t device_memory_budget = 0;
  MemoryGuarantee memory_guarantee = MemoryGuarantee::kDoubleBuffering;
  // How many local accesses to data in host memory the memory manager swaps
  // in ahead of the application (0: copy at the access itself). Prefetching
  // needs a plan with double buffering.
  int prefetch_depth = 2;
  // Host backend only, an emulation for benchmarks: host<->device copies take
  // at least bytes / this many seconds, as over PCIe. 0 = off.
  uint64_t emulated_copy_bandwidth = 0;  // bytes per second
  // An emulation for benchmarks (any backend): the application thread waits
  // this long at every PostRead, Update and PostLocalAccess, as if it had
  // computed that long on the buffer (on a GPU), so that a trainer without
  // real compute shows how much of the data movement overlaps it. 0 = off.
  std::chrono::microseconds emulated_compute_per_access{0};
  // Host backend only, a test mode: every host stream (the worker's
  // compute_stream() included) runs each operation on its own thread after a
  // random delay of up to 200 us, never inline. Work that is not ordered
  // with a stream (a missing event or synchronisation, in libgeeps or in the
  // application) then runs late and gives wrong results on a machine without
  // a GPU, as it would on one. The variable GEEPS_ASYNC_HOST_STREAMS=1 turns
  // it on for every worker of the process (read at FinishVirtualIteration,
  // with or without ApplyEnvironment), so that a whole test suite can run in
  // this mode; =0 leaves the field as set.
  bool async_host_streams = false;
  // The checked mode (docs/api.md, "Writing through the pointers libgeeps
  // returns"): the worker names a misuse of the buffers it hands out at
  // the call where it shows: a Read buffer written before PostRead
  // (PostRead fails), read or written after it (poisoned with NaN; a write
  // makes the next Read fail), an update buffer written after Update (the
  // next PreUpdate fails), a non-finite delta (Update fails, naming the
  // row; nothing is sent). It gathers every read into a buffer of its own
  // and copies every update, and costs a look at each buffer at each call
  // (docs/api.md says how much). GEEPS_CHECKED=1 turns it on for every
  // worker of the process (read by the worker itself, with or without
  // ApplyEnvironment); =0 leaves the field as set.
  bool checked = false;
  // Host backend only, a test mode: device memory gets addresses that the
  // host cannot dereference, as on a GPU (the device's own operations
  // translate them), so code that touches a buffer returned by Read,
  // PreUpdate or LocalAccess directly, instead of through CopyToHost /
  // CopyFromHost or work on compute_stream(), crashes on a machine without a
  // GPU too. GEEPS_HOST_OPAQUE_POINTERS=1 turns it on for every worker of
  // the process (read at FinishVirtualIteration, as above).
  bool host_opaque_device_pointers = false;
  // If set, Shutdown() writes the worker's stats and memory plan (JSON) to
  // this path; "%r" is replaced by the worker's rank. A file that cannot be
  // written makes Shutdown() return kUnavailable naming the path (only
  // there: RunWorkers, which shuts no worker down, returns OK).
  std::string stats_file;

  // Longest time any call waits for a peer before it fails (kDeadlineExceeded
  // or kUnavailable). Nothing in libgeeps waits forever.
  std::chrono::milliseconds timeout{30000};

  // Multi-process jobs: a peer silent this long is declared lost, and every
  // waiting call fails with kUnavailable naming it. Heartbeats go every
  // heartbeat_timeout / 10.
  std::chrono::milliseconds heartbeat_timeout{10000};

  // Largest message put on the wire; larger updates, pushes and subscriptions
  // travel in parts (libzmq fails on frames over 2 GB).
  uint64_t max_message_bytes = 1ull << 30;

  // Pipelined updates (docs/architecture.md, "Pipelined pushes"): a
  // worker's update to a partition leaves in parts of at most this many
  // bytes, in row order, and a shard pushes the subscribed rows that every
  // worker has updated for the clock (at least this many bytes at a time)
  // before the last part arrives, so the push of a table overlaps its
  // update on a full-duplex link. 0: off (one message per partition, up to
  // max_message_bytes). Else at least 64. Every rank of a job must agree
  // (a shard pushes early only with it set).
  uint64_t pipeline_part_bytes = 0;

  // A message (or part) smaller than this travels as one frame holding its
  // header, rows and values (the wire's packed form), copied there: for a
  // few KiB that costs less than ZeroMQ's work per extra frame and a lent
  // buffer's release (docs/performance.md, "4 KiB"). Larger ones go as
  // separate frames, their values sent without a copy where they can be.
  // 0: never packed. At most 1 MiB. Every rank of a job must agree (it
  // bounds the largest frame a receiver accepts).
  uint64_t pack_below_bytes = 16 * 1024;

  // A Read (or Sync) that waits for pushes first polls for them without
  // blocking, for up to this many microseconds, while the worker's recent
  // waits averaged within that (docs/architecture.md, "Threads of the data
  // path"): a blocked thread's wake-up costs tens of microseconds on a
  // virtual machine, a large part of a small round trip (4 KiB: 0.89 of a
  // blocking ZeroMQ pair without, about 1.5 with; docs/performance.md).
  // Waits longer than that soon stop spinning; a spinning thread yields its
  // core to any other thread ready to run there. 0: never spin. At most
  // 100000 (100 ms). Each worker may choose its own.
  uint32_t spin_wait_us = 200;

  // Pushes in the order of need (docs/architecture.md): the workers tell the
  // partitions in which order an iteration first reads the tables, and a
  // partition holds a clock's push of a table until the pushes of the
  // tables read before it have gone out. Pays where the network or the
  // CPU is the limit during the backward pass (16 emulated machines at
  // 250 ms per iteration: 0.45 -> 0.53 of linear); costs where compute
  // hides the pushes anyway (1000 ms: 0.91 -> 0.85), since the held pushes
  // then leave in one burst after the first table's (docs/performance.md,
  // "16 machines"). true: every update asks for it. A partition orders a
  // clock's pushes while any worker's latest update asked.
  bool push_in_read_order = false;

  // Unless push_in_read_order: each worker asks for pushes in the order of
  // need while its reads wait for a large part of its iterations (more
  // than 30% of the last three turns it on, less than 20% off;
  // src/client/push_order_policy.h), so a job that the network or the CPU
  // limits gets the order and one whose compute hides the pushes does not.
  // false: never asks (pushes go as their clocks complete).
  bool adapt_push_order = true;

  // Multi-process jobs (TCP/IPC): survive a worker-to-partition connection
  // that is lost and comes back (docs/architecture.md, "Connection loss and
  // resend"). A worker keeps each update until a push acknowledges it and
  // sends it again after a reconnect; a partition keeps the rows of its
  // last push until every subscriber has acknowledged it, and pushes them
  // again to a worker that reconnects without it. Off: a lost update or
  // push makes the job time out naming the lost connection. Every rank of a
  // job must agree.
  bool resend_after_connection_loss = true;

  // Checkpoints (docs/architecture.md, "Checkpoints"). Each server partition
  // writes its rows to checkpoint_dir (empty: no checkpoints) when its
  // minimum clock reaches a multiple of checkpoint_every (0: only on
  // GeePS::RequestCheckpoint()), keeping its last two.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // clocks
  // At start, restore the newest clock every partition has a file of; the
  // workers then resume at that clock (GeePS::resumed_clock()).
  ResumeMode resume = ResumeMode::kOff;
};

// Checks a config; returns kInvalidArgument naming the first bad field.
GEEPS_EXPORT Status ValidateConfig(const Config& config);

// Overrides fields of `config` from the GEEPS_* environment variables of
// Config (GEEPS_NUM_WORKERS, GEEPS_TIMEOUT_MS, GEEPS_DEVICE, ...: every one,
// with its range or words and default, in docs/operations.md's table, which
// `geeps_launch --help-env` prints too). A malformed or out-of-range value is
// kInvalidArgument naming the variable. Not applied by the library:
// EmbeddedCluster::Start and Process::Join take the config as given, so a
// program that wants these overrides calls this on its config first. (The
// test modes GEEPS_ASYNC_HOST_STREAMS and GEEPS_HOST_OPAQUE_POINTERS are the
// exception: every worker reads them.)
GEEPS_EXPORT Status ApplyEnvironment(Config* config);

// Rows first, first+1, ..., first+count-1.
GEEPS_EXPORT std::vector<RowIndex> RowRange(RowIndex first, RowIndex count);

// Rows needed to hold `num_floats` floats in rows of `row_width`.
inline uint64_t RowsFor(uint64_t num_floats, uint32_t row_width) {
  return (num_floats + row_width - 1) / row_width;
}

}  // namespace geeps

#endif  // GEEPS_CONFIG_H_
