// The implementation behind geeps::GeePS: one worker's recorder, device
// memory, parameter cache, oplogs and communication channels.
//
// Threads: the application thread makes every call but Shutdown() and
// GetStats() (any thread). api_mu_ serialises the application's calls
// against Shutdown(); a Read blocked on fresh rows waits in WaitForPushes(),
// receiving the pushes itself, and Shutdown() wakes it (WaitState::Wake).
#ifndef GEEPS_CLIENT_WORKER_H_
#define GEEPS_CLIENT_WORKER_H_

#include <poll.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "client/comm_channel.h"
#include "client/iteration_plan.h"
#include "client/memory_manager.h"
#include "client/op_sequence.h"
#include "client/oplog.h"
#include "client/swap_engine.h"
#include "client/table_cache.h"
#include "device/device.h"
#include "geeps/config.h"
#include "geeps/geeps.h"
#include "geeps/stats.h"
#include "geeps/status.h"

namespace geeps::client {

class Worker {
 public:
  // `partition_endpoints[p]` is the endpoint of server partition p (shard p /
  // num_channels, channel p % num_channels). `zmq_context` outlives the worker.
  // `security` (may be null: plain sockets) outlives the worker.
  Worker(const Config& config, int rank, zmq::context_t* zmq_context,
         std::vector<std::string> partition_endpoints,
         const transport::SecurityConfig* security = nullptr);
  ~Worker();

  int rank() const { return rank_; }
  int num_workers() const { return config_.num_workers; }
  DeviceKind device_kind() const { return device_ ? device_->kind() : config_.device; }
  void* compute_stream() const { return stream_ ? stream_->native_handle() : nullptr; }

  StatusOr<ReadHandle> VirtualRead(TableId table, const std::vector<RowIndex>& rows, int slack);
  Status VirtualPostRead(ReadHandle h);
  StatusOr<UpdateHandle> VirtualPreUpdate(TableId table, const std::vector<RowIndex>& rows);
  Status VirtualUpdate(UpdateHandle h);
  StatusOr<LocalHandle> VirtualLocalAccess(TableId table, const std::vector<RowIndex>& rows,
                                           bool fetch);
  StatusOr<LocalHandle> VirtualLocalRead(TableId table, const std::vector<RowIndex>& rows);
  Status VirtualPostLocalAccess(LocalHandle h, bool keep);
  Status VirtualClock();
  Status FinishVirtualIteration();
  Status StartIterations();

  StatusOr<const float*> Read(ReadHandle h);
  Status PostRead(ReadHandle h);
  StatusOr<float*> PreUpdate(UpdateHandle h);
  Status Update(UpdateHandle h);
  StatusOr<float*> LocalAccess(LocalHandle h);
  StatusOr<const float*> LocalRead(LocalHandle h);
  Status PostLocalAccess(LocalHandle h);
  Status Clock();

  // GeePS::CopyToHost / CopyFromHost / EnqueueHostWork /
  // SynchronizeComputeStream: on stream_, application thread.
  Status CopyToHost(float* host, const float* device_buffer, size_t floats);
  Status CopyFromHost(float* device_buffer, const float* host, size_t floats);
  Status EnqueueHostWork(std::function<void()> work);
  Status SynchronizeComputeStream();

  Status Sync();
  Status CopyRows(TableId table, const std::vector<RowIndex>& rows, float* out);
  WorkerStats GetStats() const;
  Status Shutdown();
  const Config& config() const { return config_; }

  // Checkpoints. SetResumeClock: before FinishVirtualIteration, by the
  // cluster that restored its shards from the checkpoint of `clock`: the
  // worker starts at that clock and discards its prologue's updates.
  void SetResumeClock(int64_t clock) { resume_clock_ = clock; }
  int64_t resumed_clock() const { return resume_clock_; }
  StatusOr<int64_t> RequestCheckpoint();

  // The job lost a peer (a dead process, a worker that failed): every call
  // that would wait, and every real call after it, returns `reason`. Any
  // thread; the first reason is kept.
  void FailPeers(const Status& reason);

 private:
  enum class Phase { kRecording, kFinished, kRunning, kShutDown };

  // A run of an access's rows (in request order) whose cached rows live on
  // one side: rows [out, out + count) of the buffer; device rows gather from /
  // scatter to the device cache through index[index_at ..], host rows through
  // host_index[index_at ..] and staging[index_at * width ..].
  struct AccessRun {
    uint32_t out = 0, count = 0;
    bool on_device = true;
    uint32_t index_at = 0;
  };

