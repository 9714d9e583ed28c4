// A server partition's state of one shared table and the operations on it,
// without sockets: the shard channel (server/shard_channel.h) decodes and
// validates a frame, hands it to the table, and sends what the table asks it
// to (docs/architecture.md, "Server state (per partition)").
//
// State: the rows (zero-initialised), the vector clock (clocks completed per
// worker), the minimum clock, the subscribed rows of each worker and the
// push groups of equal subscriptions. Updates are applied by addition at
// clock boundaries: when the minimum clock advances to m, the deltas of the
// clocks it passed are folded in and every subscriber is to be pushed its
// subscribed rows, which then hold exactly every worker's updates of clocks
// < m. With Options::holds_pushes the rows of the last push stay held until
// every subscriber has acknowledged it, for a re-push on kResync
// ("Connection loss and resend"); with Options::pipeline_part_bytes, rows
// every worker has updated leave early as parts of the next push
// ("Pipelined pushes").
//
// Thread: one (the shard channel's). Only SharedRows::in_flight is touched
// by other threads (the release of a zero-copy push part).
#ifndef GEEPS_SERVER_PARTITION_TABLE_H_
#define GEEPS_SERVER_PARTITION_TABLE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/partition.h"
#include "transport/part_sequence.h"
#include "transport/wire.h"

namespace geeps::server {

// Why a frame was dropped (one bit each in the shard's log-once mask).
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

// The data-path counters of a partition's tables (ShardStats; relaxed:
// statistics only), shared by its tables and its shard channel.
struct PartitionCounters {
  std::atomic<int64_t> updates_applied{0}, rows_applied{0}, apply_bytes{0}, fold_bytes{0},
      push_copy_bytes{0}, push_zero_copy_bytes{0}, early_push_parts{0}, repeated_rows_skipped{0},
      resyncs_received{0}, repushes{0};
};

// A partition's rows of a table, shared with the zero-copy pushes still
// being sent from them: ZeroMQ holds a reference per push part until it has
// sent it (or the receiver, over inproc, has closed it). The table itself
// may hold them too, as the rows of the last push (PartitionTable's held
// push). The table writes the rows only through PartitionTable::Writable,
// which first copies them (copy-on-write) while anything holds them.
// Invariant: no held rows change, so a push's bytes (and a held push) stay
// as they were sent.
struct SharedRows {
  std::vector<float> values;
  // Holds on `values` not yet released: zero-copy push parts, plus one
  // while these are the table's held push. Incremented by the shard thread;
  // decremented (release) by ZeroMQ's free function, on its I/O thread or
  // the receiver's, or by the shard thread when it lets go of the held
  // push; read (acquire) before writing.
  std::atomic<int64_t> in_flight{0};
  // Rows [0, held_end) of the span are what the holds may cover (shard
  // thread only; 0 once in_flight is seen at 0; the whole span while the
  // table holds them as the last push, and until in_flight next drops to
  // 0). A write at or past it needs no copy: the pipelined parts of a push
  // hold the rows every worker has updated, while the clock's later parts
  // write above.
  uint64_t held_end = 0;
};

// A push the shard channel is to send: subscribed rows [from, to) (indexes
// into the subscription) to `workers`, which share one subscription, as
// parts of the push of `clock`, from `source` (the rows, or the held rows
// of a re-push); the last part ends the push when `final_part`.
struct PushOrder {
  std::vector<int> workers;
  uint64_t from = 0;
  uint64_t to = 0;
  bool final_part = true;
  int64_t clock = 0;
  std::shared_ptr<SharedRows> source;
};

// What an operation on a table asks of the shard channel, in this order.
struct TableOutcome {
  // The frame was dropped (nothing else below is set).
  bool dropped = false;
  DropReason drop_reason = kDropFraming;
  std::string drop_what;
  // A worker asked for a checkpoint at this clock (kFlagCheckpoint; 0: no).
  int64_t checkpoint_request = 0;
  // The minimum clock advanced to this clock (0: it did not): the rows now
  // hold exactly the updates of the clocks below it (a checkpoint's moment).
  int64_t advanced_to = 0;
  // Pushes to send, in order.
  std::vector<PushOrder> pushes;
  // A kResync asked for a push that is not held (not pushed again).
  bool unheld_resync = false;
};

class PartitionTable {
 public:
  struct Options {
    int num_workers = 1;
    // Which workers send their own updates (Config::aggregate_per_machine:
    // each machine's leader, for its machine); empty: all. The others'
    // clocks never hold the minimum back, and their frames are dropped.
    std::vector<bool> participants;
    bool deterministic = false;        // Config::deterministic_bsp
    uint64_t pipeline_part_bytes = 0;  // Config::pipeline_part_bytes (0: off)
    // Hold the last push until every subscriber acknowledged it:
    // resend_after_connection_loss and not inproc (whose connections cannot
    // be lost).
    bool holds_pushes = false;
  };

