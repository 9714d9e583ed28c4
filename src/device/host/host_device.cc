#include "device/host/host_device.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>

#include "common/logging.h"

namespace geeps::device::host {

namespace {

// Sets *out = a * b * c; false on overflow.
bool CheckedProduct(size_t a, size_t b, size_t c, size_t* out) {
  size_t ab;
  return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out);
}

std::string Describe(const char* op, const char* arg, const void* p, size_t bytes) {
  std::ostringstream os;
  os << op << ": " << arg << " " << p << " (" << bytes << " bytes)";
  return os.str();
}

}  // namespace

// Device blocks (by address, for range look-ups) and pinned blocks. Shared
// between the device and the tasks it queues, so that a task can check its
// pointers when it runs.
//
// Device blocks are known by the address the caller sees: the block's host
// address plus `offset` (0, or kOpaqueOffset in the opaque-pointer mode).
// Range checks take caller addresses; ToHost() turns a checked one back into
// the address the kernels use. Pinned blocks are always plain host memory.
class AllocationTable {
 public:
  AllocationTable(uint64_t budget, uintptr_t offset) : budget_(budget), offset_(offset) {}
  ~AllocationTable() { FreeAll(); }

  // The host address of device address `p` (any address inside or just past
  // a block; the translation is a fixed offset, so no lock is needed).
  template <typename T>
  T* ToHost(T* p) const {
    if (offset_ == 0) return p;
    return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) - offset_);
  }

  StatusOr<void*> Allocate(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (budget_ != 0 && (bytes > budget_ || in_use_ > budget_ - bytes)) {
      std::ostringstream os;
      os << "host device: Allocate(" << bytes
         << " bytes) exceeds the device memory budget: requested " << bytes << " bytes, in use "
         << in_use_ << " bytes, budget " << budget_ << " bytes";
      return ResourceExhaustedError(os.str());
    }
    GEEPS_ASSIGN_OR_RETURN(void* p, AlignedAlloc(bytes));
    void* device_address = ToDevice(p);
    try {
      device_.emplace(static_cast<const char*>(device_address), bytes);
    } catch (const std::bad_alloc&) {
      std::free(p);
      return ResourceExhaustedError("host device: out of host memory");
    }
    in_use_ += bytes;
    return device_address;
  }

  // False when `p` is not a live device block.
  bool Free(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = device_.find(static_cast<const char*>(p));
    if (it == device_.end()) return false;
    in_use_ -= it->second;
    device_.erase(it);
    std::free(ToHost(p));
    return true;
  }

  StatusOr<void*> AllocatePinned(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    GEEPS_ASSIGN_OR_RETURN(void* p, AlignedAlloc(bytes));
    try {
      pinned_.insert(p);
    } catch (const std::bad_alloc&) {
      std::free(p);
      return ResourceExhaustedError("host device: out of host memory");
    }
    return p;
  }

  bool FreePinned(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pinned_.erase(p) == 0) return false;
    std::free(p);
    return true;
  }

  void FreeAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [block, bytes] : device_) {
      std::free(ToHost(const_cast<char*>(block)));
    }
    for (void* p : pinned_) std::free(p);
    device_.clear();
    pinned_.clear();
    in_use_ = 0;
  }

  uint64_t in_use() const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_;
  }

  // Bytes from `p` to the end of the live device block holding it (its end
  // included, so that an empty range just past a block is inside), or nullopt.
  std::optional<size_t> Available(const void* p) const {
    const char* address = static_cast<const char*>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = device_.upper_bound(address);
    if (it == device_.begin()) return std::nullopt;
    --it;
    const char* end = it->first + it->second;
    if (std::greater<>()(address, end)) return std::nullopt;
    return static_cast<size_t>(end - address);
  }

  // kInvalidArgument (when enqueuing) or kDeviceError (when running) unless
  // [p, p + bytes) lies inside one live device block.
  Status CheckRange(const char* op, const char* arg, const void* p, size_t bytes,
                    bool running) const {
    std::optional<size_t> available = Available(p);
    if (available && *available >= bytes) return Status::OK();
    if (running) {
      return DeviceError(Describe(op, arg, p, bytes) +
                         " is no longer inside a live device allocation "
                         "(freed while the operation was queued?)");
    }
    return InvalidArgumentError(Describe(op, arg, p, bytes) +
                                " is not inside a live device allocation of "
                                "this device");
  }

 private:
  void* ToDevice(void* p) const {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) + offset_);
  }

  // Rounds up to kAlignment; a 0-byte block still gets a distinct address.
  static StatusOr<void*> AlignedAlloc(size_t bytes) {
    constexpr size_t kAlign = HostDevice::kAlignment;
    if (bytes > SIZE_MAX - kAlign) {
      return ResourceExhaustedError("host device: cannot allocate " + std::to_string(bytes) +
                                    " bytes");
    }
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) & ~(kAlign - 1);
    void* p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) {
      return ResourceExhaustedError(
          "host device: out of host memory "
          "allocating " +
          std::to_string(bytes) + " bytes");
    }
    return p;
  }

  const uint64_t budget_;
  const uintptr_t offset_;  // device address - host address
  mutable std::mutex mu_;
  // GUARDED_BY(mu_); block (device address) -> bytes. std::less<> orders any
  // two pointers.
  std::map<const char*, size_t, std::less<>> device_;
  std::unordered_set<void*> pinned_;  // GUARDED_BY(mu_)
  uint64_t in_use_ = 0;               // GUARDED_BY(mu_)
};

