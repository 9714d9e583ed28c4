// One channel of one server shard: a thread with a ZeroMQ ROUTER socket that
// owns partition p's rows of every shared table (see common/partition.h).
//
// State per table: the rows (host memory, zero-initialised), the vector clock
// (clocks completed per worker), the minimum clock, the subscribed rows of
// each worker. Updates are applied by addition at clock boundaries: when a
// table's minimum clock advances to m, the deltas of the clocks it passed are
// added and every subscriber is pushed its subscribed rows, which then hold
// exactly every worker's updates of clocks < m.
//
// Over TCP/IPC with Config::resend_after_connection_loss, the partition also
// holds the rows of each table's last push until every subscriber has
// acknowledged it (an Update's or Ack's `aux`), and pushes them again to a
// worker that reconnects without it (kResync): a lost push can be sent again
// exactly although the rows have moved on (docs/architecture.md,
// "Connection loss and resend").
//
// Every received frame is validated before use; a malformed or unexpected
// one is counted, logged once per kind, and dropped.
#ifndef GEEPS_SERVER_SHARD_CHANNEL_H_
#define GEEPS_SERVER_SHARD_CHANNEL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/partition.h"
#include "geeps/config.h"
#include "geeps/stats.h"
#include "geeps/status.h"
#include "server/checkpoint.h"
#include "transport/wire.h"

namespace geeps::transport {
class SecurityConfig;
}  // namespace geeps::transport

namespace geeps::server {

class ShardChannel {
 public:
  // `context` must outlive this object. `bound`, if given, is a ROUTER
  // already bound by BindSocket() (a process binds before it knows its
  // partition); else Start() binds `endpoint`.
  ShardChannel(zmq::context_t* context, const Config& config, int partition, std::string endpoint,
               std::unique_ptr<zmq::socket_t> bound = nullptr);

  // Binds a ROUTER with the options shard channels use. `endpoint` may ask
  // for any port ("tcp://host:*"); the bound address is stored in `*actual`.
  // A port in use is kUnavailable naming it. `security` (null: none) makes
  // it a CURVE server (transport/security.h); never for inproc://.
  // `max_frame_bytes` (transport::LargestFrameBytes of the job's config)
  // becomes ZMQ_MAXMSGSIZE: a larger frame disconnects its sender.
  static StatusOr<std::unique_ptr<zmq::socket_t>> BindSocket(
      zmq::context_t* context, const std::string& endpoint, std::string* actual,
      int64_t max_frame_bytes, const transport::SecurityConfig* security = nullptr);
  ~ShardChannel();  // Stop()
  ShardChannel(const ShardChannel&) = delete;
  ShardChannel& operator=(const ShardChannel&) = delete;

  // Before Start(): loads this partition's checkpoint of `clock` from
  // Config::checkpoint_dir and starts from it (rows as saved, every worker
  // at `clock`). The whole file is verified before any state changes; a
  // missing, truncated, corrupt or foreign file is an error naming it
  // (kNotFound, kDataLoss, kFailedPrecondition) and changes nothing.
  Status Restore(int64_t clock);

  // Before Restore()/Start(), in a job with CURVE keys: checkpoints are
  // written with a MAC by `key`, and only files with a valid one are read
  // (server/checkpoint.h).
  void SetCheckpointKey(const CheckpointKey& key) { mac_key_ = key; }

  // Checkpoint files written so far, and the clock of the newest (0: none).
  int64_t checkpoints_written() const { return checkpoints_written_.load(); }
  int64_t last_checkpoint_clock() const { return last_checkpoint_clock_.load(); }

  // Binds the socket (on the calling thread) and starts the thread. An
  // endpoint that cannot be bound is kUnavailable naming it.
  Status Start();
  // Stops and joins the thread. Idempotent. Messages not yet received are
  // dropped.
  void Stop();

  ShardStats GetStats() const;  // thread-safe; `shard` is left 0

  // This partition's rows of shared table `table`, row-major. Only for tests,
  // after Stop().
  std::vector<float> RowsForTesting(TableId table) const;

