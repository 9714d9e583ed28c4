// Small ZeroMQ helpers shared by the client's and the server's threads.
#ifndef GEEPS_TRANSPORT_SOCKET_UTIL_H_
#define GEEPS_TRANSPORT_SOCKET_UTIL_H_

#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "geeps/config.h"
#include "geeps/status.h"

namespace geeps::transport {

// Receives one whole multipart message into `frames` (cleared first) without
// waiting for its first frame. Returns false when none is queued. Tells TSan
// about the hand-off (see tsan.h). Throws zmq::error_t like cppzmq.
bool TryRecvMultipart(zmq::socket_t& socket, zmq::context_t* context,
                      std::vector<zmq::message_t>* frames);

// Sends one byte to the PULL socket bound at `endpoint` to wake its thread's
// poll. Never throws; a lost wake-up is covered by the poll timeout.
void WakeUp(zmq::context_t* context, const std::string& endpoint);

// An eventfd that wakes a thread polling it (non-blocking, close-on-exec);
// kUnavailable naming `who` when none can be made.
StatusOr<int> NewWakeFd(const std::string& who);
// Makes `fd` readable; never fails (a full counter is readable already).
void SignalWakeFd(int fd);
// Makes `fd` unreadable again (reads the counter back to 0).
void ClearWakeFd(int fd);

// The largest frame a legal data-plane message of a job with config `c`
// has: a part of at most max_message_bytes, or one row of the widest table
// (a part holds at least one row), plus slack for the header. Sockets set
// it as ZMQ_MAXMSGSIZE, so a peer that announces a larger frame is
// disconnected before anything is allocated for it.
int64_t LargestFrameBytes(const Config& c);

// Connections of `socket` that end (a reset, a peer that closed, a peer cut
// off by ZeroMQ for an oversized frame or a failed handshake): a PAIR socket
// receiving `socket`'s ZMQ_EVENT_DISCONNECTED (a socket monitor), to be
// polled through its ZMQ_FD and drained with CountDisconnects. Throws
// zmq::error_t. StopMonitor(socket, monitor) before closing `socket`.
std::unique_ptr<zmq::socket_t> MonitorDisconnects(zmq::context_t& context,
                                                  zmq::socket_t& socket);
// Receives every queued event of `monitor` without waiting (its ZMQ_FD is
// edge-triggered: call after each wake-up); returns how many were
// disconnections, and appends the descriptor of each ended connection to
// `fds` if given.
int CountDisconnects(zmq::socket_t& monitor, std::vector<int>* fds = nullptr);
void StopMonitor(zmq::socket_t& socket, std::unique_ptr<zmq::socket_t>& monitor);

// The same for the control plane (membership: hellos, layouts, aborts).
inline constexpr int64_t kControlFrameLimit = int64_t{16} << 20;

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_SOCKET_UTIL_H_
