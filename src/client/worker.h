// The implementation behind geeps::GeePS: one worker's recorder, the cursor
// over the recorded operations, and the calls. What it runs on is built at
// FinishVirtualIteration: the plan of its iterations (iteration_plan.h), its
// device tables and data path (data_path.h), its oplog's slots (oplog.h) and
// its communication channels (comm_channel.h). Its waits for pushes are in
// worker_wait.cc.
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
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/checked_mode.h"
#include "client/comm_channel.h"
#include "client/data_path.h"
#include "client/handle_owner.h"
#include "client/iteration_plan.h"
#include "client/op_sequence.h"
#include "client/oplog.h"
#include "client/push_order_policy.h"
#include "client/spin_policy.h"
#include "client/table_cache.h"
#include "common/mutex.h"
#include "device/device.h"
#include "geeps/config.h"
#include "geeps/geeps.h"
#include "geeps/stats.h"
#include "geeps/status.h"
#include "transport/context.h"

namespace geeps::client {

class Worker {
 public:
  // `partition_endpoints[p]` is the endpoint of server partition p (shard p /
  // num_channels, channel p % num_channels). `context` (ZeroMQ's) outlives the worker.
  // `security` (may be null: plain sockets) outlives the worker.
  Worker(const Config& config, int rank, transport::Context* context,
         std::vector<std::string> partition_endpoints,
         const transport::SecurityConfig* security = nullptr);
  ~Worker();

  int rank() const { return rank_; }
  int num_workers() const { return config_.num_workers; }
  DeviceKind device_kind() const { return device_ ? device_->kind() : config_.device; }
  void* compute_stream() const { return stream_ ? stream_->native_handle() : nullptr; }

  StatusOr<ReadHandle> VirtualRead(TableId table, const std::vector<RowIndex>& rows, int slack);
  Status VirtualPostRead(ReadHandle h);
  StatusOr<UpdateHandle> VirtualPreUpdate(TableId table, const std::vector<RowIndex>& rows,
                                          bool zeroed);
  Status VirtualUpdate(UpdateHandle h);
  StatusOr<LocalHandle> VirtualLocalAccess(TableId table, const std::vector<RowIndex>& rows,
                                           bool fetch);
  StatusOr<LocalHandle> VirtualLocalRead(TableId table, const std::vector<RowIndex>& rows);
  Status VirtualPostLocalAccess(LocalHandle h, bool keep);
  Status VirtualClock();
  // OK while the virtual iteration is open and has recorded nothing; else
  // kFailedPrecondition saying what `who` ("Step") found.
  Status CheckNothingRecorded(const char* who) const;
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
  // GeePS::HostAddress: the device's host alias of `buffer`, or nullptr.
  const float* HostAddress(const float* buffer);

  Status Sync();
  Status CopyRows(TableId table, const std::vector<RowIndex>& rows, float* out);
  WorkerStats GetStats() const;
  Status Shutdown();
  const Config& config() const { return config_; }

  // Checkpoints. SetResumeClock: before FinishVirtualIteration, by the
  // cluster that restored its shards from the checkpoint of `clock`: the
  // worker starts at that clock and discards its prologue's updates.
  void SetResumeClock(int64_t clock) { resume_clock_ = clock; }
  // The device ordinal (device/selection.h) the worker creates its device
  // with at FinishVirtualIteration; before it, by the cluster that chose it.
  void SetDeviceOrdinal(int ordinal) { device_ordinal_ = ordinal; }
  int64_t resumed_clock() const { return resume_clock_; }
  StatusOr<int64_t> RequestCheckpoint();

  // The job lost a peer (a dead process, a worker that failed): every call
  // that would wait, and every real call after it, returns `reason`. Any
  // thread; the first reason is kept.
  void FailPeers(const Status& reason);
  // Worker `rank` of this job has ended (its function returned OK, in
  // EmbeddedCluster::RunWorkers) with `clock` clocks completed: no push can
  // then reach a later clock, so a Read or Sync that needs one fails at once
  // (kFailedPrecondition naming it) instead of running into its timeout.
  // The lowest such clock is kept; ClearEndedPeers forgets them (a new
  // RunWorkers). Any thread.
  void PeerEnded(int rank, int64_t clock);
  void ClearEndedPeers();
  // Clocks completed (0 in the prologue). Any thread.
  int64_t clock() const { return clock_.load(); }