  // The rows `span` of a table of rows of `width` floats. `counters` must
  // outlive the table.
  PartitionTable(common::RowSpan span, uint32_t width, const Options& options,
                 PartitionCounters* counters);
  PartitionTable(const PartitionTable&) = delete;
  PartitionTable& operator=(const PartitionTable&) = delete;

  const common::RowSpan& span() const { return span_; }
  uint32_t width() const { return width_; }
  int64_t min_clock() const { return min_clock_; }
  int64_t clock(int worker) const { return clocks_[worker]; }
  // The rows, row-major (span().size() * width()).
  const std::vector<float>& values() const { return rows_->values; }
  // The current rows' shared buffer (a later write may replace it).
  const std::shared_ptr<SharedRows>& shared_rows() const { return rows_; }
  const std::vector<uint64_t>& subscription(int worker) const { return subscriptions_[worker]; }
  // Subscribed workers grouped by equal subscriptions, in subscription
  // order; a group's members share each push's payload.
  const std::vector<std::vector<int>>& push_groups() const { return push_groups_; }
  // The held last push (null: none) and its clock.
  const std::shared_ptr<SharedRows>& held() const { return held_; }
  int64_t held_clock() const { return held_clock_; }

  // Starts from a checkpoint: these rows (span().size() * width()), every
  // worker at `clock`. Before any message.
  void Restore(std::vector<float> values, int64_t clock);

  // A kSubscribe part from `worker`, its rows validated against span().
  TableOutcome Subscribe(int worker, const transport::DecodedMessage& m);
  // A kUpdate part from `worker`, its rows validated against span() and its
  // width equal to width().
  TableOutcome Update(int worker, const transport::DecodedMessage& m);
  // A kAck or kResync (no rows): the acknowledgement in `aux`; a Resync also
  // asks for the held push again for a worker that lacks it.
  TableOutcome AckOrResync(int worker, const transport::DecodedMessage& m);

  // The payload of subscribed rows [first, first + n) of `order`: when
  // they are consecutive rows, a pointer into `order.source`'s values (the
  // reach of the holds, held_end, is extended over them: the caller takes a
  // hold per message it sends from them); else null, and CopyPart copies
  // them into `out` (n * width() floats).
  float* PartInPlace(const PushOrder& order, uint64_t first, uint64_t n);
  void CopyPart(const PushOrder& order, uint64_t first, uint64_t n, char* out) const;

  // Workers that have not completed clock min_clock() while another has,
  // once the minimum has waited `after` since it last advanced (or the
  // table was made), at most once per minimum clock; else empty. `*waited`
  // gets how long it has waited.
  std::vector<int> TakeStalledWorkers(std::chrono::steady_clock::time_point now,
                                      std::chrono::steady_clock::duration after,
                                      std::chrono::steady_clock::duration* waited);

 private:
  // The message a worker is sending in parts (type 0: none).
  struct PartState {
    // A part at offset 0 while a message is in progress is refused unless
    // the caller allows the restart (it then resets `seq` first).
    transport::PartSequence seq{transport::PartSequence::Restart::kRefused};
    // Updates: the message was restarted at offset 0 (resent after a
    // connection reset); its rows below this offset were applied before.
    uint64_t applied_before = 0;
  };

