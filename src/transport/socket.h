// A data-plane socket by a type that code outside src/transport can hold
// without ZeroMQ's header: the worker's channels, the shards and the
// relays send and receive Frames (frame.h) through it, and get it from the
// factories below (each the Socket form of its sockets.h factory, with the
// same options, security and errors).
//
// The calls throw transport::Error (frame.h) where ZeroMQ's would fail, as
// the loops that use them expect (ETERM: the context is closing).
#ifndef GEEPS_TRANSPORT_SOCKET_H_
#define GEEPS_TRANSPORT_SOCKET_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "geeps/status.h"
#include "transport/context.h"
#include "transport/frame.h"

namespace zmq {
class socket_t;
}  // namespace zmq

namespace geeps::transport {

class SecurityConfig;

class Socket {
 public:
  Socket();
  explicit Socket(std::unique_ptr<zmq::socket_t> socket);
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;

  explicit operator bool() const { return socket_ != nullptr; }
  // Closes the socket (what was sent still goes: linger).
  void reset();

  // Sends `frame` (then empty); `more`: frames of the same message follow.
  // Blocks while the socket's queue is full.
  void Send(Frame& frame, bool more);
  // Sends a copy of `bytes`.
  void Send(const std::string& bytes, bool more);
  // Receives one whole message into `frames` (cleared first) without
  // waiting for its first frame; false when none is queued. Tells
  // ThreadSanitizer about the hand-off in `context` (tsan.h).
  bool TryReceive(Context* context, std::vector<Frame>* frames);
  // ZeroMQ's ZMQ_FD: readable when the socket's state changed
  // (edge-triggered: receive until TryReceive is false before blocking
  // again); -1 when it cannot be read.
  int fd();

  // For src/transport only (the type is complete there).
  zmq::socket_t& native() { return *socket_; }

 private:
  std::unique_ptr<zmq::socket_t> socket_;
};

// Waits until one of `sockets` has a message queued, or `limit` passes
// (level-triggered, unlike fd()).
void PollSockets(const std::vector<Socket*>& sockets, std::chrono::milliseconds limit);

// ---- Factories (sockets.h tells each one's options and errors) -------------
StatusOr<Socket> BindShardSocket(Context& context, const std::string& endpoint,
                                 int64_t max_frame_bytes, const SecurityConfig* security = nullptr,
                                 std::string* actual = nullptr);
StatusOr<Socket> ConnectWorkerSocket(Context& context, const std::string& endpoint, int rank,
                                     int64_t max_frame_bytes,
                                     const SecurityConfig* security = nullptr);
// A monitor of `socket`'s lost connections (socket_util.h,
// MonitorDisconnects); StopMonitor before `socket` closes.
StatusOr<Socket> NewMonitorSocket(Context& context, Socket& socket, const std::string& endpoint);
void StopMonitor(Socket& socket, Socket& monitor);
// The lost connections `monitor` reported since the last call (their
// descriptors appended to `fds` if given); failed handshakes go to
// `security` when given.
int CountDisconnects(Socket& monitor, std::vector<int>* fds, const SecurityConfig* security);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_SOCKET_H_
