// One communication channel of a worker: a DEALER socket to channel
// `channel` of every shard. The worker's subscriptions and per-clock updates
// are sent by the thread that makes them (Send(), the application thread),
// and the rows the partitions push are installed into the parameter cache by
// whichever thread gets to them first: an application thread waiting for
// them (PumpPolled(), from the worker's wait), or the channel's own thread, which
// installs pushes in the background while the application computes. The
// sockets are used only under io_mu_, so they move between the two threads.
//
// The channel thread leaves the sockets to the application thread while it
// waits for pushes, and for kHandOff after each wait: in a tight loop the
// thread that needs a push receives it itself (one thread switch fewer each
// way than a hop through the channel thread); while the application
// computes, the channel thread installs what arrives. docs/architecture.md,
// "Threads of the data path".
//
// Threads: every public method may be called from any thread.
#ifndef GEEPS_CLIENT_COMM_CHANNEL_H_
#define GEEPS_CLIENT_COMM_CHANNEL_H_

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/push_receipt.h"
#include "client/table_cache.h"
#include "common/mutex.h"
#include "device/device.h"
#include "geeps/config.h"
#include "geeps/status.h"
#include "transport/context.h"
#include "transport/drop_log.h"
#include "transport/part_sequence.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace geeps::transport {
class SecurityConfig;
}  // namespace geeps::transport

namespace geeps::client {

struct ClientCounters {
  std::atomic<int64_t> messages_sent{0}, messages_received{0}, bytes_sent{0}, bytes_received{0},
      pushes_installed{0}, pushes_installed_by_app{0}, pushes_adopted{0}, frames_dropped{0},
      connection_losses{0}, reconnects{0}, updates_resent{0}, pushes_repeated{0};
  // WorkerStats::data_path, by stage (relaxed: statistics only).
  std::atomic<int64_t> gather_bytes{0}, zero_bytes{0}, scatter_add_bytes{0}, to_slot_bytes{0},
      pack_bytes{0}, install_bytes{0}, app_copy_bytes{0};
  static void Count(std::atomic<int64_t>& c, size_t bytes) {
    c.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }
};

// What the channel needs of its worker. Everything outlives the channel.
struct ClientContext {
  const Config* config = nullptr;
  int rank = 0;
  device::Device* device = nullptr;
  std::vector<std::unique_ptr<TableCache>>* tables = nullptr;  // null = local
  ClientCounters* counters = nullptr;
  // CURVE settings of a multi-process job's sockets; null: plain sockets.
  const transport::SecurityConfig* security = nullptr;
  // The worker asks for pushes in read order (PushOrderPolicy); null: never.
  const std::atomic<bool>* asks_read_order = nullptr;
};

struct CommTask {
  enum Kind : uint32_t { kSubscribe = 1, kSend = 2 };
  uint32_t kind = 0;
  uint32_t table = 0;
  OplogSlot* slot = nullptr;  // kSend
};

// What the worker's application thread and its channels' threads share
// about waiting for pushes (owned by the worker, outlives its channels).
struct WaitState {
  // An application thread is waiting for pushes (and receiving them itself).
  std::atomic<bool> app_waiting{false};
  // When an application thread last began or ended a wait (steady clock ns).
  std::atomic<int64_t> last_wait_ns{0};
  // eventfd: wakes an application thread waiting in poll (a channel thread
  // installed a push it may need, or the worker is shutting down).
  int wake_fd = -1;
  static int64_t NowNs();
  void Wake() const;  // writes wake_fd; never fails
};

// Tests only: let channels keep pushes that came over inproc too, whose
// bytes are the sender's (CommChannel::AdoptPush), so that the keeping
// itself can be tested in one process. Off unless a test turns it on.
void AdoptInprocPushesForTesting(bool on);

class CommChannel {
 public:
  // How long the channel thread leaves the sockets to an application thread
  // after its last wait for pushes.
  static constexpr int64_t kHandOffNs = 1000000;  // 1 ms
  // How long the channel thread sleeps at a time while an application
  // thread waits: after a wait ends, it resumes within this plus the
  // hand-off.
  static constexpr int64_t kStepAsideNs = 5000000;  // 5 ms

  // `endpoints[s]` is shard s's endpoint for this channel; `wait` may be
  // null (no application thread waits in poll: the channel thread installs
  // every push).
  CommChannel(const ClientContext& ctx, transport::Context* context, int channel,
              std::vector<std::string> endpoints, WaitState* wait);
  ~CommChannel();  // Stop()