// A worker thread running queued tasks in order.
class HostStream final : public Stream {
 public:
  using Task = std::function<Status()>;

  // `async`: the asynchronous host mode (DeviceOptions::async_streams):
  // each task runs on the stream's thread after a random delay of up to
  // `max_delay`, and Synchronize() never runs tasks inline.
  static StatusOr<std::unique_ptr<HostStream>> Create(bool async,
                                                      std::chrono::microseconds max_delay) {
    std::unique_ptr<HostStream> stream;
    try {
      stream.reset(new HostStream(async, max_delay));
      stream->thread_ = std::thread([s = stream.get()] { s->Run(); });
    } catch (const std::bad_alloc&) {
      return ResourceExhaustedError("host device: out of memory");
    } catch (const std::system_error& e) {
      return ResourceExhaustedError(std::string("host device: cannot start a stream thread: ") +
                                    e.what());
    }
    return stream;
  }

  // Runs what is still queued, then joins the thread.
  ~HostStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
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

  // How a task may run: kInlineIfIdle lets the caller run it at once when
  // the stream is idle in the default (synchronous) mode, which is the
  // same order and costs no thread hand-off; kOnStreamThread is for tasks
  // that may block (event waits, emulated copy times) or run the user's
  // code (host functions), which must not run inside the caller.
  enum class Where { kInlineIfIdle, kOnStreamThread };

  Status Enqueue(Task task, Where where = Where::kInlineIfIdle) {
    std::unique_lock<std::mutex> lock(mu_);
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
    lock.unlock();
    work_cv_.notify_one();
    return Status::OK();
  }

