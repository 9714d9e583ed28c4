#include "transport/socket_util.h"

#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <zmq.hpp>

#include "common/machines.h"
#include "transport/security.h"
#include "transport/sockets.h"
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

std::unique_ptr<zmq::socket_t> MonitorDisconnects(zmq::context_t& context, zmq::socket_t& socket) {
  const std::string endpoint =
      "inproc://geeps-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(&socket));
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(),
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0)
    throw zmq::error_t();
  auto monitor = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pair);
  monitor->set(zmq::sockopt::linger, 0);
  monitor->connect(endpoint);
  return monitor;
}

int CountDisconnects(zmq::socket_t& monitor, std::vector<int>* fds,
                     const SecurityConfig* security) {
  int n = 0;
  // An event is two frames: 2 bytes of event id and 4 of value, then the
  // endpoint.
  while (monitor.get(zmq::sockopt::events) & ZMQ_POLLIN) {
    zmq::message_t event, endpoint;
    if (!monitor.recv(event, zmq::recv_flags::dontwait)) break;
    if (event.more()) (void)monitor.recv(endpoint, zmq::recv_flags::dontwait);
    uint16_t id = 0;
    if (event.size() >= sizeof(id)) std::memcpy(&id, event.data(), sizeof(id));
    int32_t value = -1;  // a disconnection's: the connection's descriptor
    if (event.size() >= sizeof(id) + sizeof(value))
      std::memcpy(&value, static_cast<const char*>(event.data()) + sizeof(id), sizeof(value));
    if (id != ZMQ_EVENT_DISCONNECTED) {
      if (security != nullptr)
        security->NoteHandshakeFailure(id, static_cast<uint32_t>(value), endpoint.to_string());
      continue;
    }
    ++n;
    if (fds != nullptr && event.size() >= sizeof(id) + sizeof(value)) fds->push_back(value);
  }
  return n;
}

void StopMonitor(zmq::socket_t& socket, std::unique_ptr<zmq::socket_t>& monitor) {
  if (!monitor) return;
  zmq_socket_monitor(socket.handle(), nullptr, 0);
  monitor.reset();
}

int64_t LargestFrameBytes(const Config& c) {
  // A frame is a part's rows (8 bytes each) or its values (4 * width
  // bytes): at most max_message_bytes, or one row when a row is larger
  // (RowsPerPart), and never more rows than the table has.
  uint64_t largest = 0;
  for (const TableSpec& t : c.tables) {
    if (t.local) continue;  // never sent
    const uint64_t row_bytes = std::max<uint64_t>(uint64_t{t.row_width} * sizeof(float), 8);
    const uint64_t whole = std::max<uint64_t>(t.num_rows, 1) * row_bytes;
    largest =
        std::max(largest, std::min(whole, std::max<uint64_t>(c.max_message_bytes, row_bytes)));
  }
  // A packed message is one frame under pack_below_bytes.
  largest = std::max<uint64_t>(largest, c.pack_below_bytes);
  return static_cast<int64_t>(largest + kFrameSlackBytes);
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
  StatusOr<SocketPtr> wake = ConnectWakePush(*context, endpoint);
  if (!wake.ok()) return;
  try {
    (*wake)->send(zmq::str_buffer("w"), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
  }
}

namespace {

// The process' soft descriptor limit; 0 when unlimited or unknown.
uint64_t DescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<uint64_t>(limit.rlim_cur);
}

constexpr int kZmqDefaultMaxSockets = 1023;  // ZMQ_MAX_SOCKETS_DFLT

}  // namespace

void ContextDeleter::operator()(Context* context) const { delete context; }

StatusOr<ContextPtr> NewContext() {
  ContextPtr context;
  try {
    context.reset(new zmq::context_t(1));
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string("cannot create a ZeroMQ context: ") + e.what());
  }
  const int zmq_limit = zmq_ctx_get(context->handle(), ZMQ_SOCKET_LIMIT);
  const uint64_t fds = DescriptorLimit();
  int cap = zmq_limit > 0 ? zmq_limit : kZmqDefaultMaxSockets;
  if (fds > 0 && fds < static_cast<uint64_t>(cap)) cap = static_cast<int>(fds);
  cap = std::max(cap, kZmqDefaultMaxSockets);
  // Takes effect because no socket of this context exists yet; a refusal
  // leaves the default, which CheckSocketNeeds then reports against.
  zmq_ctx_set(context->handle(), ZMQ_MAX_SOCKETS, cap);
  return context;
}

