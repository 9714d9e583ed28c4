// The host device's streams and events. A HostStream is a thread that runs
// queued tasks in order (or, in the default synchronous mode, lets an idle
// caller run them itself: docs/architecture.md, "Threads of the data path");
// a HostEvent counts records and completions, shared with the markers and
// waits queued on streams.
#ifndef GEEPS_DEVICE_HOST_HOST_STREAM_H_
#define GEEPS_DEVICE_HOST_HOST_STREAM_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "common/mutex.h"
#include "device/device.h"
#include "geeps/status.h"

namespace geeps::device::host {

// The calling thread's current host device (-1: none yet), the host
// backend's cudaGetDevice / cudaSetDevice: HostDevice sets it at every entry
// point that allocates, launches or copies, a stream's thread sets it to the
// stream's device, and every task checks it when it runs. Stream and event
// destructors make their device current and restore the previous one when
// they end, as the CUDA backend's do (device/scoped_device.h).
int CurrentHostDevice();
void SetCurrentHostDevice(int ordinal);

// A worker thread running queued tasks in order.
class HostStream final : public Stream {
 public:
  using Task = std::function<Status()>;

  // `async`: the asynchronous host mode (DeviceOptions::async_streams):
  // each task runs on the stream's thread after a random delay of up to
  // `max_delay`, and Synchronize() never runs tasks inline.
  // `ordinal`: the host device the stream belongs to. Its thread makes that
  // device current, and a task that runs on a thread whose current device
  // is another fails with kInternal naming both (reported by Synchronize).
  static StatusOr<std::unique_ptr<HostStream>> Create(bool async,
                                                      std::chrono::microseconds max_delay,
                                                      int ordinal = 0);

  int ordinal() const { return ordinal_; }

  // Runs what is still queued, then joins the thread. Like ~CudaStream, it
  // makes the stream's device current on the calling thread meanwhile and
  // restores the thread's previous device (-1 included) at the end.
  ~HostStream() override;

  // How a task may run: kInlineIfIdle lets the caller run it at once when
  // the stream is idle in the default (synchronous) mode, which is the
  // same order and costs no thread hand-off; kOnStreamThread is for tasks
  // that may block (event waits, emulated copy times) or run the user's
  // code (host functions), which must not run inside the caller.
  enum class Where { kInlineIfIdle, kOnStreamThread };

  Status Enqueue(Task task, Where where = Where::kInlineIfIdle);

  // What Enqueue(task, kInlineIfIdle) does when the stream is idle in the
  // synchronous mode, without making a Task of `work` (no allocation; the
  // host device's copies take it): runs `work` (a callable returning
  // Status, which must not throw) on the calling thread now, its status
  // kept for Synchronize(), and returns true; false when it did not run
  // (then enqueue it).
  template <typename F>
  bool RunIfIdle(F&& work) {
    if (!BeginInline()) return false;
    EndInline(work());
    return true;
  }

  // Waits until everything enqueued so far has run. The caller would only
  // block, so it runs queued tasks itself while the stream thread is not
  // running one (tasks still run one at a time, in order): enqueue-then-
  // synchronize costs no thread hand-off.
  Status Synchronize();

 private:
  HostStream(bool async, std::chrono::microseconds max_delay, int ordinal);

  void Run();
  // Runs the task at the front of the queue with mu_ released (through
  // `lock`, which holds it). REQUIRES: !running_, the queue is not empty.
  // Not analysed: the analysis cannot tie a MutexLock parameter to mu_.
  void RunFront(common::MutexLock& lock) GEEPS_REQUIRES(mu_) GEEPS_NO_THREAD_SAFETY_ANALYSIS;
  Status RunTask(const Task& task) const;
  // RunIfIdle's halves: claims the idle stream for the caller (false: not
  // idle, or the asynchronous mode), then records the task's completion.
  bool BeginInline();
  void EndInline(Status status);
  // Records a finished task's `status` and wakes who waits for it.
  void Complete(Status status) GEEPS_REQUIRES(mu_);

  const bool async_;
  const int ordinal_;
  const int64_t max_delay_us_;
  std::minstd_rand random_;  // the stream thread's only
  common::Mutex mu_;
  std::condition_variable work_cv_;  // queue_ non-empty or stopping_
  std::condition_variable done_cv_;  // completed_ advanced
  std::deque<Task> queue_ GEEPS_GUARDED_BY(mu_);
  uint64_t enqueued_ GEEPS_GUARDED_BY(mu_) = 0;
  uint64_t completed_ GEEPS_GUARDED_BY(mu_) = 0;
  bool stopping_ GEEPS_GUARDED_BY(mu_) = false;
  bool running_ GEEPS_GUARDED_BY(mu_) = false;  // a task is running
  Status first_error_ GEEPS_GUARDED_BY(mu_);
  std::thread thread_;
};

// Records count up; the event is complete when the marker of its latest
// record has run. Shared with queued markers and waits, so an event may be
// destroyed while they are queued.
struct EventState {
  common::Mutex mu;
  std::condition_variable cv;  // completed advanced
  uint64_t recorded GEEPS_GUARDED_BY(mu) = 0;
  uint64_t completed GEEPS_GUARDED_BY(mu) = 0;
};

class HostEvent final : public Event {
 public:
  // `ordinal`: the host device that created the event.
  explicit HostEvent(int ordinal) : ordinal_(ordinal), state_(std::make_shared<EventState>()) {}
  // Like ~CudaEvent: makes the event's device current while it goes and
  // restores the calling thread's previous device.
  ~HostEvent() override;

  int ordinal() const { return ordinal_; }
  const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  const int ordinal_;
  const std::shared_ptr<EventState> state_;
};

}  // namespace geeps::device::host

#endif  // GEEPS_DEVICE_HOST_HOST_STREAM_H_
