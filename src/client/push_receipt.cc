#include "client/push_receipt.h"

#include <cstring>

namespace geeps::client {

bool PushReceipt::Starts(const transport::WireHeader& h) {
  if (h.offset != 0) return false;
  seq_.Reset();
  return (h.flags & transport::kFlagMore) != 0;
}

PushReceipt::Verdict PushReceipt::Accept(const transport::WireHeader& h, uint32_t cache_count,
                                         uint32_t width, const float* payload) {
  const auto verdict = seq_.Accept(h);
  if (verdict == transport::PartSequence::Verdict::kOutOfSequence)
    return {Step::kDrop, "push part out of sequence"};
  const bool more = (h.flags & transport::kFlagMore) != 0;
  if (!more && h.offset + h.row_count != cache_count)
    return {Step::kDrop, "push ended before all subscribed rows"};
  if (verdict == transport::PartSequence::Verdict::kWhole) return {Step::kWhole};
  if (in_cache_) return {Step::kWriteToCache, "", !more};
  if (h.offset == 0) rows_.resize(static_cast<size_t>(cache_count) * width);
  const size_t floats = static_cast<size_t>(h.row_count) * width;
  if (floats > 0) std::memcpy(rows_.data() + h.offset * width, payload, floats * sizeof(float));
  return {Step::kCollected, "", !more};
}

}  // namespace geeps::client
