// Fuzz target: the wire format (src/transport/wire.h), as a shard or a client
// meets it. The input is split into 1 to 3 frames, each copied into its own
// heap block of exactly its size (so that AddressSanitizer sees a read past a
// frame), and goes through the same calls as ShardChannel::HandleMessage:
// ParseWorkerRoutingId on the first frame, DecodeFrames, ValidateRows.
//
// Input layout (5 leading bytes, then the frames' bytes back to back):
//   byte 0      number of frames: 1 + byte % 3
//   bytes 1-2   size of frame 0 (little-endian), when there are 2 or 3 frames
//   bytes 3-4   size of frame 1, when there are 3 frames
// A size larger than what is left takes what is left; the last frame takes
// the rest. An input under 5 bytes is one frame.
//
// Properties checked (beyond "never crashes"):
//   - a decoded message's rows/payload point at the right frames (or, packed,
//     after the header in its one frame), and every byte they cover can be
//     read;
//   - ValidateRows accepts exactly strictly increasing rows inside the range;
//   - re-encoding the decoded header gives the header frame's bytes, and
//     decoding again gives the same fields;
//   - ParseWorkerRoutingId and WorkerRoutingId are inverses;
//   - RowsPerPart keeps a part within the byte limit (or is one row).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "transport/routing_id.h"
#include "transport/wire.h"

#ifndef GEEPS_FUZZ_ENTRY
#define GEEPS_FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

