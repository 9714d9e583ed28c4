// One channel of one server shard: a thread with a ZeroMQ ROUTER socket that
// owns partition p's rows of every shared table (see common/partition.h).
//
// The loop around the partition's state: each received frame is validated,
// handed to its table (server/partition_table.h: applying updates, folding
// clocks, subscriptions and push groups, acknowledgements and held pushes,
// early pipelined pushes), and what the table asks for is done here: the
// pushes sent (zero-copy from the rows where they are consecutive), the
// checkpoints of the clocks the minimum reaches handed to the partition's
// CheckpointWriter (server/checkpoint_writer.h).
//
// Over TCP/IPC with Config::resend_after_connection_loss, the tables hold
// the rows of their last push until every subscriber has acknowledged it
// (an Update's or Ack's `aux`), and push them again to a worker that
// reconnects without it (kResync): a lost push can be sent again exactly
// although the rows have moved on (docs/architecture.md, "Connection loss
// and resend").
//
// Every received frame is validated before use; a malformed or unexpected
// one is counted, logged once per kind, and dropped.
#ifndef GEEPS_SERVER_SHARD_CHANNEL_H_
#define GEEPS_SERVER_SHARD_CHANNEL_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "geeps/config.h"
#include "geeps/stats.h"
#include "geeps/status.h"
#include "server/checkpoint.h"
#include "server/checkpoint_writer.h"
#include "server/partition_table.h"
#include "server/push_schedule.h"
#include "transport/context.h"
#include "transport/drop_log.h"
#include "transport/part_split.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace geeps::transport {
class SecurityConfig;
}  // namespace geeps::transport

namespace geeps::server {

class ShardChannel {
 public:
  // `context` must outlive this object. `bound`, if given, is a ROUTER
  // already bound by transport::BindShardRouter() (a process binds before
  // it knows its partition); else Start() binds `endpoint` with it.
  // `participants` (by worker rank; empty: from the config) are the workers
  // that send their own updates: with Config::aggregate_per_machine, each
  // machine's leader (PartitionTable::Options::participants).
  ShardChannel(transport::Context* context, const Config& config, int partition,
               std::string endpoint, transport::Socket bound = {},
               std::vector<bool> participants = {});

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
  void SetCheckpointKey(const CheckpointKey& key) { checkpoints_.SetKey(key); }

  // Before Start(), in a process with a security handler (transport/
  // security.h, which outlives this channel): failed handshakes on this
  // channel's socket are counted there (this channel's connection monitor
  // replaces the handler's own).
  void SetSecurity(const transport::SecurityConfig* security) { security_ = security; }

  // Checkpoint files written so far, and the clock of the newest (0: none).
  int64_t checkpoints_written() const { return checkpoints_.written(); }
  int64_t last_checkpoint_clock() const { return checkpoints_.last_clock(); }

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
  void Run();
  void HandleMessage(std::vector<transport::Frame>& frames);
  // Does what an operation on table `table` asked for: counts and logs its
  // drop, hands its checkpoint request and the rows of a new minimum clock
  // to the writer, sends its pushes.
  void Carry(TableId table, const TableOutcome& out);
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
  // Sends push `order` of table `table`, in parts of at most
  // Config::max_message_bytes. Each part's payload is sent from the rows
  // (consecutive rows) or copied from them once for all of the workers. A
  // send that fails (router_mandatory: the worker's connection is gone) is
  // logged once per error and skips that worker.
  void PushRows(TableId table, PartitionTable& t, const PushOrder& order);
  // One part of a push, made once for all of its receivers: packed into
  // `header` alone (under Config::pack_below_bytes), or a header and a
  // payload copied from the rows, or (in_place) a header and the rows
  // themselves, to lend to each receiver. Counts the bytes copied or not.
  struct PushPart {
    transport::Frame header, payload;
    float* in_place = nullptr;
    bool packed = false;
  };
  PushPart MakePushPart(PartitionTable& t, const PushOrder& order, const transport::Part& part,
                        size_t row_bytes);
  // Sends `order` now, or defers it (PushSchedule: another table's push of
  // the clock is needed first), holding its rows meanwhile so that a write
  // copies them aside; then sends what the schedule released.
  void Schedule(TableId table, const PushOrder& order);
  // Sends a push and tells the schedule; `deferred`: it was held by
  // Schedule, whose hold on the rows it then drops.
  void SendPush(TableId table, const PushOrder& order, bool deferred);
  // Sends the deferred pushes that may go, and (at `now`, when given) those
  // held past kMaxPushHold, logging the first of those.
  void SendReleased(const std::chrono::steady_clock::time_point* now);
  void Drop(DropReason reason, const std::string& what);
  // Logs, once per table and clock, a minimum clock that has waited more
  // than half of Config::timeout for some workers while others have sent
  // theirs: the shard names the workers it waits for (a Read that times out
  // on a worker cannot know which one is missing).
  void ReportStalls(std::chrono::steady_clock::time_point now);
  // ZeroMQ's free function of a zero-copy push part: drops its hold on the
  // rows (after every read of them by ZeroMQ or, over inproc, the receiver).
  static void ReleaseRows(void* data, void* hint);

  transport::Context* context_;
  const Config config_;
  const int partition_;
  const std::string endpoint_;
  // Whether the last push of each table is held for a re-push:
  // resend_after_connection_loss and not inproc (whose connections cannot
  // be lost).
  const bool holds_pushes_;
  // ShardStats' counters of the tables' data path (and of the pushes sent).
  PartitionCounters counters_;
  std::vector<std::unique_ptr<PartitionTable>> tables_;  // by TableId; null if local

  const transport::SecurityConfig* security_ = nullptr;  // null: none (inproc)
  transport::Socket socket_;                             // owned by the thread once started
  // TCP/IPC: a PAIR socket receiving socket_'s ZMQ_EVENT_DISCONNECTED (null
  // over inproc); read by the thread.
  transport::Socket monitor_;
  std::atomic<int64_t> connections_closed_{0};
  int wake_fd_ = -1;  // eventfd: wakes the thread on Stop()
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool started_ = false;

  // Checkpoints (Config::checkpoint_dir non-empty; else it does nothing).
  CheckpointWriter checkpoints_;

  std::atomic<int64_t> pushes_sent_{0}, bytes_received_{0}, bytes_sent_{0}, frames_dropped_{0},
      pushes_deferred_{0};
  // Every dropped frame, the first of each DropReason logged (thread-owned).
  transport::DropLog drops_{"shard partition " + std::to_string(partition_), &frames_dropped_};
  std::set<int> logged_send_errors_;   // thread-owned: errno of failed pushes logged
  bool logged_unheld_resync_ = false;  // thread-owned
  bool logged_overdue_push_ = false;   // thread-owned
  // A deferred push goes after this long whatever the schedule says (a
  // safety net: PushSchedule's rule releases every push in a correct job).
  static constexpr std::chrono::milliseconds kMaxPushHold{1000};
  // The order of a clock's pushes across tables (thread-owned; sized in Start).
  PushSchedule schedule_{0, kMaxPushHold};
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
