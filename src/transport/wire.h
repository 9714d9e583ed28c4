// The wire format shared by clients and server partitions.
//
// A message is 1 to 3 ZeroMQ frames: [header][rows][payload].
//  header  56 bytes, little-endian, layout of WireHeader below.
//  rows    row_count uint64 row indexes, strictly increasing (kSubscribe,
//          kUpdate); absent for kPush, whose rows are the subscription.
//  payload row_count * row_width float32 values (kUpdate, kPush).
// Or packed (kFlagPacked; senders pack under Config::pack_below_bytes): one frame
// holding the header, the rows and the payload back to back, each as it
// would be in a frame of its own. Fewer frames cost ZeroMQ less per message
// on both sides, which is what a small message's time goes to.
// A ROUTER socket adds the peer's routing id as a first frame (routing_id.h).
//
// Large messages travel in parts (libzmq 4.3 fails on frames over 2 GB): each
// part is a message of the same type, table and clock carrying rows
// [offset, offset + row_count) of the whole; every part but the last has
// kFlagMore set. Parts of one message are sent back to back on one socket,
// so they arrive in order.
//
// Message types:
//  kSubscribe  client -> partition: the rows of `table` this client caches.
//  kUpdate     client -> partition: deltas for clock `clock` of `table`, and
//              "this client has completed clock `clock` of `table`". May carry
//              zero rows (a clock advance only).
//  kPush       partition -> client: the subscribed rows of `table` as of
//              minimum clock `clock` (every worker's updates from clocks <
//              clock are in, and no later ones); `aux` = this recipient's
//              clocks included (equal to `clock` today).
//
// Nothing in a frame is trusted: DecodeFrames() checks sizes and the fixed
// fields; the receiver then checks what depends on its state (table ids,
// row ranges, clocks) with the helpers below before using anything.
#ifndef GEEPS_TRANSPORT_WIRE_H_
#define GEEPS_TRANSPORT_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "geeps/status.h"

namespace geeps::transport {

constexpr uint32_t kWireMagic = 0x53504547;  // "GEPS" little-endian
constexpr uint16_t kWireVersion = 1;

enum class MsgType : uint16_t {
  kSubscribe = 1,
  kUpdate = 2,
  kPush = 3,
  kResync = 4,
  kAck = 5,
};

const char* MsgTypeName(MsgType type);

struct WireHeader {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  uint16_t type = 0;
  uint32_t sender = 0;  // worker rank (client -> server) or partition id
  uint32_t table = 0;
  int64_t clock = 0;
  int64_t aux = 0;
  uint64_t row_count = 0;
  uint32_t row_width = 0;
  uint32_t flags = 0;   // kFlagMore or 0
  uint64_t offset = 0;  // index of this part's first row in the whole message
};
constexpr uint32_t kFlagMore = 1;  // more parts of this message follow
// Update only: the sender asks every partition to checkpoint at clock + 1
// (GeePS::RequestCheckpoint).
constexpr uint32_t kFlagCheckpoint = 1u << 4;
// Update only: the sender asks for pushes in the order the workers read the
// tables (Config::push_in_read_order, adapt_push_order; server/push_schedule.h).
constexpr uint32_t kFlagReadOrder = 1u << 5;
// One frame holds the whole message (header, rows, payload); any type with
// rows or a payload (kSubscribe, kUpdate, kPush).
constexpr uint32_t kFlagPacked = 1u << 6;
constexpr size_t kHeaderBytes = 56;
static_assert(sizeof(WireHeader) == kHeaderBytes, "packed header layout");
// Whether a part with `rows_bytes` of row indexes and `payload_bytes` of
// values goes packed under Config::pack_below_bytes `below`: its packed
// frame would be smaller (a header alone is one frame either way).
inline bool Packs(uint64_t rows_bytes, uint64_t payload_bytes, uint64_t below) {
  const uint64_t body = rows_bytes + payload_bytes;
  return body > 0 && body + kHeaderBytes < below;
}

// One received message, frames borrowed from the caller.
struct FrameView {
  const void* data = nullptr;
  size_t size = 0;
};

struct DecodedMessage {
  WireHeader header;
  MsgType type = MsgType::kUpdate;
  const unsigned char* rows = nullptr;     // row_count uint64, maybe unaligned
  const unsigned char* payload = nullptr;  // row_count*row_width float32
  uint64_t RowAt(uint64_t i) const;        // REQUIRES: i < row_count
};

// Validates framing and the fixed fields: frame count for the type, header
// size, magic, version, type, flags, offset, rows/payload frame sizes (or a
// packed frame's size) against row_count and row_width (overflow-safe),
// clock >= 0. Does not check the header against any receiver state.
StatusOr<DecodedMessage> DecodeFrames(const FrameView* frames, size_t count);

// Checks rows are strictly increasing and inside [begin, end).
Status ValidateRows(const DecodedMessage& m, uint64_t begin, uint64_t end);

// Encodes a header into kHeaderBytes bytes.
void EncodeHeader(const WireHeader& h, void* out);

// Rows per part so that a part's rows and payload stay within max_bytes
// (at least one row per part).
uint64_t RowsPerPart(uint32_t row_width, bool with_rows, uint64_t max_bytes);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_WIRE_H_
