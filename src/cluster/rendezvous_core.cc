#include "cluster/rendezvous_core.h"

#include <utility>

#include "transport/routing_id.h"

namespace geeps::cluster {
namespace {

// Why rank `from`'s HELLO cannot join a job of `world_size` ranks whose
// config has `fingerprint` and `channels` channels; "" when it can.
std::string Mismatch(const transport::Hello& hello, int from, int world_size, uint64_t fingerprint,
                     int channels) {
  const std::string rank = "rank " + std::to_string(from);
  if (hello.world_size != world_size) {
    return rank + " has world size " + std::to_string(hello.world_size) + ", rank 0 has " +
           std::to_string(world_size);
  }
  if (hello.fingerprint != fingerprint) {
    return rank +
           "'s config differs from rank 0's: tables, channels, or a setting every rank must "
           "share (deterministic_bsp, resend_after_connection_loss, machine aggregation, "
           "pipeline_part_bytes, max_message_bytes, checkpoint_every)";
  }
  const size_t expected =
      hello.peer.role == ProcessRole::kWorker ? 0u : static_cast<size_t>(channels);
  if (hello.peer.endpoints.size() != expected) {
    return rank + " reported " + std::to_string(hello.peer.endpoints.size()) +
           " shard endpoints, expected " + std::to_string(channels);
  }
  return "";
}

std::string TwoProcessesAs(int rank) {
  return "two processes started as rank " + std::to_string(rank) +
         " (check GEEPS_RANK or the launcher's rank variables)";
}

}  // namespace

RendezvousCore::RendezvousCore(transport::PeerInfo self, int world_size, uint64_t fingerprint,
                               int channels)
    : world_size_(world_size),
      fingerprint_(fingerprint),
      channels_(channels),
      peers_(static_cast<size_t>(world_size)),
      ids_(static_cast<size_t>(world_size)),
      joined_(static_cast<size_t>(world_size), false) {
  peers_[0] = std::move(self);
  joined_[0] = true;
}

std::string RendezvousCore::Missing() const {
  std::string list;
  int count = 0;
  for (size_t r = 0; r < joined_.size(); ++r) {
    if (joined_[r]) continue;
    list += (count++ > 0 ? ", " : "") + std::to_string(r);
  }
  if (count == 0) return "no rank";
  return (count > 1 ? "ranks " : "rank ") + list;
}

void RendezvousCore::OnMessage(const std::string& from, const std::string& text, bool one_frame,
                               Output* out) {
  if (!failure_.ok()) return;
  if (!one_frame) {
    out->drops.push_back("rendezvous frame count");
    return;
  }
  const int rank = transport::ParsePeerRoutingId(from);
  if (rank >= world_size_) {
    return Refuse(from,
                  "a process started as rank " + std::to_string(rank) + ", but the world size is " +
                      std::to_string(world_size_) + " (check GEEPS_WORLD_SIZE on every rank)",
                  out);
  }
  // A second rank 0, which found the coordinator port taken
  // (Membership::AskTheCoordinatorPort): both are told.
  if (rank == 0 && text.rfind("HELLO", 0) == 0) return Refuse(from, TwoProcessesAs(0), out);
  StatusOr<transport::Hello> hello = transport::DecodeHello(text, rank);
  if (!hello.ok()) {
    out->drops.push_back("malformed HELLO");
    return;
  }
  if (joined_[rank] && from == ids_[rank]) return;  // a repeated HELLO
  if (joined_[rank]) return Refuse(from, TwoProcessesAs(rank), out);
  Join(from, *hello, out);
}

void RendezvousCore::Join(const std::string& id, const transport::Hello& hello, Output* out) {
  const int rank = hello.peer.rank;
  joined_[rank] = true;
  ++joined_count_;
  ids_[rank] = id;
  peers_[rank] = hello.peer;
  // The ranks that joined learn that rank 0 is up and whom it still waits
  // for (a rank whose own timeout ends before rank 0's ABORT comes names
  // the missing ranks too).
  const std::string wait = "WAIT " + Missing();
  for (int r = 1; r < world_size_; ++r)
    if (joined_[r]) out->sends.push_back(Send{ids_[r], wait});
  const std::string mismatch = Mismatch(hello, rank, world_size_, fingerprint_, channels_);
  if (!mismatch.empty()) Fail(mismatch, out);
}

void RendezvousCore::Refuse(const std::string& id, const std::string& why, Output* out) {
  out->sends.push_back(Send{id, "ABORT " + why});
  Fail(why, out);
}

void RendezvousCore::Fail(const std::string& why, Output* out) {
  AbortAll(why, out);
  failure_ = InvalidArgumentError("the job could not start: " + why);
}

void RendezvousCore::AbortAll(const std::string& why, Output* out) const {
  for (int r = 1; r < world_size_; ++r)
    if (joined_[r]) out->sends.push_back(Send{ids_[r], "ABORT " + why});
}

Status RendezvousCore::Expire(std::chrono::milliseconds timeout, Output* out) {
  const std::string why =
      Missing() + " did not join within " + std::to_string(timeout.count()) + " ms";
  AbortAll(why, out);
  return DeadlineExceededError("the job could not start: " + why);
}

void RendezvousCore::Welcome(const transport::JobLayout& layout, Output* out) const {
  const std::string welcome = transport::EncodeWelcome(layout);
  for (int r = 1; r < world_size_; ++r) out->sends.push_back(Send{ids_[r], welcome});
}

}  // namespace geeps::cluster
