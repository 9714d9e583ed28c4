#include "transport/part_split.h"

#include <algorithm>
#include <cstring>

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

Frame PackedFrame(const WireHeader& h, const void* rows, size_t rows_bytes, const void* payload,
                  size_t payload_bytes) {
  Frame frame(kHeaderBytes + rows_bytes + payload_bytes);
  WireHeader packed = h;
  packed.flags |= kFlagPacked;
  EncodeHeader(packed, frame.data());
  if (rows_bytes > 0)
    std::memcpy(static_cast<char*>(frame.data()) + kHeaderBytes, rows, rows_bytes);
  if (payload != nullptr && payload_bytes > 0)
    std::memcpy(PackedPayload(frame, rows_bytes), payload, payload_bytes);
  return frame;
}

char* PackedPayload(Frame& frame, size_t rows_bytes) {
  return static_cast<char*>(frame.data()) + kHeaderBytes + rows_bytes;
}

}  // namespace geeps::transport
