#include "client/swap_engine.h"

#include <algorithm>
#include <cstring>

#include "common/mutex.h"

namespace geeps::client {

using SteadyClock = std::chrono::steady_clock;

SwapEngine::SwapEngine(device::Device* device, MemoryManager* memory, std::vector<Access> accesses,
                       std::vector<Event> prologue, std::vector<Event> iteration, int depth,
                       std::chrono::milliseconds timeout)
    : device_(device),
      memory_(memory),
      accesses_(std::move(accesses)),
      prologue_(std::move(prologue)),
      iteration_(std::move(iteration)),
      depth_(depth),
      timeout_(timeout) {
  TableId max_table = 0;
  for (const Access& a : accesses_) max_table = std::max(max_table, a.table);
  writebacks_done_.assign(max_table + 1, 0);
}

SwapEngine::~SwapEngine() { Stop(); }

Status SwapEngine::Start() {
  GEEPS_ASSIGN_OR_RETURN(in_stream_, device_->CreateStream());
  GEEPS_ASSIGN_OR_RETURN(out_stream_, device_->CreateStream());
  GEEPS_ASSIGN_OR_RETURN(released_, device_->CreateEvent());
  close_events_.resize(accesses_.size());
  for (size_t h = 0; h < accesses_.size(); ++h) {
    if (!accesses_[h].swapped) continue;
    GEEPS_ASSIGN_OR_RETURN(close_events_[h], device_->CreateEvent());
  }
  alloc_thread_ = std::thread([this] { AllocLoop(); });
  reclaim_thread_ = std::thread([this] { ReclaimLoop(); });
  return Status::OK();
}

void SwapEngine::Stop() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  memory_->CancelWaits();
  if (alloc_thread_.joinable()) alloc_thread_.join();
  if (reclaim_thread_.joinable()) reclaim_thread_.join();
  std::deque<Ready> left;
  {
    common::MutexLock lock(&mu_);
    left.swap(ready_);
  }
  for (Ready& r : left) {
    if (r.buffer) memory_->Release(r.buffer);
  }
}

Status SwapEngine::CopyIn(const Access& a, float* buffer) {
  const float* src = a.host_rows;
  if (!src) {  // gather the scattered rows on the host
    for (size_t i = 0; i < a.rows.size(); ++i)
      std::memcpy(a.staging + i * a.width, a.table_base + a.rows[i] * a.width,
                  a.width * sizeof(float));
    src = a.staging;
  }
  // The buffer came from the pool: the application's work on its previous
  // contents must be done before it is overwritten.
  GEEPS_RETURN_IF_ERROR(device_->StreamWait(in_stream_.get(), released_.get()));
  GEEPS_RETURN_IF_ERROR(
      device_->Copy(buffer, src, a.bytes(), device::CopyKind::kHostToDevice, in_stream_.get()));
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(in_stream_.get()));
  memory_->AddCopy(true, a.bytes());
  return Status::OK();
}

Status SwapEngine::CopyOut(int handle, float* buffer) {
  const Access& a = accesses_[handle];
  float* dst = a.host_rows ? a.host_rows : a.staging;
  // The application's work that wrote the buffer must be done first.
  GEEPS_RETURN_IF_ERROR(device_->StreamWait(out_stream_.get(), close_events_[handle].get()));
  GEEPS_RETURN_IF_ERROR(
      device_->Copy(dst, buffer, a.bytes(), device::CopyKind::kDeviceToHost, out_stream_.get()));
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(out_stream_.get()));
  if (!a.host_rows) {  // scatter them back
    for (size_t i = 0; i < a.rows.size(); ++i)
      std::memcpy(a.table_base + a.rows[i] * a.width, a.staging + i * a.width,
                  a.width * sizeof(float));
  }
  memory_->AddCopy(false, a.bytes());
  return Status::OK();
}

void SwapEngine::AllocLoop() {
  // Write-backs of each table that must be done before the next open of it.
  std::vector<int64_t> writebacks_due;
  {
    common::MutexLock lock(&mu_);  // (its size is fixed)
    writebacks_due.assign(writebacks_done_.size(), 0);
  }
  bool in_prologue = !prologue_.empty();
  size_t pos = 0;
  for (;;) {
    const std::vector<Event>& events = in_prologue ? prologue_ : iteration_;
    if (events.empty()) return;
    const Event e = events[pos];
    if (++pos == events.size()) {
      pos = 0;
      in_prologue = false;
    }
    const Access& a = accesses_[e.handle];
    if (!e.open) {
      if (a.keep) ++writebacks_due[a.table];
      continue;
    }
    {
      common::MutexLock lock(&mu_);
      lock.Wait(cv_, [&]() GEEPS_REQUIRES(mu_) {
        return stop_ || (static_cast<int>(ready_.size()) < depth_ &&
                         writebacks_done_[a.table] >= writebacks_due[a.table]);
      });
      if (stop_) return;
    }
    Ready r{e.handle, nullptr, Status::OK()};
    StatusOr<float*> buffer = TakeBuffer(a.bytes());
    if (!buffer.ok()) {
      r.status = buffer.status();
    } else {
      r.buffer = *buffer;
      if (a.fetch) r.status = CopyIn(a, r.buffer);
    }
    {
      common::MutexLock lock(&mu_);
      if (stop_) {
        if (r.buffer) memory_->Release(r.buffer);
        return;
      }
      ready_.push_back(r);
    }
    cv_.notify_all();
    if (!r.status.ok()) return;
  }
}

