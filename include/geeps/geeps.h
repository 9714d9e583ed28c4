// The worker-side object of libgeeps: one GeePS instance is one worker.
//
// Usage has two phases (see docs/api.md for a complete trainer loop):
//  1. The virtual iteration: the application walks through one iteration
//     calling the Virtual* form of each call. Nothing is read or written; each
//     call is recorded and returns a handle. VirtualClock() ends the iteration.
//     Operations recorded after VirtualClock() are "unrepeated": the prologue,
//     run once (for example worker 0 writing initial values).
//     FinishVirtualIteration() then builds the indexes, allocates device
//     memory, tells the servers which rows this worker reads and starts the
//     background threads.
//  2. StartIterations(), then the prologue's operations once (if any; the
//     prologue ends by itself after its last operation), then the repeated
//     iteration any number of times, each ended by Clock(). The real calls
//     must come in exactly the recorded order.
//
// Threading: every call except Shutdown() and GetStats() must come from one
// application thread at a time. Shutdown() may be called from any thread; a
// call blocked in Read() then returns kCancelled.
//
// Errors: every call returns Status / StatusOr. A usage error (a call out of
// order, an unknown handle, a call in the wrong phase) is kFailedPrecondition
// or kInvalidArgument and leaves the instance as it was, so the application
// can go on with the right call.
#ifndef GEEPS_GEEPS_H_
#define GEEPS_GEEPS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "geeps/config.h"
#include "geeps/export.h"
#include "geeps/stats.h"
#include "geeps/status.h"

// CUDA's stream type: a cudaStream_t is a CUstream_st*, so this header
// names it without including CUDA's.
struct CUstream_st;

namespace geeps {

// The stream of a worker's device work, typed per backend:
// * kCuda: a CUDA stream; cuda() is the cudaStream_t (launch the
//   application's kernels on it, or make it wait on their events).
// * kHost: no native stream; the host backend orders the application's
//   work with the worker's copies through GeePS::EnqueueHostWork, and
//   cuda() is kFailedPrecondition.
// * Before FinishVirtualIteration has made the device, kind() is
//   Config::device as given (maybe kAuto) and cuda() is kFailedPrecondition.
class GEEPS_EXPORT ComputeStream {
 public:
  ComputeStream() = default;
  ComputeStream(DeviceKind kind, void* handle) : kind_(kind), handle_(handle) {}
  DeviceKind kind() const { return kind_; }
  // The CUDA stream, or kFailedPrecondition naming why there is none (never
  // a null stream, which CUDA would take as its legacy default stream).
  StatusOr<CUstream_st*> cuda() const {
    if (kind_ == DeviceKind::kCuda && handle_ != nullptr) return static_cast<CUstream_st*>(handle_);
    return FailedPreconditionError(
        kind_ == DeviceKind::kHost
            ? "compute_stream: the host backend has no CUDA stream (use EnqueueHostWork)"
            : "compute_stream: no device yet (before FinishVirtualIteration)");
  }
  // The backend's handle as an opaque pointer: the cudaStream_t on kCuda,
  // nullptr otherwise (for code that passes streams as void*).
  void* native_handle() const { return handle_; }

 private:
  DeviceKind kind_ = DeviceKind::kAuto;
  void* handle_ = nullptr;
};

// Handles name a recorded operation of the worker whose Virtual* call
// returned them: `id` the operation, `worker` that worker's rank and
// `instance` that GeePS object (unique in the process, never 0). Treat them
// as opaque. Default-constructed handles are invalid; a handle used on a
// GeePS other than the one that returned it (another worker's, or a worker
// of another cluster or job) is kInvalidArgument naming both.
struct ReadHandle {
  int32_t id = -1;
  int32_t worker = -1;
  uint32_t instance = 0;
};
struct UpdateHandle {
  int32_t id = -1;
  int32_t worker = -1;
  uint32_t instance = 0;
};
struct LocalHandle {
  int32_t id = -1;
  int32_t worker = -1;
  uint32_t instance = 0;
};

namespace client {
class Worker;
}  // namespace client
namespace internal {
class GeePSAccess;  // the library's own factory (src/client/geeps_access.h)
}  // namespace internal

class GEEPS_EXPORT GeePS {
 public:
  // Instances are made only by a cluster or a process: get one from
  // EmbeddedCluster::worker() or Process::worker(); they own it.
  ~GeePS();
  GeePS(const GeePS&) = delete;
  GeePS& operator=(const GeePS&) = delete;

