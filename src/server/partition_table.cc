#include "server/partition_table.h"

#include <algorithm>
#include <cstring>

#include "server/row_ops.h"

namespace geeps::server {

using transport::DecodedMessage;
using transport::MsgType;

PartitionTable::PartitionTable(common::RowSpan span, uint32_t width, const Options& options,
                               PartitionCounters* counters)
    : span_(span), width_(width), options_(options), counters_(counters) {
  const auto n = static_cast<size_t>(options_.num_workers);
  rows_->values.assign(span_.size() * width_, 0.0f);
  clocks_.assign(n, 0);
  for (size_t w = 0; w < n; ++w)
    if (!Participates(static_cast<int>(w))) clocks_[w] = kNotParticipating;
  subscriptions_.resize(n);
  subscribed_.assign(n, false);
  parts_.resize(n);
  acked_.assign(n, 0);
  whole_next_.assign(n, false);
}

void PartitionTable::Restore(std::vector<float> values, int64_t clock) {
  // Fresh rows: pushes of the old ones (if any) keep those alive.
  rows_ = std::make_shared<SharedRows>();
  rows_->values = std::move(values);
  for (size_t w = 0; w < clocks_.size(); ++w)
    if (Participates(static_cast<int>(w))) clocks_[w] = clock;
  min_clock_ = clock;
  start_clock_ = clock;
}

TableOutcome PartitionTable::Dropped(DropReason reason, std::string what) {
  TableOutcome out;
  out.dropped = true;
  out.drop_reason = reason;
  out.drop_what = std::move(what);
  return out;
}

TableOutcome PartitionTable::DroppedNonParticipant(int worker) {
  return Dropped(kDropSender, "a frame from worker " + std::to_string(worker) +
                                  ", whose machine's leader sends for it (aggregate_per_machine)");
}

bool PartitionTable::AcceptPart(int worker, const DecodedMessage& m) {
  PartState& p = parts_[worker];
  transport::PartSequence::Rows rows;
  if (m.rows != nullptr && m.header.row_count > 0)
    rows = {true, m.RowAt(0), m.RowAt(m.header.row_count - 1)};
  const auto verdict = p.seq.Accept(m.header, rows);
  if (verdict == transport::PartSequence::Verdict::kOutOfSequence) return false;
  if (!p.seq.active()) p = PartState{};  // the message is complete
  return true;
}

TableOutcome PartitionTable::Subscribe(int worker, const DecodedMessage& m) {
  if (!Participates(worker)) return DroppedNonParticipant(worker);
  // A subscription cut off by a lost connection is sent again whole.
  if (m.header.offset == 0 && parts_[worker].seq.active() &&
      parts_[worker].seq.type() == m.header.type)
    parts_[worker] = PartState{};
  if (!AcceptPart(worker, m)) return Dropped(kDropFraming, "message part out of sequence");
  std::vector<uint64_t>& rows = subscriptions_[worker];
  if (subscribed_[worker]) {
    // A worker that lost its connection before a push reached it sends its
    // subscription again (CommChannel::ResendLocked): the same rows again
    // are harmless; different ones are not allowed.
    bool same = m.header.offset + m.header.row_count <= rows.size();
    for (uint64_t i = 0; same && i < m.header.row_count; ++i)
      same = rows[m.header.offset + i] == m.RowAt(i);
    if (same && !(m.header.flags & transport::kFlagMore))
      same = m.header.offset + m.header.row_count == rows.size();
    if (!same) {
      parts_[worker] = PartState{};
      return Dropped(kDropDuplicateSubscribe, "second subscription, not the same as the first");
    }
    return {};
  }
  if (m.header.offset == 0) rows.clear();
  for (uint64_t i = 0; i < m.header.row_count; ++i) rows.push_back(m.RowAt(i));
  if (m.header.flags & transport::kFlagMore) return {};
  // A worker subscribes before its first update, so the minimum is still the
  // start clock (0, or a resumed checkpoint's): push at once if it is not 0.
  // Past it, the rows may hold deltas of the current clock (see start_clock_).
  if (min_clock_ > start_clock_) {
    parts_[worker] = PartState{};
    return Dropped(kDropLateSubscribe, "subscription after the minimum clock passed the start");
  }
  subscribed_[worker] = true;
  auto group =
      std::find_if(push_groups_.begin(), push_groups_.end(),
                   [&](const std::vector<int>& g) { return subscriptions_[g[0]] == rows; });
  if (group != push_groups_.end()) {
    group->push_back(worker);
  } else {
    push_groups_.push_back({worker});
    pushed_early_.push_back(0);
  }
  TableOutcome out;
  if (min_clock_ > 0) {
    out.pushes.push_back({{worker}, 0, rows.size(), /*final_part=*/true, min_clock_, rows_});
    HoldPush(min_clock_);  // the rows stay as they are until the minimum passes it
  }
  return out;
}

TableOutcome PartitionTable::Update(int worker, const DecodedMessage& m) {
  if (!Participates(worker)) return DroppedNonParticipant(worker);
  // `aux` acknowledges the last push the worker had installed (0: none).
  // One above the minimum was never sent: the whole update is dropped.
  if (m.header.aux > min_clock_)
    return Dropped(kDropClock, "update acknowledging push " + std::to_string(m.header.aux) +
                                   " from worker " + std::to_string(worker) +
                                   ", past the minimum clock " + std::to_string(min_clock_));
  if (m.header.clock < clocks_[worker]) {
    // A clock this worker completed here, sent again (a resend after a
    // connection reset): already applied, so harmless; not an error.
    counters_->repeated_rows_skipped.fetch_add(static_cast<int64_t>(m.header.row_count),
                                               std::memory_order_relaxed);
    Acknowledge(worker, m.header.aux);
    return {};
  }
  if (m.header.clock != clocks_[worker])
    return Dropped(kDropClock, "update for clock " + std::to_string(m.header.clock) +
                                   " from worker " + std::to_string(worker) + ", expected " +
                                   std::to_string(clocks_[worker]));
  PartState& p = parts_[worker];
  if (m.header.offset == 0 && p.seq.active() && p.seq.type() == m.header.type &&
      p.seq.clock() == m.header.clock) {
    // The message restarts: it was cut off and is sent again whole. Rows
    // below the furthest offset reached were applied; they are skipped.
    const uint64_t applied = std::max(p.applied_before, p.seq.next());
    p = PartState{};
    p.applied_before = applied;
  }
  const uint64_t applied_before = p.applied_before;
  if (!AcceptPart(worker, m)) return Dropped(kDropFraming, "message part out of sequence");
  // Before any row is written: the last acknowledgement of the held push
  // releases it, and the write needs no copy.
  Acknowledge(worker, m.header.aux);
  // Rows of this part not applied before (all of them but after a restart).
  const uint64_t skip =
      applied_before > m.header.offset
          ? std::min<uint64_t>(applied_before - m.header.offset, m.header.row_count)
          : 0;
  if (skip > 0)
    counters_->repeated_rows_skipped.fetch_add(static_cast<int64_t>(skip),
                                               std::memory_order_relaxed);
  TableOutcome out;
  // A worker asks for a checkpoint at the end of this clock. Every
  // partition gets this worker's update of the clock, for every table,
  // before any table's minimum can pass it.
  if (m.header.flags & transport::kFlagCheckpoint) out.checkpoint_request = m.header.clock + 1;
  const bool direct =
      !options_.deterministic && m.header.clock == min_clock_ && min_clock_ > start_clock_;
  Apply(worker, m, skip, direct);
  if (m.header.flags & transport::kFlagMore) {  // the clock ends with the last part
    if (direct) MaybePushEarly(&out);
    return out;
  }
  counters_->updates_applied.fetch_add(1);
  clocks_[worker] = m.header.clock + 1;
  const int64_t new_min = *std::min_element(clocks_.begin(), clocks_.end());
  if (new_min <= min_clock_) {
    if (direct) MaybePushEarly(&out);
    return out;
  }
  Advance(new_min, &out);
  return out;
}

void PartitionTable::Apply(int worker, const DecodedMessage& m, uint64_t skip, bool direct) {
  const uint32_t w = width_;
  if (direct) {
    // Rows arrive in ascending order: this part writes from its first row
    // up, above anything an early push part still holds.
    float* rows =
        Writable(m.header.row_count > skip ? m.RowAt(skip) - span_.begin : span_.size()).data();
    for (uint64_t i = skip; i < m.header.row_count; ++i)
      AddRow(rows + (m.RowAt(i) - span_.begin) * w, m.payload + i * w * sizeof(float), w);
  } else if (m.header.row_count > skip) {
    // Deterministic mode keeps each worker's deltas apart, so that they are
    // added in rank order whatever order they arrived in.
    const int64_t key =
        m.header.clock * options_.num_workers + (options_.deterministic ? worker : 0);
    std::vector<float>& acc = pending_[key];
    if (acc.empty()) {
      if (!spare_.empty()) {
        acc = std::move(spare_.back());
        spare_.pop_back();
      } else {
        acc.assign(values().size(), 0.0f);
      }
    }
    for (uint64_t i = skip; i < m.header.row_count; ++i)
      AddRow(acc.data() + (m.RowAt(i) - span_.begin) * w, m.payload + i * w * sizeof(float), w);
  }
  counters_->rows_applied.fetch_add(static_cast<int64_t>(m.header.row_count - skip));
  counters_->apply_bytes.fetch_add(
      static_cast<int64_t>((m.header.row_count - skip) * w * sizeof(float)),
      std::memory_order_relaxed);
}

void PartitionTable::Advance(int64_t new_min, TableOutcome* out) {
  // Fold in the deltas of the clocks the minimum passed.
  while (!pending_.empty() && pending_.begin()->first / options_.num_workers < new_min) {
    std::vector<float>& acc = pending_.begin()->second;
    FoldAndClear(Writable().data(), acc.data(), acc.size());
    counters_->fold_bytes.fetch_add(static_cast<int64_t>(acc.size() * sizeof(float)),
                                    std::memory_order_relaxed);
    if (spare_.size() < 4) spare_.push_back(std::move(acc));
    pending_.erase(pending_.begin());
  }
  min_clock_ = new_min;
  last_advance_ = std::chrono::steady_clock::now();
  out->advanced_to = new_min;
  // The rest of each push (all of it unless early parts went out: those
  // were of this push, new_min being the old minimum + 1). A member that
  // resynced since its early parts went out gets the push whole.
  for (size_t g = 0; g < push_groups_.size(); ++g) {
    const uint64_t size = subscriptions_[push_groups_[g].front()].size();
    std::vector<int> rest = GroupMembers(g, false);
    if (!rest.empty())
      out->pushes.push_back(
          {std::move(rest), pushed_early_[g], size, /*final_part=*/true, new_min, rows_});
    for (int w : GroupMembers(g, true)) {
      out->pushes.push_back({{w}, 0, size, /*final_part=*/true, new_min, rows_});
      whole_next_[w] = false;
    }
    pushed_early_[g] = 0;
  }
  // The rows now are exactly this push (of every group): held until every
  // subscriber has it, since the next direct writes move them on.
  if (!push_groups_.empty()) HoldPush(new_min);
}

std::vector<int> PartitionTable::GroupMembers(size_t g, bool whole_next) const {
  std::vector<int> out;
  for (int w : push_groups_[g])
    if (whole_next_[w] == whole_next) out.push_back(w);
  return out;
}

bool PartitionTable::Acknowledge(int worker, int64_t clock) {
  if (clock > min_clock_) return false;
  if (clock > acked_[worker]) {
    acked_[worker] = clock;
    if (held_ && clock >= held_clock_) MaybeReleaseHold();
  }
  return true;
}

void PartitionTable::HoldPush(int64_t clock) {
  if (!options_.holds_pushes) return;
  if (held_ != rows_) {
    ReleaseHold();  // the last push's: this one supersedes it
    // One more hold on the rows, taken and let go on this thread only.
    rows_->in_flight.fetch_add(1, std::memory_order_relaxed);
    held_ = rows_;
  }
  // Unchanged rows held again (nothing was written since the last push):
  // they are this push's values too.
  rows_->held_end = span_.size();
  held_clock_ = clock;
  MaybeReleaseHold();
}

void PartitionTable::MaybeReleaseHold() {
  if (!held_) return;
  for (int w = 0; w < options_.num_workers; ++w)
    if (subscribed_[w] && acked_[w] < held_clock_) return;
  ReleaseHold();
}

void PartitionTable::ReleaseHold() {
  if (!held_) return;
  // As ZeroMQ's free function does: a later write (Writable, acquire) that
  // sees the count at 0 writes the rows in place.
  held_->in_flight.fetch_sub(1, std::memory_order_release);
  held_.reset();
}

TableOutcome PartitionTable::AckOrResync(int worker, const DecodedMessage& m) {
  if (!Participates(worker)) return DroppedNonParticipant(worker);
  const int64_t installed = m.header.aux;
  // A message the worker may be sending in parts is left as it is: a
  // resent update restarts at offset 0 (Update).
  if (!Acknowledge(worker, installed))
    return Dropped(kDropClock, std::string(transport::MsgTypeName(m.type)) +
                                   " acknowledging push " + std::to_string(installed) +
                                   " from worker " + std::to_string(worker) +
                                   ", past the minimum clock " + std::to_string(min_clock_));
  TableOutcome out;
  if (m.type == MsgType::kAck) return out;
  counters_->resyncs_received.fetch_add(1, std::memory_order_relaxed);
  if (!subscribed_[worker]) return out;  // nothing was pushed to it
  // Early parts of the next push went to its group before the connection
  // came back (some may be lost): it gets that push whole.
  for (size_t g = 0; g < push_groups_.size(); ++g) {
    const std::vector<int>& group = push_groups_[g];
    if (pushed_early_[g] > 0 && std::find(group.begin(), group.end(), worker) != group.end())
      whole_next_[worker] = true;
  }
  if (held_ && installed < held_clock_) {
    // Counted before it leaves, so a receiver that looks sees it.
    counters_->repushes.fetch_add(1, std::memory_order_relaxed);
    out.pushes.push_back(
        {{worker}, 0, subscriptions_[worker].size(), /*final_part=*/true, held_clock_, held_});
  } else if (!held_ && installed < min_clock_) {
    out.unheld_resync = true;
  }
  return out;
}

void PartitionTable::MaybePushEarly(TableOutcome* out) {
  const int64_t c = min_clock_;
  if (options_.pipeline_part_bytes == 0 || options_.deterministic || c <= start_clock_ ||
      push_groups_.empty())
    return;
  // Deltas of clock c still pending (a worker sent them ahead of the
  // minimum, under SSP) are not in the rows yet: nothing of clock c + 1's
  // push may leave before the advance folds them in.
  if (!pending_.empty() && pending_.begin()->first / options_.num_workers <= c) return;
  // The frontier: no worker will write a row below it for clock c.
  uint64_t frontier = UINT64_MAX;
  for (int w = 0; w < options_.num_workers; ++w) {
    if (clocks_[w] > c) continue;  // done with clock c
    const PartState& p = parts_[w];
    const uint64_t next = p.seq.active() &&
                                  p.seq.type() == static_cast<uint16_t>(MsgType::kUpdate) &&
                                  p.seq.clock() == c
                              ? p.seq.last_row() + 1
                              : span_.begin;  // has not started clock c
    frontier = std::min(frontier, next);
  }
  const uint64_t min_part_bytes = options_.pipeline_part_bytes;
  const uint64_t row_bytes = static_cast<uint64_t>(width_) * sizeof(float);
  for (size_t g = 0; g < push_groups_.size(); ++g) {
    const std::vector<uint64_t>& rows = subscriptions_[push_groups_[g].front()];
    if (rows.size() < 2) continue;
    // Never the last row: the advance sends at least one part, the push's
    // last.
    const uint64_t below = std::min<uint64_t>(
        rows.size() - 1,
        static_cast<uint64_t>(std::lower_bound(rows.begin(), rows.end(), frontier) - rows.begin()));
    if (below <= pushed_early_[g] || (below - pushed_early_[g]) * row_bytes < min_part_bytes)
      continue;
    // Not to members that resynced since the push's first early part: they
    // get it whole at the advance.
    std::vector<int> members = GroupMembers(g, false);
    if (!members.empty()) {
      // Counted before it leaves, so a receiver that looks sees it.
      counters_->early_push_parts.fetch_add(1, std::memory_order_relaxed);
      out->pushes.push_back(
          {std::move(members), pushed_early_[g], below, /*final_part=*/false, c + 1, rows_});
    }
    pushed_early_[g] = below;
  }
}

std::vector<float>& PartitionTable::Writable(uint64_t first) {
  if (rows_->in_flight.load(std::memory_order_acquire) == 0) {
    rows_->held_end = 0;
  } else if (first < rows_->held_end) {
    // A push still reads the rows: write a copy; the push keeps the old.
    auto fresh = std::make_shared<SharedRows>();
    fresh->values = rows_->values;
    counters_->push_copy_bytes.fetch_add(static_cast<int64_t>(fresh->values.size() * sizeof(float)),
                                         std::memory_order_relaxed);
    rows_ = std::move(fresh);
  }
  return rows_->values;
}

float* PartitionTable::PartInPlace(const PushOrder& order, uint64_t first, uint64_t n) {
  const std::vector<uint64_t>& rows = subscriptions_[order.workers.front()];
  // Subscribed rows are sorted and distinct: consecutive iff they span n.
  if (n == 0 || rows[first + n - 1] - rows[first] != n - 1) return nullptr;
  SharedRows& source = *order.source;
  source.held_end = std::max<uint64_t>(source.held_end, rows[first + n - 1] - span_.begin + 1);
  return source.values.data() + (rows[first] - span_.begin) * width_;
}

void PartitionTable::CopyPart(const PushOrder& order, uint64_t first, uint64_t n, char* out) const {
  const std::vector<uint64_t>& rows = subscriptions_[order.workers.front()];
  const size_t row_bytes = static_cast<size_t>(width_) * sizeof(float);
  const float* values = order.source->values.data();
  // Copy runs of consecutive rows at once.
  uint64_t i = first;
  while (i < first + n) {
    uint64_t j = i + 1;
    while (j < first + n && rows[j] == rows[j - 1] + 1) ++j;
    std::memcpy(out + (i - first) * row_bytes, values + (rows[i] - span_.begin) * width_,
                (j - i) * row_bytes);
    i = j;
  }
}

std::vector<int> PartitionTable::TakeStalledWorkers(std::chrono::steady_clock::time_point now,
                                                    std::chrono::steady_clock::duration after,
                                                    std::chrono::steady_clock::duration* waited) {
  *waited = now - last_advance_;
  if (min_clock_ == stall_reported_ || *waited < after) return {};
  // Workers that have not delivered clock min_clock_ while another has.
  std::vector<int> missing;
  bool someone_ahead = false;
  for (int w = 0; w < options_.num_workers; ++w) {
    if (!Participates(w)) continue;
    if (clocks_[w] > min_clock_)
      someone_ahead = true;
    else
      missing.push_back(w);
  }
  if (!someone_ahead || missing.empty()) return {};
  stall_reported_ = min_clock_;
  return missing;
}

}  // namespace geeps::server
