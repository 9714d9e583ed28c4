// How a worker's channel receives the pushes of one table from one server
// partition, whole or in parts, decided without sockets, device memory or
// locks: which part goes where, which is dropped and why, and when a push
// is complete. CommChannel::HandlePush keeps one per (shard, table), asks
// it about each push message, and does the copies into device memory and
// the locking; tests/push_receipt_test.cc drives it with lost, repeated,
// reordered and stale parts.
//
// The rules:
// - A message at offset 0 starts a push (whatever was in progress is
//   abandoned). One in parts (kFlagMore) first asks the caller, holding the
//   table's lock, whether it is newer than the slice's push (Start): a
//   stale one is counted and dropped; else its parts go straight into the
//   cache when nothing must be added to them (no read-my-writes) and no
//   in-place read of the table is open (the caller then marks the slice
//   `installing`, so no Read sees the mix), or are collected here.
// - Every part must follow the previous one (transport::PartSequence); one
//   out of sequence is dropped and changes nothing, and a push whose parts
//   were cut off stays incomplete (a slice marked installing stays so: the
//   next whole push clears it).
// - The last part must end at the slice's last row.
// - A push in one message is installed from the message (the caller checks
//   it is newer first).
#ifndef GEEPS_CLIENT_PUSH_RECEIPT_H_
#define GEEPS_CLIENT_PUSH_RECEIPT_H_

#include <cstdint>
#include <vector>

#include "transport/part_sequence.h"
#include "transport/wire.h"

namespace geeps::client {

class PushReceipt {
 public:
  enum class Step {
    kDrop,          // why(): the message does not fit; nothing changed
    kWriteToCache,  // this part goes into the cache at its offset
    kCollected,     // this part was copied into rows()
    kWhole,         // a push in one message: install it from the message
  };
  struct Verdict {
    Step step;
    const char* why = "";    // kDrop
    bool completes = false;  // kWriteToCache, kCollected: the push is whole now
  };

  // A message at offset 0 resets the receipt; returns whether it starts a
  // push in parts, which the caller must then Start (or drop as stale).
  bool Starts(const transport::WireHeader& h);
  // The push in parts starts; `into_cache`: its parts go straight into the
  // cache (else they are collected).
  void Start(bool into_cache) { in_cache_ = into_cache; }
  // The message (after Starts, and Start where it said so): `payload` holds
  // its row_count rows of `width` floats; the slice has `cache_count` rows.
  Verdict Accept(const transport::WireHeader& h, uint32_t cache_count, uint32_t width,
                 const float* payload);

  bool in_cache() const { return in_cache_; }
  // The push collected so far (kCollected), cache_count * width floats.
  std::vector<float>& rows() { return rows_; }

 private:
  transport::PartSequence seq_;
  bool in_cache_ = false;
  std::vector<float> rows_;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_PUSH_RECEIPT_H_
