// The one rule for a message that travels in parts (wire.h: `offset` is the
// index of a part's first row in the whole message, kFlagMore on all but
// the last part): a part continues the message in progress only if it has
// its type and clock, starts where the previous part ended, and (when parts
// carry row ids) its rows come after the previous part's. Anything else is
// out of sequence: the caller drops the part, which changes nothing here. So
// a repeated part is harmless (the message goes on with the part that truly
// follows), and after a lost or reordered part every later part of that
// message is refused too, until a part at offset 0 starts a message again:
// no message with a hole in it is ever installed or summed. Socket-free: the
// client's push receipt, the machine relay and the server partitions each
// keep one per sender (tests/part_sequence_test.cc drives it).
#ifndef GEEPS_TRANSPORT_PART_SEQUENCE_H_
#define GEEPS_TRANSPORT_PART_SEQUENCE_H_

#include <cstdint>

#include "transport/wire.h"

namespace geeps::transport {

// Row ids of a part that carries them (first and last); none: parts
// without row ids (pushes, whose rows follow from the subscription).
struct PartRows {
  bool present = false;
  uint64_t first = 0, last = 0;
};

class PartSequence {
 public:
  // What a part at offset 0 does while a message is in progress.
  enum class Restart {
    kAnyTime,  // starts the message anew (the one in progress is abandoned)
    kRefused,  // is out of sequence (the caller resets first where it allows
               // a restart: server/partition_table.cc)
  };
  enum class Verdict {
    kWhole,  // a message in one part
    kFirst,  // the first of several parts
    kMiddle,
    kLast,  // the message is complete
    kOutOfSequence,
  };
  using Rows = PartRows;

  explicit PartSequence(Restart restart = Restart::kAnyTime) : restart_(restart) {}

  // Checks the part against the message in progress and records it.
  Verdict Accept(const WireHeader& h, Rows rows = {});
  // Forgets the message in progress.
  void Reset() { *this = PartSequence(restart_); }

  // The message in progress (valid while active()).
  bool active() const { return active_; }
  uint16_t type() const { return type_; }
  int64_t clock() const { return clock_; }
  uint64_t next() const { return next_; }  // offset the next part must have
  // The last row id received (parts with row ids), else 0.
  uint64_t last_row() const { return last_row_; }

  static bool Completes(Verdict v) { return v == Verdict::kWhole || v == Verdict::kLast; }

 private:
  Restart restart_;
  bool active_ = false;
  uint16_t type_ = 0;
  int64_t clock_ = 0;
  uint64_t next_ = 0;
  uint64_t last_row_ = 0;
  bool has_rows_ = false;  // last_row_ is set
};

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_PART_SEQUENCE_H_
