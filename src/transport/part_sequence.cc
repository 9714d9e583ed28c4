#include "transport/part_sequence.h"

namespace geeps::transport {

PartSequence::Verdict PartSequence::Accept(const WireHeader& h, Rows rows) {
  const bool more = (h.flags & kFlagMore) != 0;
  if (h.offset == 0) {
    if (active_ && restart_ == Restart::kRefused) return Verdict::kOutOfSequence;
  } else if (!active_ || h.type != type_ || h.clock != clock_ || h.offset != next_ ||
             (rows.present && h.row_count > 0 && has_rows_ && rows.first <= last_row_)) {
    return Verdict::kOutOfSequence;
  }
  const bool first = h.offset == 0;
  if (!more) {
    Reset();
    return first ? Verdict::kWhole : Verdict::kLast;
  }
  active_ = true;
  type_ = h.type;
  clock_ = h.clock;
  next_ = h.offset + h.row_count;
  if (first) has_rows_ = false;
  if (rows.present && h.row_count > 0) {
    last_row_ = rows.last;
    has_rows_ = true;
  }
  return first ? Verdict::kFirst : Verdict::kMiddle;
}

}  // namespace geeps::transport