  Status Start();
  // Sends the task's messages on the calling thread, then installs any push
  // that has arrived. kFailedPrecondition once stopped.
  Status Send(const CommTask& task);
  // Readable when a push may have arrived or a connection changed
  // (ZeroMQ's ZMQ_FD of each shard socket, then of each shard's monitor,
  // -1 where none: edge-triggered, so PumpPolled() after every wake-up).
  // Valid from Start() to Stop().
  const std::vector<int>& poll_fds() const { return poll_fd_list_; }
  // Pump() after the caller polled poll_fds() (`polled[i]` for
  // poll_fds()[i]; `failed`: the poll failed, read everything): reads the
  // sockets that signalled, without polling them again.
  // To save a receive that finds nothing per wait, PumpPolled() stops
  // reading a socket once a push from it is installed; until a receive
  // finds nothing there, its descriptor may not signal the next arrival.
  // A waiting thread calls ProbeUnchecked() before it polls again: reads
  // such sockets until empty (Send() does too); returns how many pushes it
  // installed.
  void PumpPolled(const pollfd* polled, bool failed);
  int ProbeUnchecked();
  // Stops and joins the thread, then closes the sockets (what was sent is
  // still delivered: linger). Idempotent.
  void Stop();
  // How often the TCP/IPC connection to shard `shard` was lost while the
  // channel ran (a socket monitor's ZMQ_EVENT_DISCONNECTED; ZeroMQ then
  // reconnects), and when last (steady clock ns, 0: never).
  int64_t ConnectionLosses(int shard, int64_t* last_ns) const;

 private:
  void Run();
  // Which sockets PumpLocked reads: those pump_fds_ shows readable after
  // it polls them (kPoll), or after its caller did (kPolled), and those
  // sent on since their last read; or only those sent on (kSentOn: after
  // the sends of Send(), whose calls into ZeroMQ may take the signal of an
  // arrival on the sockets they used, and only on those).
  enum class PumpScope { kPoll, kPolled, kSentOn };
  // Receives and installs every queued push in `scope`; returns how many
  // were installed. `app`: called by an application thread (counted apart).
  int PumpLocked(bool app, PumpScope scope = PumpScope::kPoll) GEEPS_REQUIRES(io_mu_);
  // PumpLocked with its ZeroMQ errors logged: -1 when the context is
  // terminating (ETERM: the channel stops), else the pushes installed.
  int PumpOrLog(bool app, PumpScope scope = PumpScope::kPoll) GEEPS_REQUIRES(io_mu_);
  void RunTask(const CommTask& task) GEEPS_REQUIRES(io_mu_);
  // The payload of a message: either `fill(out, first, n)` writes the
  // payload of rows [first, first + n) into a fresh buffer, or, with `base`
  // set, the rows lie back to back at `base` and are sent from there
  // without a copy (`refs` counts the messages ZeroMQ still holds). Neither:
  // no payload.
  struct Payload {
    std::function<void(char*, uint64_t, uint64_t)> fill;
    const char* base = nullptr;
    std::atomic<int>* refs = nullptr;
  };
  // Sends a message of `total` rows in parts of at most `max_bytes`;
  // `rows` (may be null) are the row ids.
  void SendInParts(int shard, const transport::WireHeader& h, const uint64_t* rows, uint64_t total,
                   const Payload& payload, uint64_t max_bytes) GEEPS_REQUIRES(io_mu_);
  void SendSubscribe(TableCache& t, const PartitionSlice& s) GEEPS_REQUIRES(io_mu_);
  // The update of `slot` to the slice's partition; its `aux` acknowledges
  // the last push installed from there (the slice's age).
  void SendUpdate(TableCache& t, const PartitionSlice& s, OplogSlot& slot) GEEPS_REQUIRES(io_mu_);
  // A header-only message (kResync, kAck) about `table` with `aux`.
  void SendControl(int shard, transport::MsgType type, uint32_t table, int64_t aux)
      GEEPS_REQUIRES(io_mu_);
  // After the connection to `shard` was lost (ZeroMQ reconnects, and sends
  // what it still queued): for every table with rows there, the
  // subscription again if no push came yet, a kResync naming the last push
  // installed (the partition pushes it again if newer), and every update
  // its pushes have not acknowledged, oldest first. Repeats are harmless:
  // the partition skips what it has.
  void ResendLocked(int shard) GEEPS_REQUIRES(io_mu_);
  // Returns whether a push was installed.
  bool HandlePush(int shard, std::vector<transport::Frame>& frames) GEEPS_REQUIRES(io_mu_);
  // Installs a whole push: `collected`, a copy of its rows (from its parts,
  // or to add own deltas to), else the rows in `frames`, which it may keep
  // there (AdoptPush) instead of copying them into the cache. False on a
  // device error.
  bool InstallWhole(TableCache& t, PartitionSlice& s, const transport::DecodedMessage& m,
                    float* collected, std::vector<transport::Frame>& frames)
      GEEPS_REQUIRES(io_mu_, t.mu);
  // The push in frames[1] kept there as the slice's rows; false (nothing
  // changed) where that cannot be, or where its bytes may not be this
  // worker's alone (a push over inproc).
  bool AdoptPush(TableCache& t, PartitionSlice& s, std::vector<transport::Frame>& frames)
      GEEPS_REQUIRES(io_mu_, t.mu);
  // Copies `count` rows of slice `s` from its `first` row on into the cache
  // (adding the oplog with read-my-writes); false on a device error.
  bool InstallRows(TableCache& t, const PartitionSlice& s, uint32_t first, uint32_t count,
                   const char* rows_bytes, bool rmw) GEEPS_REQUIRES(io_mu_, t.mu);
  // The slice now holds the push of `clock`.
  void FinishInstall(TableCache& t, PartitionSlice& s, int64_t clock, int64_t included, bool rmw)
      GEEPS_REQUIRES(t.mu);
  void SendFrames(int shard, transport::Frame* frames, size_t count) GEEPS_REQUIRES(io_mu_);
  bool Drop(const std::string& what) GEEPS_REQUIRES(io_mu_);  // returns false
  // A push older than (or as old as) the slice's: a repeat after a lost
  // connection (counted in pushes_repeated), else dropped (Drop). Returns
  // false.
  bool Stale(int shard, const transport::DecodedMessage& m, const PartitionSlice& s)
      GEEPS_REQUIRES(io_mu_);
  // Reads the events (connection losses) of the socket monitors whose
  // descriptor PumpLocked found readable.
  void DrainMonitorsLocked() GEEPS_REQUIRES(io_mu_);

