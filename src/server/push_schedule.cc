#include "server/push_schedule.h"

#include <algorithm>
#include <utility>

namespace geeps::server {

PushSchedule::PushSchedule(size_t num_tables, Clock::duration max_hold)
    : rank_(num_tables, 0), pushed_(num_tables, -1), max_hold_(max_hold) {}

void PushSchedule::SetRank(uint32_t table, uint32_t rank) {
  if (table < rank_.size() && rank_[table] == 0) rank_[table] = rank;
}

bool PushSchedule::Ask(int worker, bool asks) {
  if (worker < 0) return false;
  if (static_cast<size_t>(worker) >= asks_.size()) asks_.resize(static_cast<size_t>(worker) + 1);
  if (asks_[worker] == asks) return false;
  asks_[worker] = asks;
  askers_ += asks ? 1 : -1;
  return !asks && askers_ == 0;
}

bool PushSchedule::MustWait(uint32_t table, int64_t clock) const {
  return HasDeferred(table) || WaitsForOthers(table, clock);
}

bool PushSchedule::HasDeferred(uint32_t table) const {
  return std::any_of(deferred_.begin(), deferred_.end(),
                     [table](const Deferred& d) { return d.table == table; });
}

bool PushSchedule::WaitsForOthers(uint32_t table, int64_t clock) const {
  if (askers_ == 0 || table >= rank_.size() || rank_[table] == 0) return false;
  for (size_t u = 0; u < rank_.size(); ++u) {
    if (u == table || rank_[u] == 0 || rank_[u] >= rank_[table]) continue;
    if (pushed_[u] == clock - 1) return true;
  }
  return false;
}

void PushSchedule::Defer(uint32_t table, PushOrder order, Clock::time_point now) {
  deferred_.push_back({table, std::move(order), now});
}

void PushSchedule::Sent(uint32_t table, int64_t clock) {
  if (table < pushed_.size()) pushed_[table] = std::max(pushed_[table], clock);
}

std::optional<PushSchedule::Deferred> PushSchedule::TakeReady() {
  auto best = deferred_.end();
  std::vector<bool> behind(rank_.size(), false);  // an older push of the table waits
  for (auto it = deferred_.begin(); it != deferred_.end(); ++it) {
    if (it->table < behind.size() && behind[it->table]) continue;
    if (WaitsForOthers(it->table, it->order.clock)) {
      if (it->table < behind.size()) behind[it->table] = true;
      continue;
    }
    // Lowest rank first; of one table, the oldest (parts stay in order).
    if (best == deferred_.end() || rank_[it->table] < rank_[best->table]) best = it;
    if (it->table < behind.size()) behind[it->table] = true;
  }
  if (best == deferred_.end()) return std::nullopt;
  Deferred d = std::move(*best);
  deferred_.erase(best);
  return d;
}

std::optional<PushSchedule::Deferred> PushSchedule::TakeOverdue(Clock::time_point now) {
  if (deferred_.empty() || now - deferred_.front().since < max_hold_) return std::nullopt;
  Deferred d = std::move(deferred_.front());
  deferred_.pop_front();
  return d;
}

}  // namespace geeps::server
