#include "device/host/host_stream.h"

#include <algorithm>
#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "common/logging.h"
#include "common/mutex.h"
#include "device/scoped_device.h"

namespace geeps::device::host {
namespace {

thread_local int current_host_device = -1;

}  // namespace

int CurrentHostDevice() { return current_host_device; }
void SetCurrentHostDevice(int ordinal) { current_host_device = ordinal; }

namespace {

// The thread's current host device, for ScopedCurrentDevice (never fails).
struct HostCurrentDevice {
  static bool Get(int* ordinal) {
    *ordinal = CurrentHostDevice();
    return true;
  }
  static bool Set(int ordinal) {
    SetCurrentHostDevice(ordinal);
    return true;
  }
};

using ScopedHostDevice = ScopedCurrentDevice<HostCurrentDevice>;

}  // namespace

StatusOr<std::unique_ptr<HostStream>> HostStream::Create(bool async,
                                                         std::chrono::microseconds max_delay,
                                                         int ordinal) {
  std::unique_ptr<HostStream> stream;
  try {
    stream.reset(new HostStream(async, max_delay, ordinal));
    stream->thread_ = std::thread([s = stream.get()] { s->Run(); });
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("host device: out of memory");
  } catch (const std::system_error& e) {
    return ResourceExhaustedError(std::string("host device: cannot start a stream thread: ") +
                                  e.what());
  }
  return stream;
}

HostStream::~HostStream() {
  const ScopedHostDevice current(ordinal_);  // as ~CudaStream (cuda_device.cc)
  {
    common::MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  if (!first_error_.ok()) {
    GEEPS_LOG(Warning) << "host device: stream destroyed with an "
                          "unreported error: "
                       << first_error_;
  }
}

HostEvent::~HostEvent() {
  // As ~CudaEvent (cuda_device.cc), which destroys the event on its device.
  const ScopedHostDevice current(ordinal_);
}

Status HostStream::Enqueue(Task task, Where where) {
  common::MutexLock lock(&mu_);
  try {
    queue_.push_back(std::move(task));
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("host device: out of memory enqueuing");
  }
  ++enqueued_;
  if (!async_ && where == Where::kInlineIfIdle && !running_ && queue_.size() == 1) {
    RunFront(lock);  // errors are kept for Synchronize(), as on the thread
    return Status::OK();
  }
  lock.Unlock();
  work_cv_.notify_one();
  return Status::OK();
}

Status HostStream::Synchronize() {
  common::MutexLock lock(&mu_);
  const uint64_t target = enqueued_;
  while (completed_ < target) {
    if (!async_ && !running_ && !queue_.empty()) {
      RunFront(lock);
      continue;
    }
    lock.Wait(done_cv_);
  }
  Status first = std::move(first_error_);
  first_error_ = Status::OK();
  return first;
}

HostStream::HostStream(bool async, std::chrono::microseconds max_delay, int ordinal)
    : async_(async),
      ordinal_(ordinal),
      max_delay_us_(std::max<int64_t>(0, max_delay.count())),
      random_(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(this) >> 4) ^
              static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count())) {}

void HostStream::Run() {
  SetCurrentHostDevice(ordinal_);  // as a CUDA stream's work runs on its device
  common::MutexLock lock(&mu_);
  for (;;) {
    lock.Wait(work_cv_,
              [&]() GEEPS_REQUIRES(mu_) { return !running_ && (stopping_ || !queue_.empty()); });
    if (queue_.empty()) return;  // stopping_ and drained
    if (async_ && max_delay_us_ > 0) {
      // Only this thread runs tasks in the asynchronous mode, so the
      // queue is still non-empty after the delay.
      const int64_t delay = static_cast<int64_t>(random_() % (max_delay_us_ + 1));
      lock.Unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(delay));
      lock.Lock();
    }
    RunFront(lock);
  }
}

void HostStream::RunFront(common::MutexLock& lock) {
  Task task = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  lock.Unlock();
  Status status = RunTask(task);
  task = nullptr;  // drop captures outside the lock
  lock.Lock();
  Complete(std::move(status));
}

bool HostStream::BeginInline() {
  common::MutexLock lock(&mu_);
  if (async_ || running_ || !queue_.empty()) return false;
  running_ = true;
  ++enqueued_;
  return true;
}

void HostStream::EndInline(Status status) {
  common::MutexLock lock(&mu_);
  Complete(std::move(status));
}

void HostStream::Complete(Status status) {
  running_ = false;
  if (!status.ok() && first_error_.ok()) first_error_ = std::move(status);
  ++completed_;
  done_cv_.notify_all();
  // Wake the stream thread only if it has something to do (a task run
  // by a caller would otherwise wake it for nothing, a thread switch per
  // operation).
  if (!queue_.empty() || stopping_) work_cv_.notify_one();
}

Status HostStream::RunTask(const Task& task) const {
  // A task runs on the stream's thread or inline in a caller (Enqueue,
  // Synchronize), which HostDevice made current first; another current
  // device means an entry point or thread that forgot to.
  if (const int current = CurrentHostDevice(); current != ordinal_) {
    return InternalError(
        "host device: an operation of a stream of host:" + std::to_string(ordinal_) +
        " ran on a thread whose current device is host:" + std::to_string(current) + " (-1: none)");
  }
  try {
    return task();
  } catch (const std::exception& e) {
    return InternalError(std::string("host device: operation threw: ") + e.what());
  } catch (...) {
    return InternalError("host device: operation threw");
  }
}

}  // namespace geeps::device::host