  // Device memory of one recorded access.
  struct AccessBuffers {
    float* buffer = nullptr;    // rows.size() * width
    uint32_t* index = nullptr;  // device: positions in the cache / local table
    bool contiguous = false;    // local access over consecutive rows
    float* direct = nullptr;    // contiguous local access: pointer into the table
    // Memory manager: `buffer` comes from the pool while the access is open
    // (reads, updates, local data in host memory).
    bool pooled = false;
    float* host_rows = nullptr;  // local data in host memory: contiguous rows there
    float* staging = nullptr;    // ... or a pinned buffer to gather/scatter through
    // Reads and updates: the runs of rows by side (one device run when the
    // whole cache is on the device), and the host positions of host rows.
    std::vector<AccessRun> runs;
    std::vector<uint32_t> host_index;
    uint32_t host_count = 0;  // rows in host memory
    // Direct updates on a device whose memory the host can read: the update
    // is sent from `buffer` itself (no copy into the slot); this counts the
    // ZeroMQ messages still reading it, which PreUpdate waits out before
    // zeroing it again.
    std::shared_ptr<std::atomic<int>> send_refs;
    // A buffer sent in place is zeroed by a Read that waits for pushes once
    // ZeroMQ has released it (kPending until then); PreUpdate skips a
    // buffer that is kDone.
    enum class Zeroing { kNone, kPending, kDone };
    Zeroing zeroing = Zeroing::kNone;
    // Resend after a connection loss (TableCache::retain_until_acked): the
    // update of the last clock stays in `buffer` until a push acknowledges
    // it, so PreUpdate hands out this second buffer meanwhile (the two are
    // swapped with their refs and zeroing states); allocated when first
    // needed, never with a memory budget (the update is then copied into
    // its slot instead).
    float* alt = nullptr;
    std::shared_ptr<std::atomic<int>> alt_refs;
    Zeroing alt_zeroing = Zeroing::kNone;
    // A read returned in place and not yet PostRead (counted in the table's
    // open_in_place_reads).
    bool open_in_place = false;
  };

  Status CheckRecording(const char* call) const;
  // LocalAccess / LocalRead: `read_only` must match the recording.
  StatusOr<float*> OpenLocal(LocalHandle h, bool read_only);
  // kFailedPrecondition before FinishVirtualIteration and after Shutdown.
  Status CheckDeviceReady(const char* call) const;
  Status CopyBuffer(const char* call, void* dst, const void* src, size_t floats, bool to_host);
  Status Expect(OpType type, int32_t handle, size_t count, const char* call);
  // After an op: advances the table clocks the plan names, moves the
  // cursor. `direct_update`: the handle of the direct Update this op is
  // (IterationPlan::direct_update; its buffer holds its table's deltas), or
  // -1.
  Status Advance(int32_t direct_update = -1);
  Status AdvanceTable(TableId table, int32_t direct_update);
  // After the tables are placed: the plan's direct paths (IterationPlan::
  // PlaceCaches), and the direct updates sent in place from their buffers.
  void PlanDirectPaths();
  // After Shutdown: waits (at most kReleaseWait) until ZeroMQ has released
  // the updates sent in place from their device buffers
  // (AccessBuffers::send_refs); whether it still holds one.
  bool UpdateBuffersStillSending() const;
  // PreUpdate of a buffer whose last update is kept for resending: hands
  // out the other buffer (AccessBuffers::alt), or, where there is none,
  // copies the kept update into its slot so the buffer is free again.
  Status FreeKeptBuffer(AccessBuffers& b, TableCache& t, size_t floats);
  void EmulateCompute() const;  // Config::emulated_compute_per_access
  Status EndPrologue();
  Status BuildTables();     // plans the iterations (plan_), no memory
  Status AllocateTables();  // cache, oplog, local tables
  Status BuildAccesses();
  // Index and runs of a read or update access over the cached rows.
  Status BuildCacheAccess(const RecordedAccess& a, const TableCache& t, AccessBuffers& b);
  // Moves a read's rows from the cache into its buffer / adds an update's
  // buffer into the oplog (and the cache, with read-my-writes). Under t.mu.
  Status GatherFromCache(TableCache& t, AccessBuffers& b, int handle);
  Status ScatterToCache(TableCache& t, AccessBuffers& b, int handle);
  StatusOr<uint32_t*> UploadIndex(const std::vector<uint32_t>& index);
  StatusOr<float*> AllocFloats(size_t count);
  // Device bytes outside the memory manager's plan: cache, oplogs, indexes,
  // buffers of scattered local accesses.
  uint64_t FixedDeviceBytes() const;
  // Takes / returns the pool buffer of a managed access.
  Status AcquireBuffer(AccessBuffers& b, uint64_t bytes, MemoryManager::AccessRef who);
  Status ReleaseBuffer(AccessBuffers& b);
  // Copies a managed local access between host memory and its pool buffer.
  Status SwapLocal(const RecordedAccess& a, const AccessBuffers& b, bool to_device, int handle);
  int64_t RequiredAge(int slack) const;

