// The rendezvous at rank 0 (the coordinator), without sockets or a clock:
// what rank 0 does with each HELLO until every rank has joined, or why the
// job cannot start. Membership::Rendezvous feeds it what its control link
// receives and sends what it says; rendezvous_core_test drives it over an
// in-memory network that drops, duplicates and reorders.
//
// The rules (membership.h tells the whole control plane):
// - A HELLO from rank r (its routing id "r<r>.<nonce>" names the rank)
//   joins it once; the same HELLO again from the same id changes nothing.
//   After each join every rank in hears WAIT and the ranks still missing.
// - The job cannot start, and every rank in hears ABORT with the reason,
//   when a HELLO comes from a rank beyond the world size, from a second
//   rank 0, from a second process of a rank already in, or when a rank's
//   world size, config fingerprint or shard endpoint count differs from
//   rank 0's. The refused process hears it too.
// - A message that is not one frame, or a HELLO that does not decode, is
//   dropped (Output::drops) and changes nothing.
// - When the caller's deadline passes first, Expire tells every rank in
//   which ranks did not join.
#ifndef GEEPS_CLUSTER_RENDEZVOUS_CORE_H_
#define GEEPS_CLUSTER_RENDEZVOUS_CORE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "geeps/status.h"
#include "transport/control_messages.h"

namespace geeps::cluster {

class RendezvousCore {
 public:
  struct Send {
    std::string to;  // a routing id
    std::string text;
  };
  struct Output {
    std::vector<Send> sends;
    std::vector<std::string> drops;  // why each dropped message was dropped
  };

  // Rank 0's own HELLO, as it would send it: `self`, the job's
  // `world_size`, its config `fingerprint` and `channels` per shard.
  RendezvousCore(transport::PeerInfo self, int world_size, uint64_t fingerprint, int channels);

  // A message from the connection with routing id `from`; `one_frame`
  // false for a message of more frames (then `text` is not looked at).
  // Nothing changes once the job has failed.
  void OnMessage(const std::string& from, const std::string& text, bool one_frame, Output* out);
  // The deadline passed before every rank joined: every rank in hears
  // ABORT, and the result is kDeadlineExceeded naming the missing ranks.
  Status Expire(std::chrono::milliseconds timeout, Output* out);
  // Every rank in hears ABORT `why` (rank 0 gave up after the joins).
  void AbortAll(const std::string& why, Output* out) const;
  // After complete(): every rank hears WELCOME with `layout`.
  void Welcome(const transport::JobLayout& layout, Output* out) const;

  bool complete() const { return joined_count_ == world_size_ && failure_.ok(); }
  // Why the job cannot start (OK while it still may): kInvalidArgument.
  const Status& failure() const { return failure_; }
  // The HELLOs' peers by rank and their routing ids ([0]: rank 0's own,
  // id "").
  const std::vector<transport::PeerInfo>& peers() const { return peers_; }
  const std::vector<std::string>& peer_ids() const { return ids_; }
  // "rank 2" or "ranks 2, 3": the ranks not yet joined ("no rank").
  std::string Missing() const;

 private:
  void Join(const std::string& id, const transport::Hello& hello, Output* out);
  void Refuse(const std::string& id, const std::string& why, Output* out);
  void Fail(const std::string& why, Output* out);

  const int world_size_;
  const uint64_t fingerprint_;
  const int channels_;
  std::vector<transport::PeerInfo> peers_;
  std::vector<std::string> ids_;
  std::vector<bool> joined_;
  int joined_count_ = 1;  // rank 0
  Status failure_;
};

}  // namespace geeps::cluster

#endif  // GEEPS_CLUSTER_RENDEZVOUS_CORE_H_