 private:
  enum class Phase { kRecording, kFinished, kRunning, kShutDown };

  Status CheckRecording(const char* call) const GEEPS_REQUIRES(api_mu_);
  // LocalAccess / LocalRead: `read_only` must match the recording.
  StatusOr<float*> OpenLocal(LocalHandle h, bool read_only);
  // kFailedPrecondition before FinishVirtualIteration and after Shutdown.
  Status CheckDeviceReady(const char* call) const GEEPS_REQUIRES(api_mu_);
  Status CopyBuffer(const char* call, void* dst, const void* src, size_t floats, bool to_host);
  // `owner`: the handle's stamp, checked against this worker's
  // (handle_owner.h; not for Clock).
  Status Expect(OpType type, int32_t handle, size_t count, const char* call, HandleOwner owner)
      GEEPS_REQUIRES(api_mu_);
  // The stamp of this worker's handles, and a handle stamped with it.
  HandleOwner self() const { return {rank_, instance_}; }
  template <class Handle>
  Handle Stamp(Handle h) const {
    h.worker = rank_;
    h.instance = instance_;
    return h;
  }
  // A wait for rows of clock `required` that an ended peer (PeerEnded)
  // can never let come: its error (`what` names the wait); OK otherwise.
  Status EndedPeerBlocks(int64_t required, const std::string& what) const;
  // After an op: advances the table clocks the plan names, moves the
  // cursor. `direct_update`: the handle of the direct Update this op is
  // (IterationPlan::direct_update; its buffer holds its table's deltas), or
  // -1.
  Status Advance(int32_t direct_update = -1) GEEPS_REQUIRES(api_mu_);
  Status AdvanceTable(TableId table, int32_t direct_update) GEEPS_REQUIRES(api_mu_);
  void EmulateCompute() const;  // Config::emulated_compute_per_access
  Status EndPrologue() GEEPS_REQUIRES(api_mu_);
  int64_t RequiredAge(int slack) const;

  const Config config_;
  const int rank_;
  const uint32_t instance_ = NextWorkerInstance();
  transport::Context* context_;
  const std::vector<std::string> partition_endpoints_;
  const transport::SecurityConfig* security_;

  mutable common::Mutex api_mu_;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> peers_failed_{false};
  mutable common::Mutex failure_mu_;
  Status peer_failure_ GEEPS_GUARDED_BY(failure_mu_);
  // PeerEnded: the lowest clock an ended peer reached (INT64_MAX: none),
  // and that peer's rank.
  std::atomic<int64_t> ended_clock_{INT64_MAX};
  int ended_rank_ GEEPS_GUARDED_BY(failure_mu_) = -1;
  Status PeerFailure() const;
  // A Read of `read` that waited config_.timeout for rows of clock
  // `required` of `t`: which partition it waited for, and why it may lag.
  Status ReadTimeout(int32_t read, const TableCache& t, int64_t required) const
      GEEPS_REQUIRES(api_mu_, t.mu);
  // For a Read's timeout: "; the connection from this worker to it was lost
  // N time(s), the last ... ago: ..." when it was, else "".
  std::string LossNote(int partition) const GEEPS_REQUIRES(api_mu_);
  std::atomic<bool> tables_ready_{false};  // data_ built (FinishVirtualIteration)
  void WakeWaiters();                      // notifies every table's waiters; any thread
  // Waits until done() (called with `lock` held) or the deadline, receiving
  // and installing pushes on this thread meanwhile (comm_channel.h).
  // REQUIRES: `lock` holds a table's mutex. Returns done(). Not analysed:
  // it gives up and takes back `lock`, which the analysis cannot tie to the
  // table's mutex.
  bool WaitForPushes(common::MutexLock& lock, std::chrono::steady_clock::time_point deadline,
                     const std::function<bool()>& done) GEEPS_NO_THREAD_SAFETY_ANALYSIS;
  // How often a wait for pushes looks again at update buffers ZeroMQ still
  // holds (to zero them once released, off PreUpdate's path).
  static constexpr int kHeldBufferTickMs = 10;
  // One look for pushes (WaitForPushes), begun at `now`: polls the wake-up
  // and channel descriptors for up to `poll_ms` (0: no wait) and has each
  // channel read what was readable. Returns poll's result; moves `deadline`
  // past time the process was frozen, and sets `last_look` to when the
  // poll returned.
  int LookForPushes(int poll_ms, std::chrono::steady_clock::time_point now,
                    std::chrono::steady_clock::time_point* deadline,
                    std::chrono::steady_clock::time_point* last_look) GEEPS_REQUIRES(api_mu_);
  void NoteFrozen(std::chrono::steady_clock::duration overslept);  // logs the first
  std::atomic<bool> logged_frozen_{false};
  WaitState wait_;
  std::vector<pollfd> wait_fds_;  // wait_.wake_fd, then every channel's poll_fds()
  Phase phase_ GEEPS_GUARDED_BY(api_mu_) = Phase::kRecording;
  OpSequence seq_ GEEPS_GUARDED_BY(api_mu_);

