// In which order a partition sends its tables' pushes of one clock: the
// order the workers first read the tables in an iteration (their "read
// rank", sent with each subscription), so that the push every worker needs
// first does not queue behind pushes needed later (docs/architecture.md,
// "Pushes in the order of need"). No sockets: the shard channel asks it
// whether a push may go now, defers the ones that may not, and tells it
// what went out; it hands back the deferred pushes that may go then.
//
// Rule, while some worker asks for it (Ask): a push of table t at clock m
// waits while another table u of this
// partition with a lower read rank has pushed clock m - 1 and not m yet
// (u is one clock behind and will push m next). A table that was never
// read (rank 0), never pushed, or lags by more than one clock holds nothing
// back. Why this cannot deadlock: u's push of m needs every worker's
// update of u at clock m - 1, which a worker sends after its reads of
// iteration m - 1, which need pushes of clocks below m only, never t's
// push of m. A deferred push older than Options::max_hold goes anyway (a
// safety net that a correct job never reaches; the shard logs it).
//
// Thread: one (the shard channel's).
#ifndef GEEPS_SERVER_PUSH_SCHEDULE_H_
#define GEEPS_SERVER_PUSH_SCHEDULE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "server/partition_table.h"

namespace geeps::server {

class PushSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  struct Deferred {
    uint32_t table = 0;
    PushOrder order;
    Clock::time_point since;
  };

  PushSchedule(size_t num_tables, Clock::duration max_hold);

  // A subscription named the table's read rank (1 = read first; 0: not
  // read in the iteration, or an older sender). The first non-zero wins.
  void SetRank(uint32_t table, uint32_t rank);
  uint32_t rank(uint32_t table) const { return rank_[table]; }

  // Whether `worker`'s latest update asked for pushes in read order
  // (kFlagReadOrder). The rule applies while any worker asks; returns true
  // when this call ended that (the deferred pushes may all go: TakeReady).
  bool Ask(int worker, bool asks);
  bool ordered() const { return askers_ > 0; }

  // Whether a push of `table` at `clock` must wait: for another table's,
  // or behind an older push of its own that is deferred.
  bool MustWait(uint32_t table, int64_t clock) const;
  void Defer(uint32_t table, PushOrder order, Clock::time_point now);
  // A push of `table` at `clock` went out (its last part).
  void Sent(uint32_t table, int64_t clock);
  // The deferred push that may go now with the lowest rank, taken out of
  // the schedule; nothing when none may.
  std::optional<Deferred> TakeReady();
  // The oldest deferred push held since before `now - max_hold`, taken out.
  std::optional<Deferred> TakeOverdue(Clock::time_point now);
  size_t deferred() const { return deferred_.size(); }
  int64_t pushed(uint32_t table) const { return pushed_[table]; }

 private:
  // The rule alone, without the deferred pushes of the table itself.
  bool WaitsForOthers(uint32_t table, int64_t clock) const;
  bool HasDeferred(uint32_t table) const;

  std::vector<uint32_t> rank_;
  std::vector<bool> asks_;  // per worker
  int askers_ = 0;
  std::vector<int64_t> pushed_;  // the last clock pushed whole, -1: none
  std::deque<Deferred> deferred_;
  Clock::duration max_hold_;
};

}  // namespace geeps::server

#endif  // GEEPS_SERVER_PUSH_SCHEDULE_H_
