// The project's ZeroMQ sockets, one factory per role. Every option a socket
// of the project carries is set here, in the factory of its role, with the
// reason beside it; client, server and cluster code gets its sockets from
// these calls and reads their state through the accessors below, never
// through a socket option of its own.
//
// The factories never throw: a zmq::error_t becomes a Status naming the role,
// the endpoint and the cause (kUnavailable). A factory that binds or
// connects a tcp:// or ipc:// socket secures it first when `security` is
// set (security.h): CURVE on both planes, or, without keys, the job token on
// the data plane; inproc:// sockets stay plain.
#ifndef GEEPS_TRANSPORT_SOCKETS_H_
#define GEEPS_TRANSPORT_SOCKETS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "geeps/status.h"
#include "transport/context.h"

namespace zmq {
class context_t;
class message_t;
class socket_t;
}  // namespace zmq

namespace geeps::transport {

class SecurityConfig;

using SocketPtr = std::unique_ptr<zmq::socket_t>;

// ---- Data plane -----------------------------------------------------------
// A shard partition's ROUTER, bound at `endpoint` (which may ask for any
// port, "tcp://host:*"; the bound address goes to `*actual` if given).
// `max_frame_bytes` (LargestFrameBytes of the job's config) becomes
// ZMQ_MAXMSGSIZE: a larger frame disconnects its sender. A port in use is
// kUnavailable "shard: cannot bind <endpoint>: <cause>".
StatusOr<SocketPtr> BindShardRouter(zmq::context_t& context, const std::string& endpoint,
                                    int64_t max_frame_bytes,
                                    const SecurityConfig* security = nullptr,
                                    std::string* actual = nullptr);

// Worker `rank`'s DEALER to the shard partition at `endpoint`, connected;
// its routing id is WorkerRoutingId(rank) (routing_id.h).
StatusOr<SocketPtr> ConnectWorkerDealer(zmq::context_t& context, const std::string& endpoint,
                                        int rank, int64_t max_frame_bytes,
                                        const SecurityConfig* security = nullptr);

// ---- Control plane (membership) -------------------------------------------
// The coordinator's (rank 0's) ROUTER, bound at `endpoint`. A port in use is
// kUnavailable "cannot bind the coordinator at <endpoint>: <cause>".
StatusOr<SocketPtr> BindControlRouter(zmq::context_t& context, const std::string& endpoint,
                                      const SecurityConfig* security = nullptr);

// A rank's DEALER to the coordinator at `endpoint`, connected, with
// `routing_id` (NewPeerRoutingId, routing_id.h).
StatusOr<SocketPtr> ConnectControlDealer(zmq::context_t& context, const std::string& endpoint,
                                         const std::string& routing_id,
                                         const SecurityConfig* security = nullptr);

// ---- Wake-ups -------------------------------------------------------------
// A PULL socket bound at `endpoint` (inproc://) that a thread polls beside
// its real sockets; WakeUp(context, endpoint) (socket_util.h) sends it a
// byte through a PUSH made by ConnectWakePush.
StatusOr<SocketPtr> BindWakePull(zmq::context_t& context, const std::string& endpoint);
StatusOr<SocketPtr> ConnectWakePush(zmq::context_t& context, const std::string& endpoint);

// ---- Monitors -------------------------------------------------------------
// A PAIR socket receiving `socket`'s ZMQ_EVENT_DISCONNECTED events (see
// MonitorDisconnects in socket_util.h); `endpoint` (the monitored socket's)
// only names it in an error. StopMonitor(socket, monitor) before closing
// `socket`.
StatusOr<SocketPtr> NewDisconnectMonitor(zmq::context_t& context, zmq::socket_t& socket,
                                         const std::string& endpoint);

// ---- Accessors --------------------------------------------------------------
// The socket's ZMQ_FD, to poll(2) for POLLIN: edge-triggered, readable when
// the socket's state changed, so drain it until HasInput is false before
// blocking again. -1 when it cannot be read (a closed context); never
// throws.
int SocketFd(zmq::socket_t& socket);
// Whether a message is queued to be received (ZMQ_EVENTS has ZMQ_POLLIN);
// reading it also resets SocketFd's edge. Throws zmq::error_t (ETERM once
// the context closes), like the receive calls of the same loop.
bool HasInput(zmq::socket_t& socket);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_SOCKETS_H_