  const Config config_;
  const int rank_;
  zmq::context_t* zmq_context_;
  const std::vector<std::string> partition_endpoints_;
  const transport::SecurityConfig* security_;

  mutable std::mutex api_mu_;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> peers_failed_{false};
  mutable std::mutex failure_mu_;
  Status peer_failure_;  // guarded by failure_mu_
  Status PeerFailure() const;
  // For a Read's timeout: "; the connection from this worker to it was lost
  // N time(s), the last ... ago: ..." when it was, else "".
  std::string LossNote(int partition) const;
  std::atomic<bool> tables_ready_{false};  // tables_ built (FinishVirtualIteration)
  void WakeWaiters();                      // notifies every table's waiters; any thread
  // Waits until done() (called with `lock` held) or the deadline, receiving
  // and installing pushes on this thread meanwhile (comm_channel.h).
  // REQUIRES: `lock` holds a table's mutex. Returns done().
  bool WaitForPushes(std::unique_lock<std::mutex>& lock,
                     std::chrono::steady_clock::time_point deadline,
                     const std::function<bool()>& done);
  // Zeroes the update buffers sent in place that ZeroMQ has released, while
  // the application thread would only wait (WaitForPushes); returns whether
  // one is still held.
  bool ZeroReleasedUpdateBuffers();
  // Fills `floats` floats of device memory with zeros on stream_ and waits
  // (counted as zero_bytes).
  Status ZeroBuffer(float* buffer, size_t floats);
  WaitState wait_;
  std::vector<pollfd> wait_fds_;  // wait_.wake_fd, then every channel's poll_fds()
  Phase phase_ = Phase::kRecording;
  OpSequence seq_;

  std::unique_ptr<device::Device> device_;
  std::unique_ptr<device::Stream> stream_;  // the application thread's
  std::vector<void*> allocations_;          // device memory to free
  std::vector<void*> pinned_allocations_;
  std::vector<std::unique_ptr<TableCache>> tables_;  // shared tables; null if local
  std::vector<float*> local_tables_;                 // local tables; null if unused
  std::vector<bool> local_on_host_;                  // local table in pinned host memory
  std::unique_ptr<MemoryManager> memory_;            // null without a budget
  std::unique_ptr<SwapEngine> swap_;                 // null: swaps on the app thread
  Status BuildSwapEngine();
  std::vector<AccessBuffers> read_bufs_, update_bufs_, local_bufs_;
  std::unique_ptr<IterationPlan> plan_;  // built at FinishVirtualIteration
  std::atomic<int64_t> updates_direct_{0};
  std::atomic<int64_t> reads_in_place_{0};

  ClientCounters counters_;
  std::unique_ptr<Oplog> oplog_;  // built at FinishVirtualIteration
  std::vector<std::unique_ptr<CommChannel>> channels_;

  // The real-phase cursor.
  Section section_ = kRepeated;
  size_t pos_ = 0;
  std::atomic<int64_t> clock_{0};  // clocks completed; the prologue is clock 0
  std::atomic<int64_t> iterations_{0};
  std::atomic<int64_t> read_wait_ns_{0}, reads_waited_{0};
  std::atomic<uint64_t> device_bytes_{0};
  int64_t resume_clock_ = 0;            // > 0: resumed from that checkpoint
  int64_t checkpoint_flag_clock_ = -1;  // updates of this clock ask for one
  bool DiscardingPrologue() const { return resume_clock_ > 0 && section_ == kPrologue; }
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_WORKER_H_
