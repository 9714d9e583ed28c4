#include "transport/sockets.h"

#include <zmq.hpp>

#include "transport/control_messages.h"
#include "transport/routing_id.h"
#include "transport/security.h"
#include "transport/socket_util.h"

namespace geeps::transport {
namespace {

// How long a closing socket keeps trying to deliver what is still queued (a
// last update, a BYE): long enough for a live peer, short enough that a
// dead one does not hold up shutdown. ZeroMQ's default (-1) would wait
// forever in zmq_ctx_term.
constexpr int kLingerMs = 1000;

static_assert(kMaxControlText == static_cast<size_t>(kControlFrameLimit),
              "the control sockets take the largest control message");

bool IsInproc(const std::string& endpoint) { return endpoint.rfind("inproc://", 0) == 0; }

Status SocketError(const std::string& what, const zmq::error_t& e) {
  return UnavailableError(what + ": " + e.what());
}

// No high-water marks on the data plane: its volume is bounded by the clock
// protocol (a worker runs at most `staleness` clocks ahead), and a full queue
// would block a sender holding the I/O lock or, on a ROUTER, drop messages
// (one part of a message in parts) without a word.
void UnlimitedQueues(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
}

}  // namespace

StatusOr<SocketPtr> BindShardRouter(zmq::context_t& context, const std::string& endpoint,
                                    int64_t max_frame_bytes, const SecurityConfig* security,
                                    std::string* actual) {
  try {
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
    // A peer that announces a larger frame is disconnected before anything
    // is allocated for it.
    socket->set(zmq::sockopt::maxmsgsize, max_frame_bytes);
    UnlimitedQueues(*socket);
    // A push to a worker that is not connected fails (EHOSTUNREACH) instead
    // of vanishing, so the partition can count it and resend later.
    socket->set(zmq::sockopt::router_mandatory, 1);
    // A worker's routing id held by another connection (a stale one of the
    // same worker, or a stranger that claimed it first) passes to the
    // newest: otherwise ZeroMQ drops every message of the real worker.
    socket->set(zmq::sockopt::router_handover, 1);
    socket->set(zmq::sockopt::linger, kLingerMs);
    // Only the job's members get in: CURVE, or the job token (null: inproc).
    if (!IsInproc(endpoint)) ConfigureSecureServer(*socket, security, Plane::kData);
    socket->bind(endpoint);
    if (actual) *actual = socket->get(zmq::sockopt::last_endpoint);
    return socket;
  } catch (const zmq::error_t& e) {
    return SocketError("shard: cannot bind " + endpoint, e);
  }
}

StatusOr<SocketPtr> ConnectWorkerDealer(zmq::context_t& context, const std::string& endpoint,
                                        int rank, int64_t max_frame_bytes,
                                        const SecurityConfig* security) {
  try {
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
    // The partition tells workers apart by it (routing_id.h), and a
    // reconnecting worker takes its old place (router_handover above).
    socket->set(zmq::sockopt::routing_id, WorkerRoutingId(rank));
    UnlimitedQueues(*socket);
    socket->set(zmq::sockopt::linger, kLingerMs);
    // As on the partition's side: pushes are bounded by the job's config.
    socket->set(zmq::sockopt::maxmsgsize, max_frame_bytes);
    if (!IsInproc(endpoint)) ConfigureSecureClient(*socket, security, Plane::kData);
    socket->connect(endpoint);
    return socket;
  } catch (const zmq::error_t& e) {
    return SocketError("worker " + std::to_string(rank) + ": cannot connect to " + endpoint, e);
  }
}

StatusOr<SocketPtr> BindControlRouter(zmq::context_t& context, const std::string& endpoint,
                                      const SecurityConfig* security) {
  try {
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
    // An answer (WELCOME, ABORT, LOST) to a rank that is gone fails instead
    // of vanishing; the sender ignores it (the heartbeats report the rank).
    socket->set(zmq::sockopt::router_mandatory, 1);
    // The port takes frames from anyone who can connect: nothing larger than
    // the largest legal control message is accepted.
    socket->set(zmq::sockopt::maxmsgsize, kControlFrameLimit);
    // A rank's id (rank and process nonce) held by an earlier connection of
    // the same process that has not yet been seen to end passes to the
    // newest: otherwise ZeroMQ ignores the reconnect and every message on it.
    socket->set(zmq::sockopt::router_handover, 1);
    socket->set(zmq::sockopt::linger, kLingerMs);
    // CURVE; without keys, the rendezvous admits anyone who names a rank
    // and then only the ranks that joined (security.h).
    if (!IsInproc(endpoint)) ConfigureSecureServer(*socket, security, Plane::kControl);
    socket->bind(endpoint);
    return socket;
  } catch (const zmq::error_t& e) {
    return SocketError("cannot bind the coordinator at " + endpoint, e);
  }
}

StatusOr<SocketPtr> ConnectControlDealer(zmq::context_t& context, const std::string& endpoint,
                                         const std::string& routing_id,
                                         const SecurityConfig* security) {
  try {
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
    // The coordinator learns the rank, and tells two claimants apart, by it.
    socket->set(zmq::sockopt::routing_id, routing_id);
    // The coordinator's answers are bounded like its inbox.
    socket->set(zmq::sockopt::maxmsgsize, kControlFrameLimit);
    socket->set(zmq::sockopt::linger, kLingerMs);
    if (!IsInproc(endpoint)) ConfigureSecureClient(*socket, security, Plane::kControl);
    socket->connect(endpoint);
    return socket;
  } catch (const zmq::error_t& e) {
    return SocketError("cannot connect to the coordinator at " + endpoint, e);
  }
}

StatusOr<SocketPtr> BindWakePull(zmq::context_t& context, const std::string& endpoint) {
  try {
    // ZeroMQ's defaults: it only receives, so there is nothing to linger on.
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pull);
    socket->bind(endpoint);
    return socket;
  } catch (const zmq::error_t& e) {
    return SocketError("cannot bind the wake-up socket " + endpoint, e);
  }
}

StatusOr<SocketPtr> ConnectWakePush(zmq::context_t& context, const std::string& endpoint) {
  try {
    auto socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::push);
    // A wake-up that cannot be delivered at once is dropped: the woken
    // thread's poll timeout covers it, and closing never waits.
    socket->set(zmq::sockopt::linger, 0);
    socket->connect(endpoint);
    return socket;
  } catch (const zmq::error_t& e) {
    return SocketError("cannot connect to the wake-up socket " + endpoint, e);
  }
}

StatusOr<SocketPtr> NewDisconnectMonitor(zmq::context_t& context, zmq::socket_t& socket,
                                         const std::string& endpoint) {
  try {
    return MonitorDisconnects(context, socket);
  } catch (const zmq::error_t& e) {
    return SocketError("cannot monitor the connections of " + endpoint, e);
  }
}

int SocketFd(zmq::socket_t& socket) {
  try {
    return static_cast<int>(socket.get(zmq::sockopt::fd));
  } catch (const zmq::error_t&) {
    return -1;
  }
}

bool HasInput(zmq::socket_t& socket) {
  return (socket.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
}

}  // namespace geeps::transport
