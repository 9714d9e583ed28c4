#include "transport/part_split.h"

#include <algorithm>

namespace geeps::transport {

PartSplit::PartSplit(const WireHeader& h, uint64_t from, uint64_t to, uint64_t rows_per_part,
                     bool continues)
    : header_(h),
      flags_(h.flags & ~kFlagMore),
      next_(from),
      to_(std::max(from, to)),
      per_(std::max<uint64_t>(rows_per_part, 1)),
      continues_(continues) {}

bool PartSplit::Next(Part* part) {
  if (done_) return false;
  const uint64_t n = std::min(per_, to_ - next_);
  const bool last = next_ + n >= to_;
  part->header = header_;
  part->header.offset = next_;
  part->header.row_count = n;
  part->header.flags = flags_ | (!last || continues_ ? kFlagMore : 0);
  part->first = next_;
  part->count = n;
  next_ += n;
  done_ = last;
  return true;
}

Frame HeaderFrame(const WireHeader& h) {
  Frame frame(kHeaderBytes);
  EncodeHeader(h, frame.data());
  return frame;
}

}  // namespace geeps::transport
