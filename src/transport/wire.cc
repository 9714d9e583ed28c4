#include "transport/wire.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace geeps::transport {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire format is little-endian; big-endian hosts need byte swaps");

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

// The rest of DecodeFrames for a packed message (kFlagPacked): one frame,
// the header then `rows_bytes` then `payload_bytes`.
StatusOr<DecodedMessage> DecodePacked(DecodedMessage m, const FrameView& frame, size_t count,
                                      uint64_t rows_bytes, uint64_t payload_bytes) {
  const char* type = MsgTypeName(m.type);
  if (count != 1)
    return InvalidArgumentError(std::string("packed ") + type + " has " + std::to_string(count) +
                                " frames, expected 1");
  uint64_t expected = 0;
  if (__builtin_add_overflow(rows_bytes, payload_bytes, &expected) ||
      __builtin_add_overflow(expected, uint64_t{kHeaderBytes}, &expected) || frame.size != expected)
    return InvalidArgumentError(std::string("packed ") + type + " with " +
                                std::to_string(m.header.row_count) + " rows has " +
                                std::to_string(frame.size) + " bytes, expected " +
                                std::to_string(kHeaderBytes) + " + " + std::to_string(rows_bytes) +
                                " + " + std::to_string(payload_bytes));
  const auto* at = static_cast<const unsigned char*>(frame.data) + kHeaderBytes;
  if (rows_bytes > 0) m.rows = at;
  if (payload_bytes > 0) m.payload = at + rows_bytes;
  return m;
}

}  // namespace

const char* MsgTypeName(MsgType type) {
  switch (type) {
    case MsgType::kSubscribe:
      return "Subscribe";
    case MsgType::kUpdate:
      return "Update";
    case MsgType::kPush:
      return "Push";
    case MsgType::kResync:
      return "Resync";
    case MsgType::kAck:
      return "Ack";
  }
  return "Unknown";
}

uint64_t DecodedMessage::RowAt(uint64_t i) const {
  uint64_t r;
  std::memcpy(&r, rows + i * sizeof(uint64_t), sizeof(r));
  return r;
}

void EncodeHeader(const WireHeader& h, void* out) { std::memcpy(out, &h, kHeaderBytes); }

StatusOr<DecodedMessage> DecodeFrames(const FrameView* frames, size_t count) {
  if (count == 0) return InvalidArgumentError("empty message");
  auto header_size_error = [&] {
    return InvalidArgumentError("header frame has " + std::to_string(frames[0].size) +
                                " bytes, expected " + std::to_string(kHeaderBytes));
  };
  if (frames[0].size < kHeaderBytes) return header_size_error();
  DecodedMessage m;
  std::memcpy(&m.header, frames[0].data, kHeaderBytes);
  const WireHeader& h = m.header;
  if (h.magic != kWireMagic) return InvalidArgumentError("bad magic");
  if (h.version != kWireVersion)
    return InvalidArgumentError("unsupported wire version " + std::to_string(h.version));
  const bool packed = (h.flags & kFlagPacked) != 0;
  if (!packed && frames[0].size != kHeaderBytes) return header_size_error();
  constexpr uint32_t kUpdateOnly = kFlagCheckpoint | kFlagReadOrder;
  if ((h.flags & ~(kFlagMore | kFlagPacked | kUpdateOnly)) != 0 ||
      ((h.flags & kUpdateOnly) && h.type != static_cast<uint16_t>(MsgType::kUpdate)))
    return InvalidArgumentError("reserved flags set");
  if (h.offset > (1ull << 40)) return InvalidArgumentError("part offset out of range");
  if (h.clock < 0) return InvalidArgumentError("negative clock");
  if (h.type < static_cast<uint16_t>(MsgType::kSubscribe) ||
      h.type > static_cast<uint16_t>(MsgType::kAck))
    return InvalidArgumentError("unknown message type " + std::to_string(h.type));
  m.type = static_cast<MsgType>(h.type);
  if (m.type == MsgType::kResync || m.type == MsgType::kAck) {
    // Header only: no rows, no parts, a clock in `aux`.
    if (h.row_count != 0 || h.offset != 0 || h.flags != 0 || h.aux < 0)
      return InvalidArgumentError(std::string(MsgTypeName(m.type)) +
                                  " carries rows, parts, flags or a negative clock");
    if (count != 1)
      return InvalidArgumentError(std::string(MsgTypeName(m.type)) + " has " +
                                  std::to_string(count) + " frames, expected 1");
    return m;
  }

  const bool has_rows = m.type != MsgType::kPush;
  const bool has_payload = m.type != MsgType::kSubscribe;
  if (has_payload && h.row_width == 0) return InvalidArgumentError("zero row width");
  uint64_t row_bytes = 0, floats = 0, payload_bytes = 0;
  if (MulOverflows(h.row_count, sizeof(uint64_t), &row_bytes) ||
      MulOverflows(h.row_count, h.row_width, &floats) ||
      MulOverflows(floats, sizeof(float), &payload_bytes))
    return InvalidArgumentError("row_count overflows");

  if (packed)
    return DecodePacked(m, frames[0], count, has_rows ? row_bytes : 0,
                        has_payload ? payload_bytes : 0);
  // Frames present: header, then rows (if the type has rows and row_count >
  // 0), then payload (if the type has a payload and row_count > 0).
  size_t expected =
      1 + ((has_rows && h.row_count > 0) ? 1 : 0) + ((has_payload && h.row_count > 0) ? 1 : 0);
  if (count != expected)
    return InvalidArgumentError(std::string(MsgTypeName(m.type)) + " with " +
                                std::to_string(h.row_count) + " rows has " + std::to_string(count) +
                                " frames, expected " + std::to_string(expected));
  size_t next = 1;
  if (has_rows && h.row_count > 0) {
    if (frames[next].size != row_bytes)
      return InvalidArgumentError("rows frame has " + std::to_string(frames[next].size) +
                                  " bytes, expected " + std::to_string(row_bytes));
    m.rows = static_cast<const unsigned char*>(frames[next].data);
    ++next;
  }
  if (has_payload && h.row_count > 0) {
    if (frames[next].size != payload_bytes)
      return InvalidArgumentError("payload frame has " + std::to_string(frames[next].size) +
                                  " bytes, expected " + std::to_string(payload_bytes));
    m.payload = static_cast<const unsigned char*>(frames[next].data);
  }
  return m;
}

Status ValidateRows(const DecodedMessage& m, uint64_t begin, uint64_t end) {
  // A push carries no rows frame (its rows are the subscription).
  if (m.header.row_count > 0 && m.rows == nullptr)
    return InvalidArgumentError(std::string(MsgTypeName(m.type)) + " carries no row indexes");
  uint64_t prev = 0;
  for (uint64_t i = 0; i < m.header.row_count; ++i) {
    uint64_t r = m.RowAt(i);
    if (r < begin || r >= end)
      return OutOfRangeError("row " + std::to_string(r) + " outside [" + std::to_string(begin) +
                             ", " + std::to_string(end) + ")");
    if (i > 0 && r <= prev) return InvalidArgumentError("rows not strictly increasing");
    prev = r;
  }
  return Status::OK();
}

uint64_t RowsPerPart(uint32_t row_width, bool with_rows, uint64_t max_bytes) {
  const uint64_t row_bytes =
      static_cast<uint64_t>(row_width) * sizeof(float) + (with_rows ? sizeof(uint64_t) : 0);
  return std::max<uint64_t>(1, max_bytes / std::max<uint64_t>(1, row_bytes));
}

}  // namespace geeps::transport