  std::unique_ptr<device::Device> device_;
  std::unique_ptr<device::Stream> stream_;  // the application thread's
  // Built at FinishVirtualIteration: what the recording plans, the device
  // tables and buffers, the oplog's slots.
  std::unique_ptr<IterationPlan> plan_;
  std::unique_ptr<DataPath> data_;
  std::atomic<int64_t> updates_direct_{0};
  std::atomic<int64_t> reads_in_place_{0};

  ClientCounters counters_;
  std::unique_ptr<Oplog> oplog_;
  // Config::checked (or GEEPS_CHECKED=1): the looks at the buffers.
  std::unique_ptr<CheckedMode> checked_;
  std::vector<std::unique_ptr<CommChannel>> channels_ GEEPS_GUARDED_BY(api_mu_);

  // The real-phase cursor.
  Section section_ GEEPS_GUARDED_BY(api_mu_) = kRepeated;
  size_t pos_ GEEPS_GUARDED_BY(api_mu_) = 0;
  std::atomic<int64_t> clock_{0};  // clocks completed; the prologue is clock 0
  std::atomic<int64_t> iterations_{0};
  std::atomic<int64_t> read_wait_ns_{0}, reads_waited_{0};
  // Whether a wait for pushes spins before it blocks (Config::spin_wait_us),
  // and how many did (WorkerStats::waits_spun, waits_ended_spinning).
  SpinPolicy spin_ GEEPS_GUARDED_BY(api_mu_){0};
  std::atomic<int64_t> waits_spun_{0}, waits_ended_spinning_{0};
  // Whether the updates ask for pushes in read order (Config::
  // push_in_read_order, adapt_push_order), judged at each clock.
  PushOrderPolicy push_order_ GEEPS_GUARDED_BY(api_mu_){PushOrderPolicy::Mode::kAsReady};
  std::atomic<bool> asks_read_order_{false};  // what push_order_ answers; channels read it
  std::atomic<int64_t> push_order_switches_{0};
  std::chrono::steady_clock::time_point last_clock_at_ GEEPS_GUARDED_BY(api_mu_);
  int64_t read_wait_at_last_clock_ GEEPS_GUARDED_BY(api_mu_) = 0;
  void JudgePushOrder() GEEPS_REQUIRES(api_mu_);
  std::atomic<uint64_t> device_bytes_{0};
  int64_t resume_clock_ = 0;  // > 0: resumed from that checkpoint
  int device_ordinal_ = -1;   // DeviceOptions::ordinal
  // The device's name (WorkerStats::device), set once it exists.
  mutable common::Mutex device_name_mu_;
  std::string device_name_ GEEPS_GUARDED_BY(device_name_mu_);
  // Updates of this clock ask for a checkpoint.
  int64_t checkpoint_flag_clock_ GEEPS_GUARDED_BY(api_mu_) = -1;
  bool DiscardingPrologue() const GEEPS_REQUIRES(api_mu_) {
    return resume_clock_ > 0 && section_ == kPrologue;
  }
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_WORKER_H_