  // Waits until everything enqueued so far has run. The caller would only
  // block, so it runs queued tasks itself while the stream thread is not
  // running one (tasks still run one at a time, in order): enqueue-then-
  // synchronize costs no thread hand-off.
  Status Synchronize() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = enqueued_;
    while (completed_ < target) {
      if (!async_ && !running_ && !queue_.empty()) {
        RunFront(lock);
        continue;
      }
      done_cv_.wait(lock);
    }
    Status first = std::move(first_error_);
    first_error_ = Status::OK();
    return first;
  }

 private:
  HostStream(bool async, std::chrono::microseconds max_delay)
      : async_(async),
        max_delay_us_(std::max<int64_t>(0, max_delay.count())),
        random_(
            static_cast<uint32_t>(reinterpret_cast<uintptr_t>(this) >> 4) ^
            static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count())) {}

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return !running_ && (stopping_ || !queue_.empty()); });
      if (queue_.empty()) return;  // stopping_ and drained
      if (async_ && max_delay_us_ > 0) {
        // Only this thread runs tasks in the asynchronous mode, so the
        // queue is still non-empty after the delay.
        const int64_t delay = static_cast<int64_t>(random_() % (max_delay_us_ + 1));
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(delay));
        lock.lock();
      }
      RunFront(lock);
    }
  }

  // Runs the task at the front of the queue with mu_ released. REQUIRES:
  // lock holds mu_, !running_, the queue is not empty.
  void RunFront(std::unique_lock<std::mutex>& lock) {
    Task task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    Status status = RunTask(task);
    task = nullptr;  // drop captures outside the lock
    lock.lock();
    running_ = false;
    if (!status.ok() && first_error_.ok()) first_error_ = std::move(status);
    ++completed_;
    done_cv_.notify_all();
    // Wake the stream thread only if it has something to do (a task run
    // by a caller would otherwise wake it for nothing, a thread switch per
    // operation).
    if (!queue_.empty() || stopping_) work_cv_.notify_one();
  }

  static Status RunTask(const Task& task) {
    try {
      return task();
    } catch (const std::exception& e) {
      return InternalError(std::string("host device: operation threw: ") + e.what());
    } catch (...) {
      return InternalError("host device: operation threw");
    }
  }

  const bool async_;
  const int64_t max_delay_us_;
  std::minstd_rand random_;  // the stream thread's only
  std::mutex mu_;
  std::condition_variable work_cv_;  // queue_ non-empty or stopping_
  std::condition_variable done_cv_;  // completed_ advanced
  std::deque<Task> queue_;           // GUARDED_BY(mu_)
  uint64_t enqueued_ = 0;            // GUARDED_BY(mu_)
  uint64_t completed_ = 0;           // GUARDED_BY(mu_)
  bool stopping_ = false;            // GUARDED_BY(mu_)
  bool running_ = false;             // a task is running; GUARDED_BY(mu_)
  Status first_error_;               // GUARDED_BY(mu_)
  std::thread thread_;
};

// Records count up; the event is complete when the marker of its latest
// record has run. Shared with queued markers and waits, so an event may be
// destroyed while they are queued.
struct EventState {
  std::mutex mu;
  std::condition_variable cv;  // completed advanced
  uint64_t recorded = 0;       // GUARDED_BY(mu)
  uint64_t completed = 0;      // GUARDED_BY(mu)
};

class HostEvent final : public Event {
 public:
  HostEvent() : state_(std::make_shared<EventState>()) {}
  const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  const std::shared_ptr<EventState> state_;
};

namespace {

StatusOr<HostStream*> AsHostStream(Stream* stream) {
  if (stream == nullptr) return InvalidArgumentError("stream is null");
  auto* host = dynamic_cast<HostStream*>(stream);
  if (host == nullptr) {
    return InvalidArgumentError("stream was not created by a host device");
  }
  return host;
}

StatusOr<HostEvent*> AsHostEvent(Event* event) {
  if (event == nullptr) return InvalidArgumentError("event is null");
  auto* host = dynamic_cast<HostEvent*>(event);
  if (host == nullptr) {
    return InvalidArgumentError("event was not created by a host device");
  }
  return host;
}

Status CheckNotNull(const char* op, const char* arg, const void* p) {
  if (p != nullptr) return Status::OK();
  return InvalidArgumentError(std::string(op) + ": " + arg + " is null");
}

// The kernels: plain loops, run on a stream's thread after all checks.
void GatherRows(float* dst, const float* src, const uint32_t* index, size_t n, size_t width) {
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * width, src + size_t{index[i]} * width, width * sizeof(float));
  }
}

void ScatterAddRows(float* dst, const float* src, const uint32_t* index, size_t n, size_t width) {
  for (size_t i = 0; i < n; ++i) {
    float* row = dst + size_t{index[i]} * width;
    const float* update = src + i * width;
    for (size_t j = 0; j < width; ++j) row[j] += update[j];
  }
}

void ScatterRows(float* dst, const float* src, const uint32_t* index, size_t n, size_t width) {
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(dst + size_t{index[i]} * width, src + i * width, width * sizeof(float));
  }
}

// Bytes of `n` rows of `width` floats, or kInvalidArgument on overflow.
StatusOr<size_t> FloatBytes(const char* op, size_t n, size_t width) {
  size_t bytes;
  if (!CheckedProduct(n, width, sizeof(float), &bytes)) {
    return InvalidArgumentError(std::string(op) + ": size " + std::to_string(n) + " x " +
                                std::to_string(width) + " floats overflows");
  }
  return bytes;
}

}  // namespace