Status CheckSocketNeeds(zmq::context_t& context, const SocketNeeds& needs,
                        const std::string& what) {
  const int cap = zmq_ctx_get(context.handle(), ZMQ_MAX_SOCKETS);
  if (cap > 0 && needs.sockets > static_cast<uint64_t>(cap)) {
    const int zmq_limit = zmq_ctx_get(context.handle(), ZMQ_SOCKET_LIMIT);
    return ResourceExhaustedError(
        what + " needs about " + std::to_string(needs.sockets) +
        " ZeroMQ sockets in one context, but its cap is " + std::to_string(cap) +
        " (ZeroMQ allows at most " + std::to_string(zmq_limit) +
        "; the cap follows the descriptor limit, ulimit -n); use fewer shards or channels");
  }
  const uint64_t fds = DescriptorLimit();
  if (fds > 0 && needs.descriptors > fds) {
    return ResourceExhaustedError(what + " needs about " + std::to_string(needs.descriptors) +
                                  " file descriptors, but the limit is " + std::to_string(fds) +
                                  " (ulimit -n); use fewer shards or channels");
  }
  return Status::OK();
}

SocketNeeds EmbeddedClusterNeeds(const Config& c) {
  const uint64_t partitions = static_cast<uint64_t>(c.num_shards) * c.num_channels;
  const uint64_t workers = static_cast<uint64_t>(c.num_workers);
  SocketNeeds n;
  // A ROUTER per partition, a DEALER per worker and partition, a few made
  // for a moment (wake-ups).
  // With machine-level aggregation, a relay per machine: a ROUTER and a
  // DEALER per partition.
  const uint64_t machines =
      c.aggregate_per_machine ? static_cast<uint64_t>(common::NumMachines(c)) : 0;
  n.sockets = partitions + workers * partitions + 2 * machines * partitions + 16;
  // A mailbox per socket, a wake-up descriptor per partition and per
  // worker channel, ZeroMQ's own (I/O thread, reaper) and the process'.
  n.descriptors = 64 + 2 * partitions + workers * c.num_channels * (c.num_shards + 3) +
                  2 * machines * partitions;
  return n;
}

SocketNeeds ProcessNeeds(const Config& c, int workers_here, int channels_here, int processes,
                         bool secured) {
  const uint64_t partitions = static_cast<uint64_t>(c.num_shards) * c.num_channels;
  // Every tcp/ipc socket has a disconnect monitor (ZeroMQ's PAIR and ours),
  // when secured (CURVE or the job token) a handshake monitor too.
  const uint64_t per_socket = 1 + 2 + (secured ? 2 : 0);
  // With machine-level aggregation a worker process may run its machine's
  // relay: a ROUTER (its members connect) and a DEALER per partition.
  const uint64_t relay = c.aggregate_per_machine && workers_here > 0 ? partitions : 0;
  const uint64_t dealers = (workers_here > 0 ? partitions : 0) + relay;
  const uint64_t routers = static_cast<uint64_t>(std::max(0, channels_here)) + relay;
  SocketNeeds n;
  // The membership socket and its control socket, the ZAP handler's two.
  n.sockets = (dealers + routers) * per_socket + 2 + (secured ? 4 : 0) + 16;
  // Mailboxes, one connection per DEALER, one per worker at each ROUTER,
  // one per process at the coordinator, a wake-up per worker channel and
  // per partition, ZeroMQ's own.
  const uint64_t wakeups = (workers_here > 0 ? c.num_channels : 0) + routers;
  n.descriptors = n.sockets + dealers + routers * static_cast<uint64_t>(c.num_workers) +
                  static_cast<uint64_t>(processes) + wakeups + 64;
  return n;
}

std::string JobShape(const Config& c) {
  return std::to_string(c.num_workers) + " workers x " + std::to_string(c.num_shards) +
         " shards x " + std::to_string(c.num_channels) + " channels";
}

}  // namespace geeps::transport