 private:
  // The message a worker is sending in parts (type 0: none).
  struct PartState {
    uint16_t type = 0;
    int64_t clock = 0;
    uint64_t next = 0;      // expected offset of the next part
    uint64_t last_row = 0;  // last row of the previous part
    // Updates: the message was restarted at offset 0 (resent after a
    // connection reset); its rows below this offset were applied before.
    uint64_t applied_before = 0;
  };
  // A partition's rows of a table, shared with the zero-copy pushes still
  // being sent from them: ZeroMQ holds a reference per push part until it
  // has sent it (or the receiver, over inproc, has closed it). The shard
  // itself may hold them too, as the rows of the last push
  // (TableState::held). The shard thread writes the rows only through
  // TableState::MutableRows, which first copies them (copy-on-write) while
  // anything holds them. Invariant: no held rows change, so a push's bytes
  // (and a held push) stay as they were sent.
  struct SharedRows {
    std::vector<float> values;
    // Holds on `values` not yet released: zero-copy push parts, plus one
    // while these are TableState::held. Incremented by the shard thread;
    // decremented (release) by ZeroMQ's free function, on its I/O thread or
    // the receiver's, or by the shard thread when it lets go of the held
    // push; read (acquire) before writing.
    std::atomic<int64_t> in_flight{0};
    // Rows [0, held_end) of the span are what the holds may cover (shard
    // thread only; 0 once in_flight is seen at 0; the whole span while the
    // shard holds them as the last push, and until in_flight next drops to
    // 0). A write at or past it needs no copy: the pipelined parts of a
    // push hold the rows every worker has updated, while the clock's later
    // parts write above.
    uint64_t held_end = 0;
  };
  struct TableState {
    common::RowSpan span;
    uint32_t width = 0;
    std::shared_ptr<SharedRows> rows = std::make_shared<SharedRows>();  // span.size() * width
    const std::vector<float>& data() const { return rows->values; }
    // The rows to write, from row offset `first` (in the span) up: copied
    // into a fresh buffer first while a push still holds rows below that
    // (*copied = the bytes copied, else 0).
    std::vector<float>& MutableRows(uint64_t first, size_t* copied);
    std::vector<int64_t> clocks;  // per worker: clocks completed
    int64_t min_clock = 0;
    // The clock the partition started at (0, or a checkpoint's). Once the
    // minimum passes it, every worker has subscribed (each subscribes before
    // its first update), so no push is sent from the current rows between
    // minimum advances (a re-push is sent from `held`, which no write
    // changes) and deltas of clock == min_clock may go straight into `data`
    // (not in deterministic mode).
    int64_t start_clock = 0;
    // Deltas of clocks >= min_clock, by clock * num_workers (+ worker in
    // deterministic mode), each span.size() * width. They
    // enter `data` when the minimum clock passes them, so `data` (and every
    // push) holds exactly the updates of clocks < min_clock.
    std::map<int64_t, std::vector<float>> pending;
    std::vector<std::vector<float>> spare;             // zeroed buffers for reuse
    std::vector<std::vector<uint64_t>> subscriptions;  // per worker, sorted rows
    std::vector<PartState> parts;                      // per worker: a message arriving in parts
    std::vector<bool> subscribed;
    // The last push held for a re-push (ShardChannel::holds_pushes_ only):
    // the rows it was sent from and its clock (== min_clock while held), one
    // of `rows->in_flight`'s holds, so that the next write goes into a copy
    // and `held->values` stay exactly the push of `held_clock`. Replaced by
    // the next push; released (null) once every subscribed worker has
    // acknowledged `held_clock`.
    std::shared_ptr<SharedRows> held;
    int64_t held_clock = 0;
    // Per worker: the highest push clock it has acknowledged (the `aux` of
    // its Update, Ack and Resync messages; never above min_clock).
    std::vector<int64_t> acked;
    // Per worker: it resynced after early parts of the push of clock
    // min_clock + 1 went to its group (they may be lost), so it gets that
    // push whole, alone, and no further early parts of it.
    std::vector<bool> whole_next;
    // Subscribed workers grouped by equal subscriptions, in subscription
    // order; a group's members share each push's payload.
    std::vector<std::vector<int>> push_groups;
    // Per push group: subscribed rows already sent, as early parts, of the
    // push of clock min_clock + 1 (pipelined updates).
    std::vector<uint64_t> pushed_early;
    // When min_clock last advanced (or the shard started), and the clock a
    // stall was last reported at (ReportStalls).
    std::chrono::steady_clock::time_point last_advance = std::chrono::steady_clock::now();
    int64_t stall_reported = -1;
  };
  enum DropReason : uint32_t {
    kDropFraming = 0,
    kDropSender,
    kDropTable,
    kDropRows,
    kDropClock,
    kDropType,
    kDropDuplicateSubscribe,
    kDropLateSubscribe,
    kNumDropReasons
  };