HostDevice::HostDevice(const DeviceOptions& options)
    : memory_budget_(options.memory_budget),
      copy_bandwidth_(options.emulated_copy_bandwidth),
      async_streams_(options.async_streams),
      async_max_delay_(options.async_max_delay),
      table_(std::make_shared<AllocationTable>(options.memory_budget,
                                               options.opaque_pointers ? kOpaqueOffset : 0)) {}

HostDevice::~HostDevice() { table_->FreeAll(); }

std::string HostDevice::name() const { return "host"; }

StatusOr<void*> HostDevice::Allocate(size_t bytes) { return table_->Allocate(bytes); }

void HostDevice::Free(void* p) {
  if (p == nullptr || table_->Free(p)) return;
  GEEPS_LOG(Warning) << "host device: Free(" << p
                     << ") of a pointer that is not a live device "
                        "allocation; ignored";
}

StatusOr<void*> HostDevice::AllocatePinned(size_t bytes) { return table_->AllocatePinned(bytes); }

void HostDevice::FreePinned(void* p) {
  if (p == nullptr || table_->FreePinned(p)) return;
  GEEPS_LOG(Warning) << "host device: FreePinned(" << p
                     << ") of a pointer that is not a live pinned "
                        "allocation; ignored";
}

uint64_t HostDevice::bytes_in_use() const { return table_->in_use(); }

uint64_t HostDevice::memory_budget() const { return memory_budget_; }

StatusOr<std::unique_ptr<Stream>> HostDevice::CreateStream() {
  GEEPS_ASSIGN_OR_RETURN(std::unique_ptr<HostStream> stream,
                         HostStream::Create(async_streams_, async_max_delay_));
  return std::unique_ptr<Stream>(std::move(stream));
}

StatusOr<std::unique_ptr<Event>> HostDevice::CreateEvent() {
  try {
    return std::unique_ptr<Event>(std::make_unique<HostEvent>());
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("host device: out of memory");
  }
}

Status HostDevice::Copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream* stream) {
  static constexpr char kOp[] = "Copy";
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, AsHostStream(stream));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(kOp, "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(kOp, "src", src));
  bool dst_on_device = false;
  bool src_on_device = false;
  switch (kind) {
    case CopyKind::kHostToDevice:
      dst_on_device = true;
      break;
    case CopyKind::kDeviceToHost:
      src_on_device = true;
      break;
    case CopyKind::kDeviceToDevice:
      dst_on_device = src_on_device = true;
      break;
    case CopyKind::kHostToHost:
      break;
    default:
      return InvalidArgumentError("Copy: unknown CopyKind " +
                                  std::to_string(static_cast<int>(kind)));
  }
  // Checks the device side(s); `running` picks the error code.
  auto check = [table = table_, dst, src, bytes, dst_on_device,
                src_on_device](bool running) -> Status {
    if (dst_on_device) {
      GEEPS_RETURN_IF_ERROR(table->CheckRange(kOp, "dst", dst, bytes, running));
    }
    if (src_on_device) {
      GEEPS_RETURN_IF_ERROR(table->CheckRange(kOp, "src", src, bytes, running));
    }
    return Status::OK();
  };
  GEEPS_RETURN_IF_ERROR(check(false));
  // Emulated PCIe: a copy between host and device takes at least this long.
  const bool crosses = dst_on_device != src_on_device;
  const auto min_time = std::chrono::nanoseconds(
      crosses && copy_bandwidth_ > 0
          ? static_cast<int64_t>(static_cast<double>(bytes) * 1e9 / copy_bandwidth_)
          : 0);
  void* host_dst = dst_on_device ? table_->ToHost(dst) : dst;
  const void* host_src = src_on_device ? table_->ToHost(src) : src;
  return host_stream->Enqueue(
      [check, host_dst, host_src, bytes, min_time]() -> Status {
        GEEPS_RETURN_IF_ERROR(check(true));
        const auto start = std::chrono::steady_clock::now();
        std::memmove(host_dst, host_src, bytes);
        if (min_time.count() > 0) std::this_thread::sleep_until(start + min_time);
        return Status::OK();
      },
      min_time.count() > 0 ? HostStream::Where::kOnStreamThread : HostStream::Where::kInlineIfIdle);
}

Status HostDevice::HostFunction(std::function<void()> work, Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, AsHostStream(stream));
  if (!work) return InvalidArgumentError("HostFunction: work is empty");
  return host_stream->Enqueue(
      [work = std::move(work)]() -> Status {
        work();
        return Status::OK();
      },
      HostStream::Where::kOnStreamThread);
}

