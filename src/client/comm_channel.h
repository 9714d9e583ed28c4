// One communication channel of a worker: a thread that owns a DEALER socket
// to channel `channel` of every shard, sends the worker's subscriptions and
// per-clock updates (tasks queued by the application thread), and installs
// the rows the partitions push into the parameter cache.
//
// Threads: Start(), Enqueue() and Stop() are called by the worker; Enqueue()
// only from the thread that called Start() (the socket it uses is that
// thread's). The channel's own thread owns the DEALER sockets.
#ifndef GEEPS_CLIENT_COMM_CHANNEL_H_
#define GEEPS_CLIENT_COMM_CHANNEL_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "client/table_cache.h"
#include "device/device.h"
#include "geeps/config.h"
#include "geeps/status.h"
#include "transport/wire.h"

namespace geeps::transport {
class SecurityConfig;
}  // namespace geeps::transport

namespace geeps::client {

struct ClientCounters {
  std::atomic<int64_t> messages_sent{0}, messages_received{0}, bytes_sent{0},
      bytes_received{0}, pushes_installed{0}, frames_dropped{0};
  // WorkerStats::data_path, by stage (relaxed: statistics only).
  std::atomic<int64_t> gather_bytes{0}, zero_bytes{0}, scatter_add_bytes{0}, to_slot_bytes{0},
      pack_bytes{0}, install_bytes{0}, app_copy_bytes{0};
  static void Count(std::atomic<int64_t>& c, size_t bytes) {
    c.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }
};

// What the channel needs of its worker. Everything outlives the channel.
struct ClientContext {
  const Config* config = nullptr;
  int rank = 0;
  device::Device* device = nullptr;
  std::vector<std::unique_ptr<TableCache>>* tables = nullptr;  // null = local
  ClientCounters* counters = nullptr;
  // CURVE settings of a multi-process job's sockets; null: plain sockets.
  const transport::SecurityConfig* security = nullptr;
};

struct CommTask {
  enum Kind : uint32_t { kSubscribe = 1, kSend = 2 };
  uint32_t kind = 0;
  uint32_t table = 0;
  OplogSlot* slot = nullptr;  // kSend
};

// Frees the table's slots that are sent and (with read-my-writes) included
// in every partition's last push. REQUIRES: t.mu held.
void ReleaseSlots(TableCache& t, bool read_my_writes);

class CommChannel {
 public:
  // `endpoints[s]` is shard s's endpoint for this channel.
  CommChannel(const ClientContext& ctx, zmq::context_t* zmq_context, int channel,
              std::vector<std::string> endpoints);
  ~CommChannel();  // Stop()

  Status Start();
  Status Enqueue(const CommTask& task);
  // Sends what is queued, then stops and joins the thread. Idempotent; may be
  // called from any thread.
  void Stop();

 private:
  void Run();
  void DrainTasks();  // runs every queued task
  void RunTask(const CommTask& task);
  // The payload of a message: either `fill(out, first, n)` writes the
  // payload of rows [first, first + n) into a fresh buffer, or, with `base`
  // set, the rows lie back to back at `base` and are sent from there
  // without a copy (`refs` counts the messages ZeroMQ still holds). Neither:
  // no payload.
  struct Payload {
    std::function<void(char*, uint64_t, uint64_t)> fill;
    const char* base = nullptr;
    std::atomic<int>* refs = nullptr;
  };
  // Sends a message of `total` rows in parts of at most max_message_bytes;
  // `rows` (may be null) are the row ids.
  void SendInParts(int shard, transport::WireHeader h, const uint64_t* rows, uint64_t total,
                   const Payload& payload);
  void SendSubscribe(TableCache& t, const PartitionSlice& s);
  void SendUpdate(TableCache& t, const PartitionSlice& s, OplogSlot& slot);
  void HandlePush(int shard, std::vector<zmq::message_t>& frames);
  void SendFrames(int shard, zmq::message_t* frames, size_t count);
  void Drop(const std::string& what);

  ClientContext ctx_;
  zmq::context_t* zmq_context_;
  const int channel_;
  const std::vector<std::string> endpoints_;
  const std::string task_endpoint_, control_endpoint_;

  std::unique_ptr<zmq::socket_t> task_in_;   // PULL, channel thread
  std::unique_ptr<zmq::socket_t> task_out_;  // PUSH, application thread
  std::unique_ptr<zmq::socket_t> control_;   // PULL, channel thread
  std::vector<std::unique_ptr<zmq::socket_t>> shards_;  // DEALER per shard
  std::unique_ptr<device::Stream> stream_;
  // A push being received in parts, per shard socket.
  struct PartialPush {
    int table = -1;  // -1: none in progress
    int64_t clock = 0;
    uint64_t received = 0;  // rows received so far
    std::vector<float> rows;
  };
  std::vector<PartialPush> partial_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> started_{false};
  std::mutex stop_mu_;
  bool logged_drop_ = false;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_COMM_CHANNEL_H_
