// The control plane of a multi-process job: the rendezvous at rank 0 (the
// coordinator) and the heartbeats that detect a lost process.
//
// Rendezvous: rank 0 binds a ROUTER at the coordinator address; every other
// rank connects a DEALER (routing id "r<rank>.<nonce>") and sends HELLO with its
// role, its shard endpoints and a fingerprint of its config. Each time a rank
// joins, rank 0 tells every rank in which ranks it still waits for (WAIT).
// When all ranks are in, rank 0 answers each with WELCOME and the whole job's
// layout; if a rank is missing at the deadline, or one differs, it answers
// ABORT with the reason, so that every rank fails with the same message. No
// rank waits longer than the timeout: one whose own deadline comes first
// names the missing ranks from rank 0's last WAIT. A rank 0 that finds the
// coordinator port taken sends HELLO as rank 0 to whoever holds it; a rank 0
// of a job answers ABORT ("two processes started as rank 0") and stops too.
//
// Heartbeats: every rank sends HB to rank 0 every heartbeat_timeout / 10;
// rank 0 answers HB to each. A rank rank 0 has not heard from for
// heartbeat_timeout is lost: rank 0 reports it locally and sends LOST to the
// others; a rank that has not heard from rank 0 for that long reports rank 0
// lost. Leaving: a rank sends BYE (again each interval until DONE); when every rank has left or is
// lost, rank 0 sends DONE, so that no shard stops while another rank still needs it.
//
// Control messages are one text frame each (they are few and small); every
// field is parsed and checked, and a frame that fails is counted and dropped.
// The links, the routing ids and the messages' text are src/transport's
// (control_link.h, routing_id.h, control_messages.h); rank 0's rules for
// the joins are RendezvousCore's (rendezvous_core.h), the heartbeats'
// HeartbeatCore's (heartbeat_core.h), which this class runs on its thread.
#ifndef GEEPS_CLUSTER_MEMBERSHIP_H_
#define GEEPS_CLUSTER_MEMBERSHIP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/bootstrap.h"
#include "cluster/heartbeat_core.h"
#include "cluster/rendezvous_core.h"
#include "common/mutex.h"
#include "geeps/process.h"
#include "geeps/status.h"
#include "transport/context.h"
#include "transport/control_link.h"
#include "transport/control_messages.h"
#include "transport/drop_log.h"

namespace geeps::transport {
class SecurityConfig;
}  // namespace geeps::transport

namespace geeps::cluster {

// The control messages' types, encoded by src/transport.
using transport::Hello;
using transport::JobLayout;
using transport::PeerInfo;
using transport::ResumeChooser;

class Membership {
 public:
  // Called on the heartbeat thread when a rank is lost.
  using LostFn = std::function<void(int rank, const Status& why)>;

  // `security` (null: none) makes the coordinator socket CURVE
  // (transport/security.h); it outlives this object.
  Membership(transport::Context* context, int rank, int world_size, HostPort coordinator,
             std::chrono::milliseconds timeout, std::chrono::milliseconds heartbeat_timeout,
             const transport::SecurityConfig* security = nullptr);
  ~Membership();  // Stop()

  // Blocks until every rank has joined (at most `timeout`). `channels` is
  // the number of endpoints every shard must report. `choose` (rank 0
  // only; may be null: no resume) picks the checkpoint clock every rank
  // restores from everyone's HELLO; its error aborts the job on every rank.
  StatusOr<JobLayout> Rendezvous(const PeerInfo& self, uint64_t fingerprint, int channels,
                                 const ResumeChooser& choose = nullptr);
  // Starts the heartbeat thread.
  Status Start(LostFn on_lost);
  // Sends BYE and blocks until every rank has left or is lost, or until
  // `deadline` passes (then kDeadlineExceeded).
  Status Leave(std::chrono::milliseconds deadline);
  // Stops the heartbeat thread. Idempotent.
  void Stop();

  int64_t frames_dropped() const { return frames_dropped_.load(); }

 private:
  StatusOr<JobLayout> RendezvousAsCoordinator(const PeerInfo& self, uint64_t fingerprint,
                                              int channels, const ResumeChooser& choose);
  StatusOr<JobLayout> RendezvousAsPeer(const PeerInfo& self, uint64_t fingerprint, int channels);
  // Rank 0 whose coordinator port is taken: asks whoever holds it, as rank
  // 0, whether it is a rank 0 of this job. kInvalidArgument naming the
  // duplicate when it answers so (it is told too); OK when nothing answers
  // within a short while (another program holds the port).
  Status AskTheCoordinatorPort(const PeerInfo& self, uint64_t fingerprint);
  void Run();
  // Hands one received message to `core` (rank 0 refuses strangers here).
  void Receive(const transport::ControlMessage& m, HeartbeatCore& core, HeartbeatCore::Output* out);
  // Sends and reports what `out` asks for, and empties it.
  void Act(HeartbeatCore::Output* out);
  void Flush(RendezvousCore::Output* out);
  void Send(const std::string& text, int to_rank = -1);  // to_rank: rank 0 only
  void Drop(const std::string& why);
  void Finish();  // Leave() may return

  transport::Context* context_;
  const int rank_;
  const int world_size_;
  const HostPort coordinator_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds heartbeat_timeout_;
  const transport::SecurityConfig* const security_;  // null: CURVE off
  // This process's routing id at the coordinator: "r<rank>.<nonce>", the
  // nonce random per process (transport::NewPeerRoutingId).
  const std::string routing_id_;
  // Rank 0: each rank's routing id, from its HELLO (written during the
  // rendezvous, read by the heartbeat thread it starts after).
  std::vector<std::string> peer_ids_;

  std::unique_ptr<transport::ControlLink> link_;  // rank 0's ROUTER or a rank's DEALER
  LostFn on_lost_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> leaving_{false};
  std::atomic<int64_t> frames_dropped_{0};
  // Every dropped control frame, the first logged (the thread's own).
  transport::DropLog drops_{"rank " + std::to_string(rank_) + " (control plane)", &frames_dropped_};

  common::Mutex mu_;
  std::condition_variable cv_;
  bool finished_ GEEPS_GUARDED_BY(mu_) = false;  // every rank has left or is lost
};

}  // namespace geeps::cluster

#endif  // GEEPS_CLUSTER_MEMBERSHIP_H_
