#include "cluster/membership.h"

#include <algorithm>
#include <functional>

#include "common/logging.h"
#include "common/mutex.h"
#include "transport/routing_id.h"
#include "transport/security.h"
#include "transport/socket_util.h"
#include "transport/sockets.h"

namespace geeps::cluster {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

constexpr const char* kTwoRankZeros =
    "two processes started as rank 0 (check GEEPS_RANK or the launcher's rank variables)";

// "rank 2" or "ranks 2, 3": the ranks not yet joined.
std::string MissingRanks(const std::vector<bool>& joined) {
  std::vector<int> missing;
  for (size_t r = 0; r < joined.size(); ++r)
    if (!joined[r]) missing.push_back(static_cast<int>(r));
  if (missing.empty()) return "no rank";
  return "rank" + std::string(missing.size() > 1 ? "s " : " ") + Join(missing);
}

// Polls `socket` until `deadline`, handing the text of each message to
// `handle` ("" for a message that is not one frame); stops when `handle`
// returns true. Returns whether it did.
bool PollTexts(zmq::socket_t& socket, zmq::context_t* context, SteadyClock::time_point deadline,
               std::chrono::milliseconds tick,
               const std::function<bool(const std::string&)>& handle,
               const std::function<bool()>& give_up = nullptr) {
  std::vector<zmq::message_t> frames;
  while (SteadyClock::now() < deadline) {
    if (give_up && give_up()) return false;
    zmq::pollitem_t item = {socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, tick);
    while (transport::TryRecvMultipart(socket, context, &frames)) {
      if (handle(frames.size() == 1 ? frames[0].to_string() : "")) return true;
    }
  }
  return false;
}

}  // namespace

Membership::Membership(zmq::context_t* context, int rank, int world_size, HostPort coordinator,
                       std::chrono::milliseconds timeout,
                       std::chrono::milliseconds heartbeat_timeout,
                       const transport::SecurityConfig* security)
    : context_(context),
      rank_(rank),
      world_size_(world_size),
      coordinator_(std::move(coordinator)),
      timeout_(timeout),
      heartbeat_timeout_(heartbeat_timeout),
      control_endpoint_("inproc://geeps-membership-" +
                        std::to_string(reinterpret_cast<uintptr_t>(this))),
      security_(security),
      routing_id_(transport::NewPeerRoutingId(rank)),
      peer_ids_(static_cast<size_t>(std::max(world_size, 1))) {}

Membership::~Membership() { Stop(); }

StatusOr<JobLayout> Membership::Rendezvous(const PeerInfo& self, uint64_t fingerprint, int channels,
                                           const ResumeChooser& choose) {
  try {
    return rank_ == 0 ? RendezvousAsCoordinator(self, fingerprint, channels, choose)
                      : RendezvousAsPeer(self, fingerprint, channels);
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string("rendezvous failed: ") + e.what());
  }
}