  void Run();
  void HandleMessage(std::vector<zmq::message_t>& frames);
  // Checks that `m` continues the message `worker` is sending in parts (or
  // starts one) and records it; drops it and returns false otherwise.
  bool AcceptPart(TableState& t, int worker, const transport::DecodedMessage& m);
  void HandleSubscribe(int worker, const transport::DecodedMessage& m);
  void HandleUpdate(int worker, const transport::DecodedMessage& m);
  // kAck and kResync (no rows): the acknowledgement in `aux`; a Resync also
  // pushes the held push again to a worker that lacks it.
  void HandleAckOrResync(int worker, const transport::DecodedMessage& m);
  // Drains the socket monitor: counts ended connections, notes them for
  // NoteConnection, and reports handovers whose grace period is over.
  void DrainMonitor();
  // A message of `worker` came on connection `fd` (-1: inproc): when that is
  // not the connection its messages came on before and the earlier one has
  // not ended, a connection took its routing id over (ZMQ_ROUTER_HANDOVER):
  // counted, and logged the first time (ReportHandover), unless the monitor
  // reports the earlier one's end within a grace period (a reconnect).
  void NoteConnection(int worker, int fd);
  void ReportHandover(int worker);
  // The connection on descriptor `fd` ended (the monitor said so, or its
  // number came back on a new connection).
  void ConnectionEnded(int fd);
  // Records that `worker` has installed the push of `clock` (maybe releasing
  // the held push). A clock above min_clock (no such push was sent) drops
  // the frame: returns false.
  bool Acknowledge(TableState& t, int worker, int64_t clock, transport::MsgType type);
  // Holds t.rows as the push of `clock` just sent (replacing the last hold);
  // releases the hold once every subscribed worker has acknowledged it.
  void HoldPush(TableState& t, int64_t clock);
  void MaybeReleaseHold(TableState& t);
  void ReleaseHold(TableState& t);
  // The members of push group `g` that get its pushes in parts as usual
  // (every member but those marked TableState::whole_next).
  std::vector<int> GroupMembers(const TableState& t, size_t g, bool whole_next) const;
  // Pushes subscribed rows [from, to) (indexes into the subscription) of
  // the table to `workers`, which share one subscription, as parts of the
  // push of `clock`, from `source` (t.rows, or the held rows of a re-push);
  // the last part ends the push when `final_part`. Each part's payload is
  // sent from the rows (consecutive rows) or copied from them once for all
  // of the workers. A send that fails (router_mandatory: the worker's
  // connection is gone) is logged once per error and skips that worker.
  void PushRows(const std::vector<int>& workers, TableId table, TableState& t, uint64_t from,
                uint64_t to, bool final_part, int64_t clock,
                const std::shared_ptr<SharedRows>& source);
  // Pipelined updates: sends every push group the subscribed rows that
  // every worker has updated for clock min_clock (below the frontier) and
  // that are not yet sent, as early parts of the next push. Only in direct
  // mode with no pending deltas of that clock.
  void MaybePushEarly(TableId table, TableState& t);
  // Checkpoints: called when table `table`'s minimum clock becomes `clock`.
  // Copies the table's rows into the checkpoint of that clock; the last
  // table to arrive hands the whole to the writer thread.
  void MaybeSnapshot(TableId table, const TableState& t, int64_t clock);
  void RunWriter();
  void Drop(DropReason reason, const std::string& what);
  // Logs, once per table and clock, a minimum clock that has waited more
  // than half of Config::timeout for some workers while others have sent
  // theirs: the shard names the workers it waits for (a Read that times out
  // on a worker cannot know which one is missing).
  void ReportStalls(std::chrono::steady_clock::time_point now);

