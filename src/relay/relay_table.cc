#include "relay/relay_table.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

namespace geeps::relay {

using transport::DecodedMessage;
using transport::MsgType;

bool Assembly::Add(const DecodedMessage& m, uint32_t width, bool* complete) {
  using Verdict = transport::PartSequence::Verdict;
  const uint64_t n = m.header.row_count;
  transport::PartSequence::Rows ids;
  if (m.rows != nullptr && n > 0) ids = {true, m.RowAt(0), m.RowAt(n - 1)};
  const Verdict verdict = seq.Accept(m.header, ids);
  *complete = transport::PartSequence::Completes(verdict);
  if (verdict == Verdict::kOutOfSequence) return false;
  if (verdict == Verdict::kWhole || verdict == Verdict::kFirst) {
    type = m.header.type;
    clock = m.header.clock;
    aux = m.header.aux;
    flags = m.header.flags & ~transport::kFlagMore;
    rows.clear();
    values.clear();
  }
  if (m.rows != nullptr)
    for (uint64_t i = 0; i < n; ++i) rows.push_back(m.RowAt(i));
  if (m.payload != nullptr && n > 0) {
    const size_t floats = static_cast<size_t>(n) * width;
    const size_t at = values.size();
    values.resize(at + floats);
    std::memcpy(values.data() + at, m.payload, floats * sizeof(float));
  }
  return true;
}

RelayTable::RelayTable(size_t members, uint32_t width, uint64_t row_begin, uint64_t row_end,
                       int64_t start_clock)
    : width_(width),
      row_begin_(row_begin),
      row_end_(row_end),
      members_(members),
      next_up_(start_clock) {
  for (Member& m : members_) m.next_clock = start_clock;
}

std::string RelayTable::OnMember(size_t member, int rank, const DecodedMessage& m) {
  if (m.type == MsgType::kUpdate && m.header.row_width != width_)
    return "row width does not match the table";
  const Status rows_ok = transport::ValidateRows(m, row_begin_, row_end_);
  if (!rows_ok.ok()) return rows_ok.message();
  if (m.type == MsgType::kSubscribe && read_rank_ == 0) read_rank_ = m.header.aux;
  bool complete = false;
  if (!members_[member].partial.Add(m, width_, &complete)) return "message part out of sequence";
  return complete ? OnComplete(member, rank) : std::string();
}

std::string RelayTable::OnComplete(size_t member, int rank) {
  Member& mt = members_[member];
  Assembly& a = mt.partial;
  if (a.type == static_cast<uint16_t>(MsgType::kSubscribe)) {
    if (mt.subscribed && a.rows == mt.subscription) return "";  // sent again after a loss
    if (mt.subscribed) return "a second subscription of worker " + std::to_string(rank);
    if (subscribed_up_)
      return "a subscription of worker " + std::to_string(rank) + " after its first update";
    mt.subscription = std::move(a.rows);
    mt.subscribed = true;
    return "";
  }
  if (a.clock < mt.next_clock) return "";  // sent again after a lost connection
  if (a.clock != mt.next_clock)
    return "an update of clock " + std::to_string(a.clock) + " from worker " +
           std::to_string(rank) + ", which is at clock " + std::to_string(mt.next_clock);
  Delta& d = mt.ready[a.clock];
  d.rows = std::move(a.rows);
  d.values = std::move(a.values);
  d.checkpoint = (a.flags & transport::kFlagCheckpoint) != 0;
  d.read_order = (a.flags & transport::kFlagReadOrder) != 0;
  ++mt.next_clock;
  return "";
}

std::shared_ptr<Delta> RelayTable::TakeSum(int64_t* clock, bool* subscribe_first) {
  *subscribe_first = false;
  for (const Member& mt : members_)
    if (mt.ready.count(next_up_) == 0) return nullptr;
  if (!subscribed_up_) {
    SubscribeUp();
    *subscribe_first = true;
  }
  std::shared_ptr<Delta> sum = Sum();
  for (Member& mt : members_) mt.ready.erase(next_up_);
  *clock = next_up_++;
  return sum;
}

void RelayTable::SubscribeUp() {
  subscribed_up_ = true;
  for (const Member& mt : members_) {
    std::vector<uint64_t> merged;
    std::set_union(rows_up_.begin(), rows_up_.end(), mt.subscription.begin(), mt.subscription.end(),
                   std::back_inserter(merged));
    rows_up_ = std::move(merged);
  }
  pick_.assign(members_.size(), {});
  whole_.assign(members_.size(), false);
  for (size_t i = 0; i < members_.size(); ++i) {
    const Member& mt = members_[i];
    if (!mt.subscribed) continue;
    whole_[i] = mt.subscription.size() == rows_up_.size();
    if (whole_[i]) continue;
    size_t at = 0;
    for (uint64_t row : mt.subscription) {
      while (rows_up_[at] != row) ++at;
      pick_[i].push_back(static_cast<uint32_t>(at));
    }
  }
}

std::shared_ptr<Delta> RelayTable::Sum() const {
  // Over the same rows (the usual case) one add per member, else over the
  // union of the rows; in rank order either way.
  auto sum_ptr = std::make_shared<Delta>();
  Delta& sum = *sum_ptr;
  bool same = true;
  const Delta& first = members_[0].ready.at(next_up_);
  for (const Member& mt : members_) {
    const Delta& d = mt.ready.at(next_up_);
    same = same && d.rows == first.rows;
    sum.checkpoint = sum.checkpoint || d.checkpoint;
    sum.read_order = sum.read_order || d.read_order;
  }
  const size_t w = width_;
  if (same) {
    sum.rows = first.rows;
    sum.values = first.values;
    for (size_t i = 1; i < members_.size(); ++i) {
      const std::vector<float>& v = members_[i].ready.at(next_up_).values;
      for (size_t k = 0; k < v.size(); ++k) sum.values[k] += v[k];
    }
    return sum_ptr;
  }
  for (const Member& mt : members_) {
    const std::vector<uint64_t>& r = mt.ready.at(next_up_).rows;
    std::vector<uint64_t> merged;
    std::set_union(sum.rows.begin(), sum.rows.end(), r.begin(), r.end(),
                   std::back_inserter(merged));
    sum.rows = std::move(merged);
  }
  sum.values.assign(sum.rows.size() * w, 0.0f);
  for (const Member& mt : members_) {
    const Delta& d = mt.ready.at(next_up_);
    size_t at = 0;
    for (size_t i = 0; i < d.rows.size(); ++i) {
      while (sum.rows[at] != d.rows[i]) ++at;
      float* out = sum.values.data() + at * w;
      const float* in = d.values.data() + i * w;
      for (size_t k = 0; k < w; ++k) out[k] += in[k];
    }
  }
  return sum_ptr;
}

}  // namespace geeps::relay
