// The sending side of a message that travels in parts (wire.h; the
// receiving side's rule is part_sequence.h): a message over the rows
// [from, to) is cut into parts of at most `rows_per_part` rows (RowsPerPart
// keeps a part within a byte limit); each part's header names its first
// row (`offset`) and row count, keeps the message's other flags, and has
// kFlagMore on every part but the last (on the last too when `continues`:
// a later message goes on from `to`, as a partition's push sent in several
// orders does). A message without rows is one part without rows. Socket-free:
// the worker's channels, the partitions and the machine relay each cut
// their messages with it and only add the frames (tests/part_split_test.cc).
#ifndef GEEPS_TRANSPORT_PART_SPLIT_H_
#define GEEPS_TRANSPORT_PART_SPLIT_H_

#include <cstdint>

#include "transport/frame.h"
#include "transport/wire.h"

namespace geeps::transport {

// One part: its header, and the message's rows [first, first + count).
struct Part {
  WireHeader header;
  uint64_t first = 0;
  uint64_t count = 0;
};

class PartSplit {
 public:
  PartSplit(const WireHeader& h, uint64_t from, uint64_t to, uint64_t rows_per_part,
            bool continues = false);

  // The next part into *part; false once every part was given.
  bool Next(Part* part);

 private:
  WireHeader header_;
  uint32_t flags_;  // the message's flags, without kFlagMore
  uint64_t next_, to_, per_;
  bool continues_;
  bool done_ = false;
};

// A frame holding `h` encoded (kHeaderBytes).
Frame HeaderFrame(const WireHeader& h);

// A packed message's frame (wire.h, kFlagPacked): `h` with kFlagPacked set,
// `rows_bytes` from `rows`, then `payload_bytes` from `payload`, or left for
// the caller to fill at PackedPayload() when `payload` is null.
Frame PackedFrame(const WireHeader& h, const void* rows, size_t rows_bytes, const void* payload,
                  size_t payload_bytes);
char* PackedPayload(Frame& frame, size_t rows_bytes);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_PART_SPLIT_H_
