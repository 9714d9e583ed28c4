#include "transport/socket.h"

#include <utility>
#include <zmq.hpp>

#include "transport/socket_util.h"
#include "transport/sockets.h"
#include "transport/tsan.h"

namespace geeps::transport {
namespace {

template <typename F>
auto Rethrow(F&& f) {
  try {
    return f();
  } catch (const zmq::error_t& e) {
    throw Error(e.num());
  }
}

StatusOr<Socket> Wrap(StatusOr<SocketPtr> socket) {
  if (!socket.ok()) return socket.status();
  return Socket(std::move(socket).value());
}

}  // namespace

Socket::Socket() = default;
Socket::Socket(std::unique_ptr<zmq::socket_t> socket) : socket_(std::move(socket)) {}
Socket::~Socket() = default;
Socket::Socket(Socket&& other) noexcept = default;
Socket& Socket::operator=(Socket&& other) noexcept = default;

void Socket::reset() { socket_.reset(); }

void Socket::Send(Frame& frame, bool more) {
  if (zmq_msg_send(static_cast<zmq_msg_t*>(frame.msg()), socket_->handle(),
                   more ? ZMQ_SNDMORE : 0) < 0) {
    throw Error(zmq_errno());
  }
}

void Socket::Send(const std::string& bytes, bool more) {
  Rethrow([&] {
    return socket_->send(zmq::buffer(bytes),
                         more ? zmq::send_flags::sndmore : zmq::send_flags::none);
  });
}

bool Socket::TryReceive(Context* context, std::vector<Frame>* frames) {
  frames->clear();
  for (bool more = true; more;) {
    Frame f;
    const int flags = frames->empty() ? ZMQ_DONTWAIT : 0;
    if (zmq_msg_recv(static_cast<zmq_msg_t*>(f.msg()), socket_->handle(), flags) < 0) {
      const int num = zmq_errno();
      if (num == EAGAIN && frames->empty()) return false;
      throw Error(num);
    }
    more = f.more();
    frames->push_back(std::move(f));
  }
  AcquireAfterRecv(context);
  return true;
}

int Socket::fd() { return SocketFd(*socket_); }

void PollSockets(const std::vector<Socket*>& sockets, std::chrono::milliseconds limit) {
  std::vector<zmq::pollitem_t> items;
  items.reserve(sockets.size());
  for (Socket* s : sockets) items.push_back({s->native().handle(), 0, ZMQ_POLLIN, 0});
  Rethrow([&] { return zmq::poll(items.data(), items.size(), limit); });
}

StatusOr<Socket> BindShardSocket(Context& context, const std::string& endpoint,
                                 int64_t max_frame_bytes, const SecurityConfig* security,
                                 std::string* actual) {
  return Wrap(BindShardRouter(context, endpoint, max_frame_bytes, security, actual));
}

StatusOr<Socket> ConnectWorkerSocket(Context& context, const std::string& endpoint, int rank,
                                     int64_t max_frame_bytes, const SecurityConfig* security) {
  return Wrap(ConnectWorkerDealer(context, endpoint, rank, max_frame_bytes, security));
}

StatusOr<Socket> NewMonitorSocket(Context& context, Socket& socket, const std::string& endpoint) {
  return Wrap(NewDisconnectMonitor(context, socket.native(), endpoint));
}

void StopMonitor(Socket& socket, Socket& monitor) {
  if (!monitor) return;
  zmq_socket_monitor(socket.native().handle(), nullptr, 0);
  monitor.reset();
}

int CountDisconnects(Socket& monitor, std::vector<int>* fds, const SecurityConfig* security) {
  return Rethrow([&] { return CountDisconnects(monitor.native(), fds, security); });
}

}  // namespace geeps::transport
