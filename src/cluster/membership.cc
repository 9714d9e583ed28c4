#include "cluster/membership.h"

#include <algorithm>
#include <functional>

#include "cluster/job_plan.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "transport/routing_id.h"
#include "transport/security.h"

namespace geeps::cluster {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Waits on `link` until `deadline`, handing the text of each message to
// `handle` ("" for a message that is not one frame); stops when `handle`
// returns true. Returns whether it did.
bool PollTexts(transport::ControlLink& link, SteadyClock::time_point deadline,
               std::chrono::milliseconds tick,
               const std::function<bool(const std::string&)>& handle,
               const std::function<bool()>& give_up = nullptr) {
  transport::ControlMessage m;
  while (SteadyClock::now() < deadline && link.status().ok()) {
    if (give_up && give_up()) return false;
    link.Wait(tick);
    while (link.TryReceive(&m)) {
      if (handle(m.text)) return true;
    }
  }
  return false;
}

}  // namespace

Membership::Membership(transport::Context* context, int rank, int world_size, HostPort coordinator,
                       std::chrono::milliseconds timeout,
                       std::chrono::milliseconds heartbeat_timeout,
                       const transport::SecurityConfig* security)
    : context_(context),
      rank_(rank),
      world_size_(world_size),
      coordinator_(std::move(coordinator)),
      timeout_(timeout),
      heartbeat_timeout_(heartbeat_timeout),
      security_(security),
      routing_id_(transport::NewPeerRoutingId(rank)),
      peer_ids_(static_cast<size_t>(std::max(world_size, 1))) {}

Membership::~Membership() { Stop(); }

StatusOr<JobLayout> Membership::Rendezvous(const PeerInfo& self, uint64_t fingerprint, int channels,
                                           const ResumeChooser& choose) {
  StatusOr<JobLayout> layout = rank_ == 0
                                   ? RendezvousAsCoordinator(self, fingerprint, channels, choose)
                                   : RendezvousAsPeer(self, fingerprint, channels);
  if (layout.ok() && link_ && !link_->status().ok())
    return UnavailableError("rendezvous failed: " + link_->status().message());
  return layout;
}

StatusOr<JobLayout> Membership::RendezvousAsCoordinator(const PeerInfo& self, uint64_t fingerprint,
                                                        int channels, const ResumeChooser& choose) {
  const std::string endpoint = CoordinatorEndpoint(coordinator_);
  StatusOr<std::unique_ptr<transport::ControlLink>> router =
      transport::BindControlLink(*context_, endpoint, security_);  // CURVE (null: off)
  if (!router.ok()) {
    GEEPS_RETURN_IF_ERROR(AskTheCoordinatorPort(self, fingerprint));
    return Status(router.status().code(), "rank 0 " + router.status().message() +
                                              " (is another job using that port? choose "
                                              "another with GEEPS_COORDINATOR=host:port)");
  }
  link_ = std::move(router).value();
  RendezvousCore core(self, world_size_, fingerprint, channels);
  RendezvousCore::Output out;
  const auto deadline = SteadyClock::now() + timeout_;
  transport::ControlMessage m;
  while (!core.complete()) {
    if (SteadyClock::now() >= deadline) {
      const Status expired = core.Expire(timeout_, &out);
      Flush(&out);
      return Status(expired.code(), expired.message() + transport::RejectionHint(security_));
    }
    if (!link_->status().ok())
      return UnavailableError("rendezvous failed: " + link_->status().message());
    link_->Wait(std::chrono::milliseconds(100));
    while (core.failure().ok() && link_->TryReceive(&m))
      core.OnMessage(m.from, m.text, m.one_frame, &out);
    Flush(&out);
    if (!core.failure().ok()) return core.failure();
  }
  peer_ids_ = core.peer_ids();
  JobLayout layout = transport::MakeLayout(core.peers());
  if (choose) {
    StatusOr<int64_t> clock = choose(layout);
    if (!clock.ok()) {
      core.AbortAll(clock.status().message(), &out);
      Flush(&out);
      return Status(clock.status().code(), "the job could not start: " + clock.status().message());
    }
    layout.resume_clock = *clock;
  }
  // The job token: what this job's data connections present (without
  // CURVE keys, transport/security.h); every rank learns it here.
  layout.token = transport::NewJobToken();
  // From now on only these ranks' connections get to the coordinator.
  if (security_ != nullptr)
    security_->SealControlPlane(std::vector<std::string>(peer_ids_.begin() + 1, peer_ids_.end()));
  core.Welcome(layout, &out);
  Flush(&out);
  return layout;
}

