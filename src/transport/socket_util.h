// Small ZeroMQ helpers shared by the client's and the server's threads.
#ifndef GEEPS_TRANSPORT_SOCKET_UTIL_H_
#define GEEPS_TRANSPORT_SOCKET_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "geeps/config.h"
#include "geeps/status.h"
#include "transport/context.h"

namespace zmq {
class context_t;
class message_t;
class socket_t;
}  // namespace zmq

namespace geeps::transport {

class SecurityConfig;

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
// has, plus kFrameSlackBytes: over its shared tables, a part's rows or
// values, at most max_message_bytes (or one row, when a row is larger: a
// part holds at least one row) and at most the whole table. So the limit
// follows the job (a job of small tables accepts only small frames), not
// the 1 GiB default of max_message_bytes. Sockets set it as
// ZMQ_MAXMSGSIZE, so a peer that announces a larger frame is disconnected
// before anything is allocated for it.
inline constexpr int64_t kFrameSlackBytes = 4096;
int64_t LargestFrameBytes(const Config& c);

// Connections of `socket` that end (a reset, a peer that closed, a peer cut
// off by ZeroMQ for an oversized frame or a failed handshake): a PAIR socket
// receiving `socket`'s ZMQ_EVENT_DISCONNECTED and its failed handshakes (a
// socket monitor), to be polled through its ZMQ_FD and drained with
// CountDisconnects. ZeroMQ keeps one monitor per socket: this one replaces
// the security handler's (security.h), so CountDisconnects hands the failed
// handshakes on to it. Throws zmq::error_t. StopMonitor(socket, monitor)
// before closing `socket`.
std::unique_ptr<zmq::socket_t> MonitorDisconnects(zmq::context_t& context, zmq::socket_t& socket);
// Receives every queued event of `monitor` without waiting (its ZMQ_FD is
// edge-triggered: call after each wake-up); returns how many were
// disconnections, and appends the descriptor of each ended connection to
// `fds` if given. A failed handshake goes to `security` (counted as a
// refused connection there) when given.
int CountDisconnects(zmq::socket_t& monitor, std::vector<int>* fds = nullptr,
                     const SecurityConfig* security = nullptr);
void StopMonitor(zmq::socket_t& socket, std::unique_ptr<zmq::socket_t>& monitor);

// ---- Socket and descriptor budget of one context -------------------------
// ZeroMQ caps the sockets of a context (ZMQ_MAX_SOCKETS, 1023 unless
// raised, fixed when its first socket is made) and every socket takes a file
// descriptor (its mailbox), every tcp/ipc connection one more. A shape too
// large for either used to fail halfway through set-up with "Too many open
// files"; now it is a kResourceExhausted naming the numbers before anything
// is made.
struct SocketNeeds {
  uint64_t sockets = 0;
  uint64_t descriptors = 0;
};
// A new context whose socket cap is as high as the process' descriptor
// limit (RLIMIT_NOFILE, soft) allows, within ZeroMQ's own limit
// (ZMQ_SOCKET_LIMIT), and never below ZeroMQ's default. kUnavailable when
// no context can be made.
StatusOr<ContextPtr> NewContext();
// OK when `context` can hold `needs`; else kResourceExhausted starting with
// `what` (the call and the shape, e.g. "EmbeddedCluster::Start: 2 workers x
// 200 shards x 3 channels") and naming what is needed and the limit
// (and `ulimit -n` where the descriptors are short).
Status CheckSocketNeeds(zmq::context_t& context, const SocketNeeds& needs, const std::string& what);
// The sockets and descriptors of an embedded cluster of `c` (inproc: no
// connections, no monitors).
SocketNeeds EmbeddedClusterNeeds(const Config& c);
// "2 workers x 200 shards x 3 channels": the shape named in the errors.
std::string JobShape(const Config& c);
// One process's share of a multi-process job: `workers_here` workers (0 or
// 1) and `channels_here` shard partitions (0 or c.num_channels) of a job
// with `c.num_workers` workers and `c.num_shards` shards over tcp/ipc,
// `processes` in all, `curve` with CURVE (a monitor per socket).
SocketNeeds ProcessNeeds(const Config& c, int workers_here, int channels_here, int processes,
                         bool secured);

// The same for the control plane (membership: hellos, layouts, aborts).
inline constexpr int64_t kControlFrameLimit = int64_t{16} << 20;

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_SOCKET_UTIL_H_
