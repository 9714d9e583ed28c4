// The summing state of a machine relay for one table at one partition,
// without sockets (as PartitionTable is for a shard): the members'
// subscriptions and updates come in as decoded messages (or their parts),
// the sums to send up come out, one per clock, added in rank order.
// MachineRelay (machine_relay.h) owns one per partition and table and does
// the sending; tests/relay_table_test.cc drives one with lost, repeated and
// reordered messages.
//
// Rules: a member's updates must come in clock order; one at a clock it has
// already sent is a repeat after a lost connection and is skipped; one past
// its next clock is dropped. A member subscribes once, before its first
// update (the same subscription again is a repeat; a different one, or one
// after the first sum went up, is dropped). The sum of clock c is ready
// when every member's update of c is; it goes up after the union of the
// members' subscriptions, which goes up once, with the first sum.
#ifndef GEEPS_RELAY_RELAY_TABLE_H_
#define GEEPS_RELAY_RELAY_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/part_sequence.h"
#include "transport/wire.h"

namespace geeps::relay {

// A message arriving in parts (kFlagMore / offset), its rows and payload
// collected.
struct Assembly {
  transport::PartSequence seq;  // a part at offset 0 starts anew
  uint16_t type = 0;            // of the message assembled last
  int64_t clock = 0;
  int64_t aux = 0;
  uint32_t flags = 0;  // the first part's, without kFlagMore
  std::vector<uint64_t> rows;
  std::vector<float> values;

  // Adds part `m` (rows, and a payload of `width` floats per row, when it
  // has them); false when it does not continue the message (dropped,
  // nothing changed). `*complete` on the last part.
  bool Add(const transport::DecodedMessage& m, uint32_t width, bool* complete);
};

// One clock's update of a member, or the sum of all of them.
struct Delta {
  std::vector<uint64_t> rows;  // ascending
  std::vector<float> values;   // rows.size() * width
  bool checkpoint = false;     // kFlagCheckpoint
  bool read_order = false;     // kFlagReadOrder: pushes in read order asked
};

class RelayTable {
 public:
  // `members` workers (by position: 0 leads, rank order) send rows of
  // [row_begin, row_end) of `width` floats; their first update has
  // `start_clock`.
  RelayTable(size_t members, uint32_t width, uint64_t row_begin, uint64_t row_end,
             int64_t start_clock);

  // A subscription or update (or a part of one) from member `member`
  // (worker `rank`, for messages), its table and type already checked.
  // Returns why it was dropped, or "" (taken, or a harmless repeat).
  std::string OnMember(size_t member, int rank, const transport::DecodedMessage& m);

  // The sum of the next clock if every member's update of it has come
  // (`*clock` set), else null. The first time, the union of the
  // subscriptions is made (rows_up(), covers()) and `*subscribe_first`
  // set: it must go up before the sum.
  std::shared_ptr<Delta> TakeSum(int64_t* clock, bool* subscribe_first);

  uint32_t width() const { return width_; }
  size_t members() const { return members_.size(); }
  int64_t next_up() const { return next_up_; }  // the clock of the next sum
  bool subscribed_up() const { return subscribed_up_; }
  bool subscribed(size_t member) const { return members_[member].subscribed; }
  // Member `member` has sent its update of `clock` (not yet summed).
  bool HasUpdate(size_t member, int64_t clock) const {
    return members_[member].ready.count(clock) > 0;
  }
  // The members' read rank of the table (their subscriptions' aux).
  int64_t read_rank() const { return read_rank_; }
  // After the first sum: the union of the subscriptions (ascending), and
  // per member whether it subscribed to all of it, else the positions of
  // its rows in it.
  const std::vector<uint64_t>& rows_up() const { return rows_up_; }
  bool whole(size_t member) const { return whole_[member]; }
  const std::vector<uint32_t>& pick(size_t member) const { return pick_[member]; }

 private:
  struct Member {
    int64_t next_clock = 0;          // the clock its next update must have
    std::map<int64_t, Delta> ready;  // complete updates not yet summed
    std::vector<uint64_t> subscription;
    bool subscribed = false;
    Assembly partial;  // the update or subscription arriving in parts
  };
  // A complete message of member `member`.
  std::string OnComplete(size_t member, int rank);
  void SubscribeUp();
  // The sum of clock next_up_ over every member, in rank order.
  std::shared_ptr<Delta> Sum() const;

  const uint32_t width_;
  const uint64_t row_begin_, row_end_;
  std::vector<Member> members_;
  int64_t next_up_;
  bool subscribed_up_ = false;
  int64_t read_rank_ = 0;
  std::vector<uint64_t> rows_up_;
  std::vector<std::vector<uint32_t>> pick_;
  std::vector<bool> whole_;
};

}  // namespace geeps::relay

#endif  // GEEPS_RELAY_RELAY_TABLE_H_