void Membership::Flush(RendezvousCore::Output* out) {
  for (const RendezvousCore::Send& send : out->sends) link_->Send(send.to, send.text);
  for (const std::string& why : out->drops) Drop(why);
  out->sends.clear();
  out->drops.clear();
}

Status Membership::AskTheCoordinatorPort(const PeerInfo& self, uint64_t fingerprint) {
  const std::string endpoint = CoordinatorEndpoint(coordinator_);
  StatusOr<std::unique_ptr<transport::ControlLink>> dealer =
      transport::ConnectControlLink(*context_, endpoint, routing_id_, security_);
  if (!dealer.ok()) return Status::OK();
  std::unique_ptr<transport::ControlLink> link = std::move(dealer).value();
  link->Send("", transport::EncodeHello(self, world_size_, fingerprint));
  // A libgeeps rank 0 answers at once (ABORT); another program never does.
  const auto deadline = SteadyClock::now() + std::min<std::chrono::milliseconds>(
                                                 timeout_, std::chrono::milliseconds(2000));
  std::string abort;
  const auto refused = [&] { return security_ != nullptr && security_->RefusedBy(endpoint); };
  if (!PollTexts(
          *link, deadline, std::chrono::milliseconds(50),
          [&](const std::string& text) {
            if (text.rfind("ABORT ", 0) == 0) abort = text.substr(6);
            return !abort.empty();
          },
          refused)) {
    if (!refused()) return Status::OK();
    // A libgeeps coordinator whose job has started refuses another rank 0.
    abort = "rank 0 is already running in this job (two processes started as rank 0?)";
  }
  return InvalidArgumentError(
      "the job could not start: another process already runs as rank 0 with the coordinator at " +
      endpoint + ", and it says: " + abort);
}

StatusOr<JobLayout> Membership::RendezvousAsPeer(const PeerInfo& self, uint64_t fingerprint,
                                                 int channels) {
  const std::string endpoint = CoordinatorEndpoint(coordinator_);
  StatusOr<std::unique_ptr<transport::ControlLink>> dealer =
      transport::ConnectControlLink(*context_, endpoint, routing_id_, security_);  // CURVE
  if (!dealer.ok()) {
    return Status(dealer.status().code(), "rendezvous failed: " + dealer.status().message());
  }
  link_ = std::move(dealer).value();
  Send(transport::EncodeHello(self, world_size_, fingerprint));
  // At most the timeout, as every wait for a peer (Config::timeout). Rank 0
  // answers WAIT at once, so that a missing rank is named here too when
  // rank 0's ABORT (which names it) has not come first.
  const auto deadline = SteadyClock::now() + timeout_;
  std::string waiting_for;  // rank 0's last WAIT: the ranks then missing
  bool answered = false;
  StatusOr<JobLayout> result = InternalError("no answer");
  const auto refused = [&] { return security_ != nullptr && security_->RefusedBy(endpoint); };
  const bool ended = PollTexts(
      *link_, deadline, std::chrono::milliseconds(100),
      [&](const std::string& text) {
        if (text.rfind("ABORT ", 0) == 0) {
          result = UnavailableError("the job could not start (rank 0 says): " + text.substr(6));
          return true;
        }
        if (text.rfind("WELCOME", 0) == 0) {
          result = transport::DecodeWelcome(text, world_size_, channels);
          return true;
        }
        if (text.rfind("WAIT ", 0) == 0) {
          answered = true;
          waiting_for = text.substr(5);
        } else {
          Drop("unexpected frame during rendezvous");
        }
        return false;
      },
      refused);
  if (ended) return result;
  if (refused()) {
    // The coordinator's port admits only the ranks that joined once all
    // have (transport/security.h): this process came after them.
    return InvalidArgumentError(
        "the job could not start: the coordinator (rank 0) at " + endpoint +
        " refused this process: its job has started, every rank has joined, and rank " +
        std::to_string(rank_) + " is already running in it (two processes started as rank " +
        std::to_string(rank_) + "? check GEEPS_RANK or the launcher's rank variables)");
  }
  const std::string within = " within " + std::to_string(timeout_.count()) + " ms";
  if (answered) {
    return DeadlineExceededError("the job could not start: " + waiting_for + " did not join" +
                                 within + " (rank " + std::to_string(rank_) +
                                 "'s wait; rank 0 is up and was waiting for them)");
  }
  return DeadlineExceededError("rank " + std::to_string(rank_) +
                               ": no answer from the coordinator (rank 0) at " + endpoint + within +
                               "; is rank 0 running, and is GEEPS_COORDINATOR right? (with "
                               "CURVE: does every rank use the same GEEPS_CURVE_KEYS?)" +
                               transport::RejectionHint(security_));
}