  // This worker's rank in [0, num_workers()), and the job's worker count.
  int rank() const;
  int num_workers() const;
  // The job's config as this worker runs it (its tables, counts and
  // settings). Any thread; valid as long as the GeePS.
  const Config& config() const;

  // ---- The device and the stream contract (docs/api.md, docs/cuda.md) -----
  // The backend this worker uses: kHost or kCuda once FinishVirtualIteration
  // has created the device; before that, Config::device as given (maybe
  // kAuto).
  DeviceKind device_kind() const;
  // The stream on which the worker makes the application's buffers ready
  // (ComputeStream above has what it is on each backend). Contract: a buffer
  // returned by Read, PreUpdate or LocalAccess is ready on this stream when
  // the call returns; the application's work on it must be complete, or
  // enqueued on this stream, before it calls PostRead, Update or
  // PostLocalAccess. Application thread only; the stream lives until
  // Shutdown().
  ComputeStream compute_stream() const;

  // Copies `floats` floats from a buffer this worker returned (Read,
  // PreUpdate, LocalAccess; any device memory of this worker) to host memory
  // `host`, or back, on compute_stream() after the work already enqueued
  // there, and waits for it. Works on every backend: the portable way to look
  // at or fill a buffer from the host (a CUDA buffer cannot be dereferenced
  // there). Application thread only; after FinishVirtualIteration, before
  // Shutdown (kFailedPrecondition otherwise).
  Status CopyToHost(float* host, const float* device_buffer, size_t floats);
  Status CopyFromHost(float* device_buffer, const float* host, size_t floats);
  // Runs `work` on the host in compute_stream() order: after the work
  // enqueued there before it, before the work enqueued after it; returns at
  // once. On the host backend this is how an application's "kernels" are
  // ordered like a GPU's (Config::async_host_streams runs them late, to show
  // a missing ordering); on CUDA it is a host function (cudaLaunchHostFunc)
  // and must not touch device memory or call CUDA. `work` must not throw or
  // call this GeePS. Same phases as CopyToHost.
  Status EnqueueHostWork(std::function<void()> work);
  // Blocks until everything enqueued on compute_stream() has run; returns
  // the first error of the worker's own operations there, if any.
  Status SynchronizeComputeStream();
  // Where host code may read and write a buffer this worker returned (Read,
  // PreUpdate, LocalAccess) in place, with no CopyToHost / CopyFromHost: on
  // the host backend, the buffer's own memory (with opaque device pointers,
  // its translation); nullptr where the host cannot reach device memory
  // (CUDA, the host backend's no-alias test mode), before
  // FinishVirtualIteration, after Shutdown, and for nullptr. Host code on
  // it keeps the contract above like a kernel: the buffer is ready when the
  // call that returned it returns, and the host's work must be done before
  // PostRead, Update or PostLocalAccess. Application thread only. (The
  // libtorch adapter of examples/torch makes tensors over it: no copy.)
  const float* HostAddress(const float* buffer) const;
  float* HostAddress(float* buffer) const;

  // ---- Phase 1: the virtual iteration -------------------------------------
  // Records a read of `rows` of shared table `table` with staleness at most
  // `slack` clocks (0 = BSP, kUnboundedSlack = asynchronous).
  // Errors: unknown or local table, empty rows, row out of range, duplicate
  // row, negative slack, wrong phase.
  StatusOr<ReadHandle> VirtualRead(TableId table, const std::vector<RowIndex>& rows, int slack);
  // Same, with Config::default_slack.
  StatusOr<ReadHandle> VirtualRead(TableId table, const std::vector<RowIndex>& rows);
  // Records the end of that read: its buffer is handed back here.
  Status VirtualPostRead(ReadHandle handle);

  // Records an update (deltas added to `rows` of shared table `table`).
  StatusOr<UpdateHandle> VirtualPreUpdate(TableId table, const std::vector<RowIndex>& rows);
  // zeroed=false: PreUpdate's buffer is not zeroed (its contents are
  // unspecified), for an application that writes every element before
  // Update (as a backward pass that writes, not accumulates, its
  // gradients does): one pass over the update's bytes fewer per clock.
  StatusOr<UpdateHandle> VirtualPreUpdate(TableId table, const std::vector<RowIndex>& rows,
                                          bool zeroed);
  // Records the end of that update: its deltas are handed over here.
  Status VirtualUpdate(UpdateHandle handle);

