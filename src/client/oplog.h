// The oplog of a worker's shared tables: each table's deltas of the current
// clock (TableCache::oplog / host_oplog), and the host slots they are
// copied into when the table's clock advances (docs/architecture.md,
// "Oplogs and slots").
//
// A slot's life: Acquire (a free slot of the table, or a fresh one), Fill
// (the oplog's deltas, or a direct update's buffer, by cached position),
// Send (handed to every comm channel with partitions of the table), Release
// (by the channel that sent it last, once nothing keeps it), and at the
// worker's end FreeSlots (the slot memory ZeroMQ has released; the rest is
// leaked with a warning, never freed under its reader).
//
// Invariants (under the table's mutex):
//  - a slot is reused, and its memory freed, only when it is not in use and
//    ZeroMQ holds none of its messages (transport_refs == 0).
//  - after Fill the device and host oplogs are zero and clean; a direct
//    update leaves them untouched.
//  - a slot stays in use while a channel has yet to send it, while it is
//    retained for read-my-writes, or (retain_until_acked) until every
//    partition's push includes its clock.
#ifndef GEEPS_CLIENT_OPLOG_H_
#define GEEPS_CLIENT_OPLOG_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "client/table_cache.h"
#include "common/mutex.h"
#include "geeps/config.h"
#include "geeps/status.h"

namespace geeps::device {
class Device;
class Stream;
}  // namespace geeps::device

namespace geeps::client {

struct ClientCounters;

// One clock's deltas of a table, copied to host memory for sending.
struct OplogSlot {
  float* host = nullptr;  // pinned, rows.size() * width floats
  int64_t clock = 0;
  bool dirty = false;       // any delta at all
  bool checkpoint = false;  // asks the partitions to checkpoint at clock + 1
  int pending_sends = 0;    // communication threads yet to send it
  bool retained = false;    // kept for read-my-writes re-application
  bool in_use = false;
  // ZeroMQ messages that send straight from `host` and that ZeroMQ has not
  // released yet (its I/O thread decrements, with release order). The slot
  // is reused, and its memory freed, only at 0.
  std::atomic<int> transport_refs{0};
  // Set when this clock's update is sent from the update buffer itself
  // instead of `host` (host backend, Oplog::Fill): the buffer's host
  // address, the cached position of its first row, and the count of ZeroMQ
  // messages still reading it (the buffer's own).
  const float* send_from = nullptr;
  uint32_t send_first_pos = 0;
  std::atomic<int>* send_refs = nullptr;
};

// The buffer of a direct update (IterationPlan::direct_update): the table's
// whole clock of deltas, for cached positions first_pos onwards.
struct DirectUpdate {
  const float* buffer = nullptr;  // device memory
  size_t floats = 0;
  uint32_t first_pos = 0;
  // Non-null: the host can read `buffer`, and the update is sent from it in
  // place; this counts the ZeroMQ messages still reading it.
  std::atomic<int>* send_refs = nullptr;
};

// How long a stopped worker waits for ZeroMQ to release the memory it sends
// from: its sockets' linger time (1 s), and a little more.
inline constexpr std::chrono::milliseconds kReleaseWait{2000};

// A wait that finds the clock moved by more than this between two of its
// looks (beyond what it slept) was frozen: the process was stopped (SIGSTOP,
// a debugger), the machine suspended, or it was starved of CPU. Nobody else
// could make progress for it then, so that time is left out of its deadline.
inline constexpr std::chrono::milliseconds kFrozenGap{1000};

// Waits until ZeroMQ has released every message counted by `refs` (its free
// functions decrement, with release order), `deadline` passes, or `stop()`
// (when given, asked between polls) returns true; returns whether it has.
// Frozen time (kFrozenGap) does not count.
bool WaitReleased(const std::atomic<int>& refs, std::chrono::steady_clock::time_point deadline,
                  const std::function<bool()>& stop = {});

class Oplog {
 public:
  // Hands `slot` of table `table` to comm channel `channel` (CommChannel::
  // Send of a kSend task).
  using SendFn = std::function<Status(int channel, TableId table, OplogSlot* slot)>;

  // Everything outlives the oplog. `stream` is the application thread's;
  // `rank` names the worker in log lines.
  Oplog(const Config* config, int rank, device::Device* device, device::Stream* stream,
        ClientCounters* counters, SendFn send);

  // The table's clock advances, at `clock`: a slot filled with the clock's
  // deltas (from the oplog, or from `direct` if not null), marked to ask for
  // a checkpoint if `checkpoint`. Takes t.mu. Send it next.
  StatusOr<OplogSlot*> Snapshot(TableCache& t, int64_t clock, bool checkpoint,
                                const DirectUpdate* direct);
  // Hands `slot` to every channel with partitions of the table, in slice order.
  Status Send(const TableCache& t, OplogSlot* slot);
  // A resumed job's prologue: its updates are dropped (the oplog zeroed).
  // Takes t.mu.
  Status Discard(TableCache& t);

  // The parts of Snapshot.
  // A free slot of the table (not in use, released by ZeroMQ), or a fresh one.
  StatusOr<OplogSlot*> Acquire(TableCache& t) GEEPS_REQUIRES(t.mu);
  Status Fill(TableCache& t, OplogSlot& slot, int64_t clock, bool checkpoint,
              const DirectUpdate* direct) GEEPS_REQUIRES(t.mu);
  // Zeroes both sides of the oplog (counted as zero_bytes).
  Status Clear(TableCache& t) GEEPS_REQUIRES(t.mu);

  // The channels with partitions of the table, in slice order.
  static std::vector<int> Channels(const TableCache& t, int num_channels);
  // Frees the table's slots that are sent and (with read-my-writes, or with
  // t.retain_until_acked) included in every partition's last push. Called
  // by the comm channels.
  static void Release(TableCache& t, bool read_my_writes) GEEPS_REQUIRES(t.mu);
  // Whether a slot in use is sent from the update buffer whose ZeroMQ count
  // is `refs` (kept for resending).
  static bool Names(const TableCache& t, const std::atomic<int>* refs) GEEPS_REQUIRES(t.mu);
  // The slots that name `refs` take a copy of its buffer (host address
  // `from`, `floats` floats) and are sent from their own memory from now on.
  void CopyIn(TableCache& t, const std::atomic<int>* refs, const float* from, size_t floats)
      GEEPS_REQUIRES(t.mu);

  // After the channels are stopped: waits (at most `wait`) until ZeroMQ has
  // released the slots of `tables`, frees the memory of those it has, and
  // leaks the rest with a warning. Returns how many were leaked. Not
  // analysed: it reads the tables' slots without their locks, which no
  // other thread takes once the channels are stopped.
  size_t FreeSlots(const std::vector<std::unique_ptr<TableCache>>& tables,
                   std::chrono::milliseconds wait) GEEPS_NO_THREAD_SAFETY_ANALYSIS;

 private:
  const Config* config_;
  const int rank_;
  device::Device* device_;
  device::Stream* stream_;
  ClientCounters* counters_;
  SendFn send_;
  std::vector<void*> slot_memory_;  // pinned, of every slot allocated
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_OPLOG_H_