  ClientContext ctx_;
  transport::Context* context_;
  const int channel_;
  const std::vector<std::string> endpoints_;
  WaitState* const wait_;

  // Guards the shard sockets, receipts_, stream_ and drops_: held by
  // whichever thread sends or receives.
  common::Mutex io_mu_;
  std::vector<transport::Socket> shards_ GEEPS_GUARDED_BY(io_mu_);  // DEALER per shard
  // Per shard: a PAIR socket receiving the DEALER's monitor events (null
  // over inproc, which has no connections to lose), and the losses seen.
  std::vector<transport::Socket> monitors_ GEEPS_GUARDED_BY(io_mu_);
  // Config::resend_after_connection_loss (a shard with a monitor resends).
  bool resend_ = false;
  std::vector<int> monitor_fds_;
  struct Losses {
    std::atomic<int64_t> count{0};
    std::atomic<int64_t> last_ns{0};
  };
  std::unique_ptr<Losses[]> losses_;  // set in Start, then fixed
  size_t num_losses_ = 0;
  std::vector<int> socket_fds_;    // ZMQ_FD per shard socket
  std::vector<int> poll_fd_list_;  // socket_fds_, then each monitor's (-1: none)
  // ZMQ_FD of each shard socket, then of each shard's monitor (-1: none):
  // PumpLocked polls them without waiting and reads only the sockets that
  // signalled or that this channel used since it last read their state.
  std::vector<pollfd> pump_fds_ GEEPS_GUARDED_BY(io_mu_);
  // Per shard: the socket was used (a send) since a receive last found
  // nothing on it; until one does, its ZMQ_FD may have missed an arrival
  // (it is edge-triggered, and a send may consume its signal).
  std::vector<uint8_t> unchecked_ GEEPS_GUARDED_BY(io_mu_);
  // Some unchecked_ is set while no thread holds io_mu_ (PumpPolled
  // stopped early). The channel thread reads it before it polls every
  // descriptor, after setting polling_all_; PumpPolled sets it, then reads
  // polling_all_ and wakes the thread if set (one of the two sees the
  // other).
  std::atomic<bool> unchecked_left_{false};
  std::atomic<bool> polling_all_{false};
  // Per shard: its monitor has been read once (from then on its ZMQ_FD
  // signals what comes; before, ZeroMQ may not have armed it).
  std::vector<uint8_t> monitor_read_ GEEPS_GUARDED_BY(io_mu_);
  std::unique_ptr<device::Stream> stream_ GEEPS_GUARDED_BY(io_mu_);
  // A push being received in parts, per shard socket and table.
  std::vector<std::vector<PushReceipt>> receipts_ GEEPS_GUARDED_BY(io_mu_);
  // Every dropped frame (ClientCounters::frames_dropped), the first logged.
  transport::DropLog drops_ GEEPS_GUARDED_BY(io_mu_);

  int wake_fd_ = -1;  // eventfd: Stop() wakes the thread
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> started_{false};
  common::Mutex stop_mu_;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_COMM_CHANNEL_H_