  // Records an access to rows of local table `table`. fetch=false: the old
  // contents are not needed (the buffer's contents are unspecified).
  StatusOr<LocalHandle> VirtualLocalAccess(TableId table, const std::vector<RowIndex>& rows,
                                           bool fetch);
  // Records a read-only access to rows of local table `table`: the rows are
  // fetched and must not be written (LocalRead returns them const), so its
  // end writes nothing back (no copy to host memory when the memory manager
  // keeps the table there). Closed by VirtualPostLocalAccess like any other.
  StatusOr<LocalHandle> VirtualLocalRead(TableId table, const std::vector<RowIndex>& rows);
  // keep=false: the contents may be dropped after this access. (A read-only
  // access with keep=true leaves the rows as they were.)
  Status VirtualPostLocalAccess(LocalHandle handle, bool keep);

  // Ends the recorded iteration; later operations are the prologue.
  Status VirtualClock();
  // Builds indexes, allocates device memory, subscribes to the servers and
  // starts the background threads. kResourceExhausted when the device memory
  // budget is too small (the message gives the numbers).
  Status FinishVirtualIteration();

  // ---- Phase 2: real iterations -------------------------------------------
  // Ends the set-up: after it come the prologue's calls (if any were
  // recorded), then the repeated iteration. Once, after
  // FinishVirtualIteration (kFailedPrecondition otherwise).
  Status StartIterations();

  // Returns the rows (contiguous, in request order, row_width floats each) in
  // device memory, valid until PostRead. Blocks until the rows satisfy the
  // read's slack, at most Config::timeout.
  StatusOr<const float*> Read(ReadHandle handle);
  // Hands the read's buffer back: the application's work on it must be
  // complete or enqueued on compute_stream(). The pointer is invalid after.
  Status PostRead(ReadHandle handle);
  // Returns a zeroed device buffer for the deltas of the update's rows
  // (not zeroed if recorded with zeroed=false). On
  // the host backend an update may be sent from this buffer itself; then
  // PreUpdate first waits (at most Config::timeout) until the previous
  // clock's update has left it, which under BSP it always has.
  StatusOr<float*> PreUpdate(UpdateHandle handle);
  // Adds the deltas into the parameters; they reach the servers when the
  // table's last update of the iteration is done.
  Status Update(UpdateHandle handle);
  // Returns the local rows (contiguous, in request order) in device memory.
  // kFailedPrecondition for an access recorded by VirtualLocalRead.
  StatusOr<float*> LocalAccess(LocalHandle handle);
  // The rows of a read-only local access (VirtualLocalRead), contiguous in
  // request order, in device memory, valid until PostLocalAccess.
  // kFailedPrecondition for an access recorded by VirtualLocalAccess.
  StatusOr<const float*> LocalRead(LocalHandle handle);
  // Hands the local rows back (work on them complete or enqueued on
  // compute_stream()); they are written back if the access was recorded with
  // keep=true. The pointer is invalid after.
  Status PostLocalAccess(LocalHandle handle);
  // Ends an iteration.
  Status Clock();

  // ---- Between iterations -------------------------------------------------
  // Blocks until every row this worker reads reflects the updates of all
  // workers up to this worker's clock (at most Config::timeout). Useful
  // after the last Clock() in asynchronous mode, or before CopyRows.
  Status Sync();
  // Copies rows of a shared table from this worker's parameter cache (rows it
  // reads or updates), or of a local table, to host memory `out` (rows.size() *
  // row_width floats). Only between iterations.
  Status CopyRows(TableId table, const std::vector<RowIndex>& rows, float* out);

  // Counters of this worker (stats.h); any thread, any phase.
  WorkerStats GetStats() const;

  // ---- Checkpoints (Config::checkpoint_dir; docs/api.md) ------------------
  // Asks every server partition to checkpoint at the end of the first clock
  // whose updates this worker has not started sending (the current
  // iteration's when called between iterations). Returns the clock of that
  // checkpoint. Any one worker may ask; the application thread only.
  // kFailedPrecondition when checkpoint_dir is empty.
  StatusOr<int64_t> RequestCheckpoint();
  // The clock this job resumed at (Config::resume), or 0 for a fresh start.
  // Valid from the start. A resumed worker runs its prologue (its reads
  // see the restored rows, its updates are discarded), then continues with
  // iteration resumed_clock() - 1 (iteration i runs at clock i + 1).
  int64_t resumed_clock() const;

  // Stops this worker's background threads (joined before it returns); every
  // later call returns kFailedPrecondition. Idempotent; never blocks longer
  // than the time to join threads.
  Status Shutdown();

 private:
  friend class internal::GeePSAccess;
  explicit GeePS(std::unique_ptr<client::Worker> impl);
  std::unique_ptr<client::Worker> impl_;
};

}  // namespace geeps

#endif  // GEEPS_GEEPS_H_