Status HostDevice::EnqueueIndexed(const char* op, float* dst, const float* src,
                                  const uint32_t* index, size_t n, size_t width,
                                  IndexedSide indexed, Stream* stream, RowKernel kernel) {
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, AsHostStream(stream));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(op, "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(op, "src", src));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(op, "index", index));
  GEEPS_ASSIGN_OR_RETURN(size_t dense_bytes, FloatBytes(op, n, width));
  static_assert(sizeof(uint32_t) == sizeof(float));
  GEEPS_ASSIGN_OR_RETURN(size_t index_bytes, FloatBytes(op, n, 1));
  const bool src_indexed = indexed == IndexedSide::kSource;
  const char* dense_name = src_indexed ? "dst" : "src";
  const char* indexed_name = src_indexed ? "src" : "dst";
  const void* dense = src_indexed ? static_cast<const void*>(dst) : src;
  const void* rows = src_indexed ? static_cast<const void*>(src) : dst;
  // The indexed side's extent depends on the index values, which may only be
  // read when the operation runs; until then only its start is checked.
  auto check = [table = table_, op, dense_name, indexed_name, dense, rows, index, dense_bytes,
                index_bytes](bool running) -> Status {
    GEEPS_RETURN_IF_ERROR(table->CheckRange(op, dense_name, dense, dense_bytes, running));
    GEEPS_RETURN_IF_ERROR(table->CheckRange(op, "index", index, index_bytes, running));
    return table->CheckRange(op, indexed_name, rows, 0, running);
  };
  GEEPS_RETURN_IF_ERROR(check(false));
  return host_stream->Enqueue([check, table = table_, op, indexed_name, rows, dst, src, index, n,
                               width, kernel]() -> Status {
    GEEPS_RETURN_IF_ERROR(check(true));
    if (n == 0) return Status::OK();
    const uint32_t* host_index = table->ToHost(index);
    const uint32_t* max_index = std::max_element(host_index, host_index + n);
    size_t needed;
    if (!CheckedProduct(static_cast<size_t>(*max_index) + 1, width, sizeof(float), &needed) ||
        table->Available(rows).value_or(0) < needed) {
      std::ostringstream os;
      os << op << ": index[" << (max_index - host_index) << "] = " << *max_index << " with width "
         << width << " reaches past the end of the " << indexed_name << " allocation ("
         << table->Available(rows).value_or(0) << " bytes from " << rows << ")";
      return OutOfRangeError(os.str());
    }
    kernel(table->ToHost(dst), table->ToHost(src), host_index, n, width);
    return Status::OK();
  });
}

Status HostDevice::Gather(float* dst, const float* src, const uint32_t* index, size_t n,
                          size_t width, Stream* stream) {
  return EnqueueIndexed("Gather", dst, src, index, n, width, IndexedSide::kSource, stream,
                        &GatherRows);
}

Status HostDevice::ScatterAdd(float* dst, const float* src, const uint32_t* index, size_t n,
                              size_t width, Stream* stream) {
  return EnqueueIndexed("ScatterAdd", dst, src, index, n, width, IndexedSide::kDestination, stream,
                        &ScatterAddRows);
}

Status HostDevice::Scatter(float* dst, const float* src, const uint32_t* index, size_t n,
                           size_t width, Stream* stream) {
  return EnqueueIndexed("Scatter", dst, src, index, n, width, IndexedSide::kDestination, stream,
                        &ScatterRows);
}