Status Membership::Start(LostFn on_lost) {
  if (!link_) return FailedPreconditionError("Membership::Start before Rendezvous");
  on_lost_ = std::move(on_lost);
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

Status Membership::Leave(std::chrono::milliseconds deadline) {
  if (!thread_.joinable()) return Status::OK();
  leaving_.store(true);
  link_->Wake();
  common::MutexLock lock(&mu_);
  if (!lock.WaitFor(cv_, deadline, [&]() GEEPS_REQUIRES(mu_) { return finished_; }))
    return DeadlineExceededError("not every process left the job within " +
                                 std::to_string(deadline.count()) + " ms");
  return Status::OK();
}

void Membership::Stop() {
  stop_.store(true);
  if (thread_.joinable()) {
    link_->Wake();
    thread_.join();
  }
  link_.reset();
}

void Membership::Finish() {
  {
    common::MutexLock lock(&mu_);
    finished_ = true;
  }
  cv_.notify_all();
}

void Membership::Drop(const std::string& why) { drops_.Drop(why); }

void Membership::Send(const std::string& text, int to_rank) {
  link_->Send(to_rank >= 0 ? peer_ids_[to_rank] : "", text);
}

void Membership::Run() {
  HeartbeatCore core(rank_, world_size_, heartbeat_timeout_, SteadyClock::now());
  HeartbeatCore::Output out;
  transport::ControlMessage m;
  while (!stop_.load() && !core.finished()) {
    link_->Wait(core.interval());
    while (!core.finished() && link_->TryReceive(&m)) Receive(m, core, &out);
    if (!core.finished()) core.OnTick(SteadyClock::now(), leaving_.load(), &out);
    Act(&out);
    if (!link_->status().ok()) {
      GEEPS_LOG(Error) << "rank " << rank_ << ": heartbeat thread: " << link_->status().message();
      break;
    }
  }
  Finish();
}

void Membership::Receive(const transport::ControlMessage& m, HeartbeatCore& core,
                         HeartbeatCore::Output* out) {
  if (!m.one_frame) return Drop("control message of more than one frame");
  if (rank_ != 0) return core.OnMessage(0, m.text, SteadyClock::now(), out);
  const int from = transport::ParsePeerRoutingId(m.from);
  const bool known = from > 0 && from < world_size_ && m.from == peer_ids_[from];
  if (!known && from >= 0 && from < world_size_ && m.text.rfind("HELLO", 0) == 0) {
    // A process that starts as a rank of the running job: told at once,
    // and this process says so (for rank 0, it is the one named).
    const std::string why = "rank " + std::to_string(from) +
                            " is already running in this job (two processes started as rank " +
                            std::to_string(from) + "?)";
    link_->Send(m.from, "ABORT " + why);
    GEEPS_LOG(Error) << "a process that started as rank " << from << " was refused: " << why;
    return;
  }
  if (!known) return Drop("control frame from an unknown sender");
  core.OnMessage(from, m.text, SteadyClock::now(), out);
}

void Membership::Act(HeartbeatCore::Output* out) {
  for (const HeartbeatCore::Send& send : out->sends) Send(send.text, rank_ == 0 ? send.to : -1);
  for (const std::string& why : out->drops) Drop(why);
  for (const HeartbeatCore::Lost& lost : out->lost) {
    GEEPS_LOG(Error) << (rank_ == 0 ? "" : "rank " + std::to_string(rank_) + ": ")
                     << lost.why.message();
    if (on_lost_) on_lost_(lost.rank, lost.why);
  }
  out->sends.clear();
  out->drops.clear();
  out->lost.clear();
}

}  // namespace geeps::cluster