  zmq::context_t* context_;
  const Config config_;
  const int partition_;
  const std::string endpoint_;
  // Whether the last push of each table is held for a re-push:
  // resend_after_connection_loss and not inproc (whose connections cannot
  // be lost).
  const bool holds_pushes_;
  std::vector<std::unique_ptr<TableState>> tables_;  // by TableId; null if local

  std::unique_ptr<zmq::socket_t> socket_;  // owned by the thread once started
  // TCP/IPC: a PAIR socket receiving socket_'s ZMQ_EVENT_DISCONNECTED (null
  // over inproc); read by the thread.
  std::unique_ptr<zmq::socket_t> monitor_;
  std::atomic<int64_t> connections_closed_{0};
  int wake_fd_ = -1;  // eventfd: wakes the thread on Stop()
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool started_ = false;

  // Checkpoints (Config::checkpoint_dir non-empty). Thread-owned: the
  // clocks workers asked for, the checkpoints being assembled.
  const uint64_t fingerprint_;
  std::optional<CheckpointKey> mac_key_;  // set before the threads start
  const CheckpointKey* mac_key() const { return mac_key_ ? &*mac_key_ : nullptr; }
  int checkpoint_tables_ = 0;  // shared tables with rows in this partition
  std::set<int64_t> requested_;
  std::map<int64_t, CheckpointData> assembling_;
  // Handed to the writer thread (guarded by writer_mu_).
  std::thread writer_;
  std::mutex writer_mu_;
  std::condition_variable writer_cv_;
  std::deque<CheckpointData> to_write_;
  bool writer_stop_ = false;
  std::atomic<int64_t> checkpoints_written_{0}, last_checkpoint_clock_{0};

  // ShardStats' data-path stages (relaxed: statistics only).
  std::atomic<int64_t> apply_bytes_{0}, fold_bytes_{0}, push_copy_bytes_{0},
      push_zero_copy_bytes_{0};
  // The rows to write (TableState::MutableRows), counting a copy-on-write
  // as push-copy bytes: it is what a push from the rows costs then.
  std::vector<float>& Writable(TableState& t, uint64_t first = 0);
  // ZeroMQ's free function of a zero-copy push part: drops its hold on the
  // rows (after every read of them by ZeroMQ or, over inproc, the receiver).
  static void ReleaseRows(void* data, void* hint);
  std::atomic<int64_t> early_push_parts_{0};
  std::atomic<int64_t> repeated_rows_skipped_{0};
  std::atomic<int64_t> resyncs_received_{0}, repushes_{0};
  std::atomic<int64_t> updates_applied_{0}, rows_applied_{0}, pushes_sent_{0}, bytes_received_{0},
      bytes_sent_{0}, frames_dropped_{0};
  uint32_t logged_drop_reasons_ = 0;   // thread-owned
  std::set<int> logged_send_errors_;   // thread-owned: errno of failed pushes logged
  bool logged_unheld_resync_ = false;  // thread-owned
  // Routing-id handovers (TCP/IPC; thread-owned): per worker, the
  // descriptor of the connection its last message came on (-1: none yet),
  // and whether the monitor has seen that connection end.
  std::vector<int> worker_fd_;
  std::vector<bool> worker_fd_ended_;
  struct PendingHandover {
    int worker;
    int fd;  // the earlier connection, not yet reported ended
    std::chrono::steady_clock::time_point since;
  };
  std::vector<PendingHandover> pending_handovers_;
  bool logged_handover_ = false;
  std::atomic<int64_t> routing_id_handovers_{0};
};

}  // namespace geeps::server

#endif  // GEEPS_SERVER_SHARD_CHANNEL_H_