  static TableOutcome Dropped(DropReason reason, std::string what);
  bool Participates(int worker) const {
    return options_.participants.empty() || options_.participants[worker];
  }
  // Any frame of a worker that does not participate.
  static TableOutcome DroppedNonParticipant(int worker);
  // The clock of a worker whose machine's leader sends for it.
  static constexpr int64_t kNotParticipating = INT64_MAX;
  // Checks that `m` continues the message `worker` is sending in parts (or
  // starts one) and records it; false (drop it) otherwise.
  bool AcceptPart(int worker, const transport::DecodedMessage& m);
  // Records that `worker` has installed the push of `clock` (maybe
  // releasing the held push). False for a clock above min_clock_ (no such
  // push was sent): the frame is to be dropped.
  bool Acknowledge(int worker, int64_t clock);
  // Holds rows_ as the push of `clock` just ordered (replacing the last
  // hold); releases the hold once every subscribed worker has acknowledged.
  void HoldPush(int64_t clock);
  void MaybeReleaseHold();
  void ReleaseHold();
  // The members of push group `g` that get its pushes in parts as usual
  // (every member but those marked whole_next_), or only those marked.
  std::vector<int> GroupMembers(size_t g, bool whole_next) const;
  // The rows to write, from row offset `first` (in the span) up: copied into
  // a fresh buffer first while a push still holds rows below that (counted
  // as push-copy bytes: it is what a push from the rows costs then).
  std::vector<float>& Writable(uint64_t first = 0);
  // Adds the rows of update part `m` past its first `skip` into the rows
  // (`direct`) or into the pending deltas of its clock.
  void Apply(int worker, const transport::DecodedMessage& m, uint64_t skip, bool direct);
  // The minimum clock advanced to `new_min`: folds in the deltas of the
  // clocks it passed, orders the pushes of every group and holds them.
  void Advance(int64_t new_min, TableOutcome* out);
  // Pipelined updates: orders, for every push group, the subscribed rows
  // that every worker has updated for clock min_clock_ (below the frontier)
  // and that are not yet sent, as early parts of the next push. Only in
  // direct mode with no pending deltas of that clock.
  void MaybePushEarly(TableOutcome* out);

  const common::RowSpan span_;
  const uint32_t width_;
  const Options options_;
  PartitionCounters* const counters_;
  std::shared_ptr<SharedRows> rows_ = std::make_shared<SharedRows>();  // span.size() * width
  std::vector<int64_t> clocks_;  // per worker: clocks completed
  int64_t min_clock_ = 0;
  // The clock the partition started at (0, or a checkpoint's). Once the
  // minimum passes it, every worker has subscribed (each subscribes before
  // its first update), so no push is sent from the current rows between
  // minimum advances (a re-push is sent from held_, which no write changes)
  // and deltas of clock == min_clock_ may go straight into the rows (not in
  // deterministic mode).
  int64_t start_clock_ = 0;
  // Deltas of clocks >= min_clock_, by clock * num_workers (+ worker in
  // deterministic mode), each span.size() * width. They enter the rows when
  // the minimum clock passes them, so the rows (and every push) hold exactly
  // the updates of clocks < min_clock_.
  std::map<int64_t, std::vector<float>> pending_;
  std::vector<std::vector<float>> spare_;             // zeroed buffers for reuse
  std::vector<std::vector<uint64_t>> subscriptions_;  // per worker, sorted rows
  std::vector<PartState> parts_;                      // per worker: a message arriving in parts
  std::vector<bool> subscribed_;
  // The last push held for a re-push (Options::holds_pushes only): the rows
  // it was sent from and its clock (== min_clock_ while held), one of
  // `rows_->in_flight`'s holds, so that the next write goes into a copy and
  // `held_->values` stay exactly the push of `held_clock_`. Replaced by the
  // next push; released (null) once every subscribed worker has
  // acknowledged `held_clock_`.
  std::shared_ptr<SharedRows> held_;
  int64_t held_clock_ = 0;
  // Per worker: the highest push clock it has acknowledged (the `aux` of
  // its Update, Ack and Resync messages; never above min_clock_).
  std::vector<int64_t> acked_;
  // Per worker: it resynced after early parts of the push of clock
  // min_clock_ + 1 went to its group (they may be lost), so it gets that
  // push whole, alone, and no further early parts of it.
  std::vector<bool> whole_next_;
  std::vector<std::vector<int>> push_groups_;
  // Per push group: subscribed rows already ordered, as early parts, of the
  // push of clock min_clock_ + 1 (pipelined updates).
  std::vector<uint64_t> pushed_early_;
  // When min_clock_ last advanced (or the table was made), and the clock a
  // stall was last reported at (TakeStalledWorkers).
  std::chrono::steady_clock::time_point last_advance_ = std::chrono::steady_clock::now();
  int64_t stall_reported_ = -1;
};

}  // namespace geeps::server

#endif  // GEEPS_SERVER_PARTITION_TABLE_H_