StatusOr<JobLayout> Membership::RendezvousAsCoordinator(const PeerInfo& self, uint64_t fingerprint,
                                                        int channels, const ResumeChooser& choose) {
  const std::string endpoint = "tcp://" + FormatHostPort(coordinator_);
  StatusOr<transport::SocketPtr> router =
      transport::BindControlRouter(*context_, endpoint, security_);  // CURVE (null: off)
  if (!router.ok()) {
    GEEPS_RETURN_IF_ERROR(AskTheCoordinatorPort(self, fingerprint));
    return Status(router.status().code(), "rank 0 " + router.status().message() +
                                              " (is another job using that port? choose "
                                              "another with GEEPS_COORDINATOR=host:port)");
  }
  socket_ = std::move(router).value();
  std::vector<PeerInfo> peers(world_size_);
  std::vector<bool> joined(world_size_, false);
  peers[0] = self;
  joined[0] = true;
  std::string failure;
  const auto deadline = SteadyClock::now() + timeout_;
  std::vector<zmq::message_t> frames;
  auto abort_all = [&](const std::string& why) {
    for (int r = 1; r < world_size_; ++r) {
      if (joined[r]) Send("ABORT " + why, r);
    }
  };
  // A process that conflicts with the job: it, and everyone who joined, is
  // told why at once.
  auto refuse = [&](const std::string& routing_id, const std::string& why) {
    SendTo(routing_id, "ABORT " + why);
    abort_all(why);
    return InvalidArgumentError("the job could not start: " + why);
  };
  while (std::count(joined.begin(), joined.end(), true) < world_size_) {
    if (SteadyClock::now() >= deadline) {
      const std::string why =
          MissingRanks(joined) + " did not join within " + std::to_string(timeout_.count()) + " ms";
      abort_all(why);
      return DeadlineExceededError("the job could not start: " + why +
                                   transport::RejectionHint(security_));
    }
    zmq::pollitem_t item = {socket_->handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(100));
    while (transport::TryRecvMultipart(*socket_, context_, &frames)) {
      if (frames.size() != 2) {
        Drop("rendezvous frame count");
        continue;
      }
      const int from = transport::ParsePeerRoutingId(frames[0].to_string());
      const std::string id = frames[0].to_string();
      if (from >= world_size_)
        return refuse(id, "a process started as rank " + std::to_string(from) +
                              ", but the world size is " + std::to_string(world_size_) +
                              " (check GEEPS_WORLD_SIZE on every rank)");
      // A second rank 0, which found the coordinator port taken
      // (AskTheCoordinatorPort): both are told.
      if (from == 0 && frames[1].to_string().rfind("HELLO", 0) == 0)
        return refuse(id, kTwoRankZeros);
      StatusOr<Hello> hello = transport::DecodeHello(frames[1].to_string(), from);
      if (!hello.ok()) {
        Drop("malformed HELLO");
        continue;
      }
      const int world = hello->world_size;
      const uint64_t fp = hello->fingerprint;
      const PeerInfo& peer = hello->peer;
      if (joined[from] && id == peer_ids_[from]) continue;  // a repeated HELLO
      if (joined[from])
        return refuse(id, "two processes started as rank " + std::to_string(from) +
                              " (check GEEPS_RANK or the launcher's rank variables)");
      joined[from] = true;
      peer_ids_[from] = id;
      peers[from] = peer;
      // The ranks that joined learn that rank 0 is up and whom it still waits
      // for (a rank whose own timeout ends before rank 0's ABORT comes names
      // the missing ranks too).
      const std::string wait = "WAIT " + MissingRanks(joined);
      for (int r = 1; r < world_size_; ++r)
        if (joined[r]) Send(wait, r);
      if (world != world_size_) {
        failure = "rank " + std::to_string(from) + " has world size " + std::to_string(world) +
                  ", rank 0 has " + std::to_string(world_size_);
      } else if (fp != fingerprint) {
        failure = "rank " + std::to_string(from) +
                  "'s config differs from rank 0's: tables, channels, or a setting every rank must "
                  "share (deterministic_bsp, resend_after_connection_loss, machine aggregation, "
                  "pipeline_part_bytes, max_message_bytes, checkpoint_every)";
      } else if (peer.endpoints.size() !=
                 (peer.role == ProcessRole::kWorker ? 0u : static_cast<size_t>(channels))) {
        failure = "rank " + std::to_string(from) + " reported " +
                  std::to_string(peer.endpoints.size()) + " shard endpoints, expected " +
                  std::to_string(channels);
      }
      if (!failure.empty()) {
        abort_all(failure);
        return InvalidArgumentError("the job could not start: " + failure);
      }
    }
  }
  JobLayout layout = transport::MakeLayout(std::move(peers));
  if (choose) {
    StatusOr<int64_t> clock = choose(layout);
    if (!clock.ok()) {
      abort_all(clock.status().message());
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
  const std::string welcome = transport::EncodeWelcome(layout);
  for (int r = 1; r < world_size_; ++r) Send(welcome, r);
  return layout;
}

Status Membership::AskTheCoordinatorPort(const PeerInfo& self, uint64_t fingerprint) {
  const std::string endpoint = "tcp://" + FormatHostPort(coordinator_);
  StatusOr<transport::SocketPtr> dealer =
      transport::ConnectControlDealer(*context_, endpoint, routing_id_, security_);
  if (!dealer.ok()) return Status::OK();
  transport::SocketPtr socket = std::move(dealer).value();
  try {
    socket->send(zmq::buffer(transport::EncodeHello(self, world_size_, fingerprint)),
                 zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    return Status::OK();
  }
  // A libgeeps rank 0 answers at once (ABORT); another program never does.
  const auto deadline = SteadyClock::now() + std::min<std::chrono::milliseconds>(
                                                 timeout_, std::chrono::milliseconds(2000));
  std::string abort;
  const auto refused = [&] { return security_ != nullptr && security_->RefusedBy(endpoint); };
  if (!PollTexts(
          *socket, context_, deadline, std::chrono::milliseconds(50),
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
  const std::string endpoint = "tcp://" + FormatHostPort(coordinator_);
  StatusOr<transport::SocketPtr> dealer =
      transport::ConnectControlDealer(*context_, endpoint, routing_id_, security_);  // CURVE
  if (!dealer.ok()) {
    return Status(dealer.status().code(), "rendezvous failed: " + dealer.status().message());
  }
  socket_ = std::move(dealer).value();
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
      *socket_, context_, deadline, std::chrono::milliseconds(100),
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
  if (!socket_) return FailedPreconditionError("Membership::Start before Rendezvous");
  on_lost_ = std::move(on_lost);
  StatusOr<transport::SocketPtr> control = transport::BindWakePull(*context_, control_endpoint_);
  if (!control.ok()) {
    return Status(control.status().code(),
                  "membership control socket: " + control.status().message());
  }
  control_ = std::move(control).value();
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

Status Membership::Leave(std::chrono::milliseconds deadline) {
  if (!thread_.joinable()) return Status::OK();
  leaving_.store(true);
  transport::WakeUp(context_, control_endpoint_);
  common::MutexLock lock(&mu_);
  if (!lock.WaitFor(cv_, deadline, [&]() GEEPS_REQUIRES(mu_) { return finished_; }))
    return DeadlineExceededError("not every process left the job within " +
                                 std::to_string(deadline.count()) + " ms");
  return Status::OK();
}

void Membership::Stop() {
  stop_.store(true);
  if (thread_.joinable()) {
    transport::WakeUp(context_, control_endpoint_);
    thread_.join();
  }
  socket_.reset();
  control_.reset();
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
  if (to_rank >= 0) return SendTo(peer_ids_[to_rank], text);
  try {
    socket_->send(zmq::buffer(text), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // A peer that is gone: the heartbeats report it.
  }
}

void Membership::SendTo(const std::string& routing_id, const std::string& text) {
  try {
    socket_->send(zmq::buffer(routing_id), zmq::send_flags::sndmore);
    socket_->send(zmq::buffer(text), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // A peer that is gone: the heartbeats report it.
  }
}

void Membership::Run() {
  try {
    if (rank_ == 0) {
      RunCoordinator();
    } else {
      RunPeer();
    }
  } catch (const zmq::error_t& e) {
    GEEPS_LOG(Error) << "rank " << rank_ << ": heartbeat thread: " << e.what();
  }
  Finish();
}

void Membership::WaitForInput(std::chrono::milliseconds limit) {
  zmq::pollitem_t items[2] = {{socket_->handle(), 0, ZMQ_POLLIN, 0},
                              {control_->handle(), 0, ZMQ_POLLIN, 0}};
  zmq::poll(items, 2, limit);
  if (items[1].revents & ZMQ_POLLIN) {
    zmq::message_t m;
    while (control_->recv(m, zmq::recv_flags::dontwait)) {
    }
  }
}

void Membership::RunCoordinator() {
  const auto interval = heartbeat_timeout_ / 10;
  std::vector<SteadyClock::time_point> last_seen(world_size_, SteadyClock::now());
  std::vector<bool> left(world_size_, false), lost(world_size_, false);
  auto next_beat = SteadyClock::now();
  std::vector<zmq::message_t> frames;
  while (!stop_.load()) {
    WaitForInput(interval);
    while (transport::TryRecvMultipart(*socket_, context_, &frames)) {
      const int from =
          frames.size() == 2 ? transport::ParsePeerRoutingId(frames[0].to_string()) : -1;
      const std::string id = frames.size() == 2 ? frames[0].to_string() : "";
      const std::string text = frames.size() == 2 ? frames[1].to_string() : "";
      const bool known = from > 0 && from < world_size_ && id == peer_ids_[from];
      if (!known && from >= 0 && from < world_size_ && text.rfind("HELLO", 0) == 0) {
        // A process that starts as a rank of the running job: told at once,
        // and this process says so (for rank 0, it is the one named).
        const std::string why = "rank " + std::to_string(from) +
                                " is already running in this job (two processes started as rank " +
                                std::to_string(from) + "?)";
        SendTo(id, "ABORT " + why);
        GEEPS_LOG(Error) << "a process that started as rank " << from << " was refused: " << why;
        continue;
      }
      if (!known) {
        Drop("control frame from an unknown sender");
        continue;
      }
      if (text == "HB") {
        last_seen[from] = SteadyClock::now();
      } else if (text == "BYE") {
        last_seen[from] = SteadyClock::now();
        left[from] = true;
      } else if (text.rfind("HELLO", 0) != 0) {  // a late duplicate HELLO is harmless
        Drop("unknown control message");
      }
    }
    const auto now = SteadyClock::now();
    for (int r = 1; r < world_size_; ++r) {
      if (lost[r] || left[r] || now - last_seen[r] <= heartbeat_timeout_) continue;
      lost[r] = true;
      const Status why = UnavailableError(
          "rank " + std::to_string(r) + " is lost: no heartbeat for " +
          std::to_string(heartbeat_timeout_.count()) + " ms (the process died or hangs)");
      GEEPS_LOG(Error) << why.message();
      for (int o = 1; o < world_size_; ++o)
        if (!lost[o] && !left[o]) Send("LOST " + std::to_string(r), o);
      if (on_lost_) on_lost_(r, why);
    }
    if (leaving_.load()) {
      left[0] = true;
      bool all = true;
      for (int r = 0; r < world_size_; ++r) all = all && (left[r] || lost[r]);
      if (all) {
        for (int r = 1; r < world_size_; ++r)
          if (left[r]) Send("DONE", r);
        return;
      }
    }
    if (now >= next_beat) {
      next_beat = now + interval;
      for (int r = 1; r < world_size_; ++r)
        if (!lost[r]) Send("HB", r);
    }
  }
}

void Membership::RunPeer() {
  const auto interval = heartbeat_timeout_ / 10;
  auto last_seen = SteadyClock::now();
  auto next_beat = SteadyClock::now();
  bool said_bye = false;
  std::vector<zmq::message_t> frames;
  while (!stop_.load()) {
    WaitForInput(interval);
    while (transport::TryRecvMultipart(*socket_, context_, &frames)) {
      const std::string text = frames.size() == 1 ? frames[0].to_string() : "";
      if (text == "HB") {
        last_seen = SteadyClock::now();
      } else if (text == "DONE") {
        return;
      } else if (text.rfind("LOST ", 0) == 0) {
        last_seen = SteadyClock::now();
        const int lost = transport::ParseLost(text, world_size_);
        if (lost < 0) {
          Drop("malformed LOST");
          continue;
        }
        const Status why = UnavailableError("rank " + std::to_string(lost) +
                                            " is lost (reported by rank 0): no heartbeat for " +
                                            std::to_string(heartbeat_timeout_.count()) + " ms");
        GEEPS_LOG(Error) << "rank " << rank_ << ": " << why.message();
        if (on_lost_) on_lost_(lost, why);
      } else {
        Drop("unknown control message");
      }
    }
    const auto now = SteadyClock::now();
    if (now - last_seen > heartbeat_timeout_) {
      const Status why = UnavailableError("rank 0 (the coordinator) is lost: no heartbeat for " +
                                          std::to_string(heartbeat_timeout_.count()) +
                                          " ms (the process died or hangs)");
      GEEPS_LOG(Error) << "rank " << rank_ << ": " << why.message();
      if (on_lost_) on_lost_(0, why);
      return;
    }
    if (leaving_.load() && !said_bye) {
      said_bye = true;
      Send("BYE");
    }
    if (now >= next_beat) {
      next_beat = now + interval;
      Send("HB");
    }
  }
}

}  // namespace geeps::cluster