Status HostDevice::Add(float* dst, const float* src, size_t count, Stream* stream) {
  static constexpr char kOp[] = "Add";
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, AsHostStream(stream));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(kOp, "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(kOp, "src", src));
  GEEPS_ASSIGN_OR_RETURN(size_t bytes, FloatBytes(kOp, count, 1));
  // device.h: dst == src or disjoint ranges. A partial overlap would race on
  // a GPU (its threads read and write the ranges at once); both backends
  // reject it.
  const uintptr_t dst_at = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t src_at = reinterpret_cast<uintptr_t>(src);
  if (dst_at != src_at && (dst_at < src_at ? src_at - dst_at : dst_at - src_at) < bytes) {
    std::ostringstream os;
    os << "Add: dst " << dst << " and src " << src << " (" << count
       << " floats each) overlap partially; only dst == src or disjoint "
          "ranges are allowed";
    return InvalidArgumentError(os.str());
  }
  auto check = [table = table_, dst, src, bytes](bool running) -> Status {
    GEEPS_RETURN_IF_ERROR(table->CheckRange(kOp, "dst", dst, bytes, running));
    return table->CheckRange(kOp, "src", src, bytes, running);
  };
  GEEPS_RETURN_IF_ERROR(check(false));
  return host_stream->Enqueue(
      [check, host_dst = table_->ToHost(dst), host_src = table_->ToHost(src), count]() -> Status {
        GEEPS_RETURN_IF_ERROR(check(true));
        for (size_t i = 0; i < count; ++i) host_dst[i] += host_src[i];
        return Status::OK();
      });
}

Status HostDevice::Fill(float* dst, float value, size_t count, Stream* stream) {
  static constexpr char kOp[] = "Fill";
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, AsHostStream(stream));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(kOp, "dst", dst));
  GEEPS_ASSIGN_OR_RETURN(size_t bytes, FloatBytes(kOp, count, 1));
  GEEPS_RETURN_IF_ERROR(table_->CheckRange(kOp, "dst", dst, bytes, false));
  return host_stream->Enqueue([table = table_, dst, value, count, bytes]() -> Status {
    GEEPS_RETURN_IF_ERROR(table->CheckRange(kOp, "dst", dst, bytes, /*running=*/true));
    float* host_dst = table->ToHost(dst);
    if (value == 0.0f && !std::signbit(value)) {
      std::memset(host_dst, 0, bytes);  // +0.0f is all zero bits
    } else {
      std::fill(host_dst, host_dst + count, value);
    }
    return Status::OK();
  });
}

Status HostDevice::Record(Event* event, Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(HostEvent * host_event, AsHostEvent(event));
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, AsHostStream(stream));
  std::shared_ptr<EventState> state = host_event->state();
  // The generation counts as recorded before its marker is queued, so the
  // marker never completes one that is not yet recorded; the marker may
  // run inside Enqueue (an idle stream), so state->mu is not held there.
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    generation = ++state->recorded;
  }
  Status queued = host_stream->Enqueue([state, generation] {
    {
      std::lock_guard<std::mutex> marker_lock(state->mu);
      state->completed = std::max(state->completed, generation);
    }
    state->cv.notify_all();
    return Status::OK();
  });
  if (!queued.ok()) {
    // Not queued: nothing will complete it, so no one may wait for it.
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->completed = std::max(state->completed, generation);
    }
    state->cv.notify_all();
  }
  return queued;
}

Status HostDevice::StreamWait(Stream* stream, Event* event) {
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, AsHostStream(stream));
  GEEPS_ASSIGN_OR_RETURN(HostEvent * host_event, AsHostEvent(event));
  std::shared_ptr<EventState> state = host_event->state();
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->completed >= state->recorded) return Status::OK();
    target = state->recorded;
  }
  return host_stream->Enqueue(
      [state, target] {
        std::unique_lock<std::mutex> lock(state->mu);
        state->cv.wait(lock, [&] { return state->completed >= target; });
        return Status::OK();
      },
      HostStream::Where::kOnStreamThread);
}

Status HostDevice::Synchronize(Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, AsHostStream(stream));
  return host_stream->Synchronize();
}

Status HostDevice::EventSynchronize(Event* event) {
  GEEPS_ASSIGN_OR_RETURN(HostEvent * host_event, AsHostEvent(event));
  EventState* state = host_event->state().get();
  std::unique_lock<std::mutex> lock(state->mu);
  const uint64_t target = state->recorded;
  state->cv.wait(lock, [&] { return state->completed >= target; });
  return Status::OK();
}

const void* HostDevice::HostAlias(const void* p) const {
  return p == nullptr ? nullptr : table_->ToHost(p);
}

bool HostDevice::EventDone(Event* event) {
  StatusOr<HostEvent*> host_event = AsHostEvent(event);
  if (!host_event.ok()) return true;  // not an event: nothing to wait for
  EventState* state = (*host_event)->state().get();
  std::lock_guard<std::mutex> lock(state->mu);
  return state->completed >= state->recorded;
}

}  // namespace geeps::device::host
