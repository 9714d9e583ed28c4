#include "transport/socket_util.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/tsan.h"

namespace geeps::transport {

bool TryRecvMultipart(zmq::socket_t& socket, zmq::context_t* context,
                      std::vector<zmq::message_t>* frames) {
  frames->clear();
  for (bool more = true; more;) {
    zmq::message_t msg;
    auto r = socket.recv(msg, frames->empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!r) return !frames->empty();
    more = msg.more();
    frames->push_back(std::move(msg));
  }
  AcquireAfterRecv(context);
  return true;
}

std::unique_ptr<zmq::socket_t> MonitorDisconnects(zmq::context_t& context,
                                                  zmq::socket_t& socket) {
  const std::string endpoint =
      "inproc://geeps-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(&socket));
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
    throw zmq::error_t();
  auto monitor = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pair);
  monitor->set(zmq::sockopt::linger, 0);
  monitor->connect(endpoint);
  return monitor;
}

int CountDisconnects(zmq::socket_t& monitor, std::vector<int>* fds) {
  int n = 0;
  // An event is two frames: 2 bytes of event id and 4 of value, then the
  // endpoint.
  while (monitor.get(zmq::sockopt::events) & ZMQ_POLLIN) {
    zmq::message_t event, endpoint;
    if (!monitor.recv(event, zmq::recv_flags::dontwait)) break;
    if (event.more()) (void)monitor.recv(endpoint, zmq::recv_flags::dontwait);
    uint16_t id = 0;
    if (event.size() >= sizeof(id)) std::memcpy(&id, event.data(), sizeof(id));
    if (id != ZMQ_EVENT_DISCONNECTED) continue;
    ++n;
    int32_t fd = -1;  // the event's value: the connection's descriptor
    if (fds != nullptr && event.size() >= sizeof(id) + sizeof(fd)) {
      std::memcpy(&fd, static_cast<const char*>(event.data()) + sizeof(id), sizeof(fd));
      fds->push_back(fd);
    }
  }
  return n;
}

void StopMonitor(zmq::socket_t& socket, std::unique_ptr<zmq::socket_t>& monitor) {
  if (!monitor) return;
  zmq_socket_monitor(socket.handle(), nullptr, 0);
  monitor.reset();
}

int64_t LargestFrameBytes(const Config& c) {
  uint64_t widest = 0;
  for (const TableSpec& t : c.tables)
    widest = std::max<uint64_t>(widest, uint64_t{t.row_width} * sizeof(float));
  return static_cast<int64_t>(std::max<uint64_t>(c.max_message_bytes, widest) + 4096);
}

StatusOr<int> NewWakeFd(const std::string& who) {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return UnavailableError(who + ": cannot create an eventfd: " + std::strerror(errno));
  return fd;
}

void SignalWakeFd(int fd) {
  const uint64_t one = 1;
  (void)!::write(fd, &one, sizeof(one));
}

void ClearWakeFd(int fd) {
  uint64_t count;
  (void)!::read(fd, &count, sizeof(count));
}

void WakeUp(zmq::context_t* context, const std::string& endpoint) {
  try {
    zmq::socket_t wake(*context, zmq::socket_type::push);
    wake.set(zmq::sockopt::linger, 0);
    wake.connect(endpoint);
    wake.send(zmq::str_buffer("w"), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
  }
}

}  // namespace geeps::transport