StatusOr<float*> SwapEngine::TakeBuffer(uint64_t bytes) {
  // What the application's own accesses need to fit in sequence order.
  const uint64_t reserve = std::max(memory_->plan().peak_bytes, memory_->plan().fit_extent_bytes);
  for (;;) {
    if (float* b = memory_->TryAcquireLeaving(bytes, reserve)) return b;
    common::MutexLock lock(&mu_);
    if (stop_) return CancelledError("swap engine stopped");
    if (app_waiting_) break;
    // Frees come from the application and the reclaim thread; poll briefly.
    lock.WaitFor(cv_, std::chrono::milliseconds(1),
                 [&]() GEEPS_REQUIRES(mu_) { return stop_ || app_waiting_; });
  }
  return memory_->Acquire(bytes, timeout_);
}

void SwapEngine::ReclaimLoop() {
  for (;;) {
    std::pair<int, float*> job;
    {
      common::MutexLock lock(&mu_);
      lock.Wait(cv_, [&]() GEEPS_REQUIRES(mu_) { return stop_ || !to_reclaim_.empty(); });
      if (to_reclaim_.empty()) return;  // stopping, nothing left to write back
      job = to_reclaim_.front();
      to_reclaim_.pop_front();
    }
    const Access& a = accesses_[job.first];
    Status st = CopyOut(job.first, job.second);
    memory_->Release(job.second);
    {
      common::MutexLock lock(&mu_);
      if (!st.ok() && reclaim_error_.ok()) reclaim_error_ = st;
      ++writebacks_done_[a.table];
      ++writebacks_finished_;
    }
    cv_.notify_all();
  }
}

StatusOr<float*> SwapEngine::Open(int handle) {
  const auto start = SteadyClock::now();
  common::MutexLock lock(&mu_);
  app_waiting_ = true;
  cv_.notify_all();
  const bool ok = lock.WaitUntil(cv_, start + timeout_,
                                 [&]() GEEPS_REQUIRES(mu_) { return stop_ || !ready_.empty(); });
  app_waiting_ = false;
  if (!ok)
    return DeadlineExceededError("LocalAccess: local data was not swapped in within " +
                                 std::to_string(timeout_.count()) + " ms");
  if (ready_.empty()) return CancelledError("LocalAccess: the worker is shutting down");
  Ready r = ready_.front();
  if (r.handle != handle)
    return InternalError("swap schedule out of step: prefetched local#" + std::to_string(r.handle) +
                         ", opening local#" + std::to_string(handle));
  ready_.pop_front();
  lock.Unlock();
  cv_.notify_all();
  memory_->AddStall({MemoryManager::Kind::kLocal, handle}, SteadyClock::now() - start);
  if (!r.status.ok()) return r.status;
  return r.buffer;
}

Status SwapEngine::NoteRelease(device::Stream* compute) {
  return device_->Record(released_.get(), compute);
}

Status SwapEngine::Close(int handle, float* buffer, device::Stream* compute) {
  const Access& a = accesses_[handle];
  if (!a.keep) {
    Status st = NoteRelease(compute);
    memory_->Release(buffer);
    return st;
  }
  if (Status st = device_->Record(close_events_[handle].get(), compute); !st.ok()) {
    memory_->Release(buffer);
    return st;
  }
  {
    common::MutexLock lock(&mu_);
    if (!reclaim_error_.ok()) return reclaim_error_;
    to_reclaim_.emplace_back(handle, buffer);
    ++writebacks_handed_;
  }
  cv_.notify_all();
  return Status::OK();
}

Status SwapEngine::Drain() {
  common::MutexLock lock(&mu_);
  if (!lock.WaitFor(cv_, timeout_, [&]() GEEPS_REQUIRES(mu_) {
        return writebacks_finished_ >= writebacks_handed_;
      }))
    return DeadlineExceededError("local data was not written back within " +
                                 std::to_string(timeout_.count()) + " ms");
  return reclaim_error_;
}

}  // namespace geeps::client