namespace geeps::fuzz::wire {

using transport::DecodedMessage;
using transport::FrameView;
using transport::MsgType;

// The rows a shard of this test owns: [kBegin, kEnd).
constexpr uint64_t kBegin = 8;
constexpr uint64_t kEnd = 4096;
constexpr int kNumWorkers = 1000;

struct Frame {
  std::unique_ptr<unsigned char[]> bytes;
  size_t size = 0;
};

std::vector<Frame> SplitFrames(const uint8_t* data, size_t size) {
  size_t count = 1;
  size_t lengths[2] = {0, 0};
  if (size >= 5) {
    count = 1 + data[0] % 3;
    lengths[0] = data[1] | (static_cast<size_t>(data[2]) << 8);
    lengths[1] = data[3] | (static_cast<size_t>(data[4]) << 8);
    data += 5;
    size -= 5;
  }
  std::vector<Frame> frames(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t n = i + 1 == count ? size : std::min(lengths[i], size);
    frames[i].size = n;
    // new[] of 0 bytes is a valid, unreadable block: as good as an empty frame.
    frames[i].bytes.reset(new unsigned char[n]);
    if (n > 0) std::memcpy(frames[i].bytes.get(), data, n);
    data += n;
    size -= n;
  }
  return frames;
}

// Reads every byte of [p, p + n): ASan reports any that are not there.
unsigned Touch(const unsigned char* p, uint64_t n) {
  unsigned sum = 0;
  for (uint64_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

void CheckRoutingId(const Frame& f) {
  const int worker = transport::ParseWorkerRoutingId(f.bytes.get(), f.size, kNumWorkers);
  GEEPS_FUZZ_CHECK(worker >= -1 && worker < kNumWorkers);
  if (worker >= 0) {
    const std::string id = transport::WorkerRoutingId(worker);
    GEEPS_FUZZ_CHECK(id.size() == f.size && std::memcmp(id.data(), f.bytes.get(), f.size) == 0);
  }
}

// Separate frames: the rows and the payload are frames 1 and 2 (those present).
void CheckSeparate(const DecodedMessage& m, const std::vector<Frame>& frames, bool has_rows,
                   bool has_payload) {
  const transport::WireHeader& h = m.header;
  GEEPS_FUZZ_CHECK(frames[0].size == transport::kHeaderBytes);
  size_t next = 1;
  if (has_rows && h.row_count > 0) {
    GEEPS_FUZZ_CHECK(m.rows == frames[next].bytes.get());
    GEEPS_FUZZ_CHECK(frames[next].size / sizeof(uint64_t) == h.row_count);
    Touch(m.rows, h.row_count * sizeof(uint64_t));
    ++next;
  } else {
    GEEPS_FUZZ_CHECK(m.rows == nullptr);
  }
  if (has_payload && h.row_count > 0) {
    GEEPS_FUZZ_CHECK(m.payload == frames[next].bytes.get());
    Touch(m.payload, h.row_count * h.row_width * sizeof(float));
    ++next;
  } else {
    GEEPS_FUZZ_CHECK(m.payload == nullptr);
  }
  GEEPS_FUZZ_CHECK(next == frames.size());
}

// Packed (kFlagPacked): one frame, the rows then the payload after the header.
void CheckPacked(const DecodedMessage& m, const std::vector<Frame>& frames, bool has_rows,
                 bool has_payload) {
  const transport::WireHeader& h = m.header;
  GEEPS_FUZZ_CHECK(frames.size() == 1);
  const uint64_t rows_bytes = has_rows ? h.row_count * sizeof(uint64_t) : 0;
  const uint64_t payload_bytes =
      has_payload ? h.row_count * uint64_t{h.row_width} * sizeof(float) : 0;
  GEEPS_FUZZ_CHECK(frames[0].size == transport::kHeaderBytes + rows_bytes + payload_bytes);
  const unsigned char* at = frames[0].bytes.get() + transport::kHeaderBytes;
  GEEPS_FUZZ_CHECK(m.rows == (rows_bytes > 0 ? at : nullptr));
  GEEPS_FUZZ_CHECK(m.payload == (payload_bytes > 0 ? at + rows_bytes : nullptr));
  Touch(at, rows_bytes + payload_bytes);
}

void CheckDecoded(const DecodedMessage& m, const std::vector<Frame>& frames,
                  const FrameView* views) {
  const transport::WireHeader& h = m.header;
  GEEPS_FUZZ_CHECK(h.magic == transport::kWireMagic && h.version == transport::kWireVersion);
  GEEPS_FUZZ_CHECK(static_cast<uint16_t>(m.type) == h.type);
  GEEPS_FUZZ_CHECK(h.clock >= 0);
  const bool has_rows = m.type != MsgType::kPush;
  const bool has_payload = m.type != MsgType::kSubscribe;
  const bool packed = (h.flags & transport::kFlagPacked) != 0;
  if (packed) {
    CheckPacked(m, frames, has_rows, has_payload);
  } else {
    CheckSeparate(m, frames, has_rows, has_payload);
  }

  // The shard validates the rows of every message that decodes, before it
  // looks at the type (src/server/shard_channel.cc).
  const Status rows = transport::ValidateRows(m, kBegin, kEnd);
  // A message without a rows frame (kPush) has no rows to accept.
  bool expected = h.row_count == 0 || m.rows != nullptr;
  for (uint64_t i = 0; i < h.row_count && expected; ++i) {
    const uint64_t r = m.RowAt(i);
    expected = r >= kBegin && r < kEnd && (i == 0 || r > m.RowAt(i - 1));
  }
  GEEPS_FUZZ_CHECK(rows.ok() == expected);

  // Round trip: the header encodes back to the bytes it came from, and
  // decodes again to the same message.
  unsigned char encoded[transport::kHeaderBytes];
  transport::EncodeHeader(h, encoded);
  GEEPS_FUZZ_CHECK(std::memcmp(encoded, frames[0].bytes.get(), transport::kHeaderBytes) == 0);
  FrameView again[3];
  for (size_t i = 0; i < frames.size(); ++i) again[i] = views[i];
  // The first frame again with the header re-encoded (a packed one keeps
  // its rows and payload after it).
  std::vector<unsigned char> first(frames[0].bytes.get(), frames[0].bytes.get() + frames[0].size);
  std::memcpy(first.data(), encoded, sizeof(encoded));
  again[0] = {first.data(), first.size()};
  StatusOr<DecodedMessage> d2 = transport::DecodeFrames(again, frames.size());
  GEEPS_FUZZ_CHECK(d2.ok());
  const transport::WireHeader& h2 = d2->header;
  GEEPS_FUZZ_CHECK(h2.magic == h.magic && h2.version == h.version && h2.type == h.type &&
                   h2.sender == h.sender && h2.table == h.table && h2.clock == h.clock &&
                   h2.aux == h.aux && h2.row_count == h.row_count && h2.row_width == h.row_width &&
                   h2.flags == h.flags && h2.offset == h.offset);
  // The same places: in the copy of the first frame when packed.
  auto moved = [&](const unsigned char* p) -> const unsigned char* {
    const unsigned char* f0 = frames[0].bytes.get();
    return packed && p != nullptr ? first.data() + (p - f0) : p;
  };
  GEEPS_FUZZ_CHECK(d2->type == m.type && d2->rows == moved(m.rows) &&
                   d2->payload == moved(m.payload));

  // Splitting this message into parts: each part within the limit.
  const uint64_t max_bytes = static_cast<uint64_t>(h.aux) & ((1ull << 40) - 1);
  const uint64_t per_part = transport::RowsPerPart(h.row_width, has_rows, max_bytes);
  const uint64_t row_bytes = uint64_t{h.row_width} * sizeof(float) + (has_rows ? 8 : 0);
  GEEPS_FUZZ_CHECK(per_part >= 1);
  GEEPS_FUZZ_CHECK(per_part == 1 || row_bytes == 0 || per_part * row_bytes <= max_bytes);
}

int Run(const uint8_t* data, size_t size) {
  const std::vector<Frame> frames = SplitFrames(data, size);
  FrameView views[3];
  for (size_t i = 0; i < frames.size(); ++i) views[i] = {frames[i].bytes.get(), frames[i].size};
  CheckRoutingId(frames[0]);
  StatusOr<DecodedMessage> decoded = transport::DecodeFrames(views, frames.size());
  if (!decoded.ok()) {
    GEEPS_FUZZ_CHECK(!decoded.status().message().empty());
    return 0;
  }
  CheckDecoded(*decoded, frames, views);
  return 0;
}

}  // namespace geeps::fuzz::wire

extern "C" int GEEPS_FUZZ_ENTRY(const uint8_t* data, size_t size) {
  return geeps::fuzz::wire::Run(data, size);
}
