#include "device/host/host_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <new>
#include <sstream>
#include <thread>
#include <utility>

#include "common/logging.h"
#include "common/mutex.h"
#include "device/host/allocation_table.h"
#include "device/host/host_stream.h"

namespace geeps::device::host {

namespace {

// Sets *out = a * b * c; false on overflow.
bool CheckedProduct(size_t a, size_t b, size_t c, size_t* out) {
  size_t ab;
  return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out);
}

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
    : ordinal_(std::max(0, options.ordinal)),
      host_devices_(std::max(1, options.host_devices)),
      memory_budget_(options.memory_budget),
      copy_bandwidth_(options.emulated_copy_bandwidth),
      async_streams_(options.async_streams),
      no_host_alias_(options.no_host_alias),
      cuda_like_(options.cuda_like),
      async_max_delay_(options.async_max_delay),
      table_(std::make_shared<AllocationTable>(
          options.memory_budget, options.opaque_pointers ? kOpaqueOffset : 0, ordinal_)) {}

HostDevice::~HostDevice() { table_->FreeAll(); }

std::string HostDevice::name() const {
  return "host:" + std::to_string(ordinal_) + " of " + std::to_string(host_devices_) +
         (cuda_like_ ? " (CUDA-like)" : "");
}

void HostDevice::MakeCurrent() const { SetCurrentHostDevice(ordinal_); }

StatusOr<HostStream*> HostDevice::OwnStream(Stream* stream) const {
  GEEPS_ASSIGN_OR_RETURN(HostStream * host, AsHostStream(stream));
  if (host->ordinal() != ordinal_) {
    return InternalError("host device: a stream of host:" + std::to_string(host->ordinal()) +
                         " used on host:" + std::to_string(ordinal_));
  }
  MakeCurrent();
  return host;
}

StatusOr<void*> HostDevice::Allocate(size_t bytes) {
  MakeCurrent();
  return table_->Allocate(bytes);
}

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
  MakeCurrent();
  GEEPS_ASSIGN_OR_RETURN(std::unique_ptr<HostStream> stream,
                         HostStream::Create(async_streams_, async_max_delay_, ordinal_));
  return std::unique_ptr<Stream>(std::move(stream));
}

StatusOr<std::unique_ptr<Event>> HostDevice::CreateEvent() {
  try {
    return std::unique_ptr<Event>(std::make_unique<HostEvent>(ordinal_));
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("host device: out of memory");
  }
}

Status HostDevice::Copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream* stream) {
  static constexpr char kOp[] = "Copy";
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, OwnStream(stream));
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
  // An idle stream runs the copy now, right after the check above.
  if (min_time.count() == 0 && host_stream->RunIfIdle([host_dst, host_src, bytes] {
        std::memmove(host_dst, host_src, bytes);
        return Status::OK();
      })) {
    return Status::OK();
  }
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
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, OwnStream(stream));
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
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, OwnStream(stream));
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
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, OwnStream(stream));
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
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, OwnStream(stream));
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
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, OwnStream(stream));
  std::shared_ptr<EventState> state = host_event->state();
  // The generation counts as recorded before its marker is queued, so the
  // marker never completes one that is not yet recorded; the marker may
  // run inside Enqueue (an idle stream), so state->mu is not held there.
  uint64_t generation;
  {
    common::MutexLock lock(&state->mu);
    generation = ++state->recorded;
  }
  // Marks `generation` completed and wakes the waiters.
  auto complete = [state, generation] {
    {
      common::MutexLock marker_lock(&state->mu);
      state->completed = std::max(state->completed, generation);
    }
    state->cv.notify_all();
  };
  Status queued = host_stream->Enqueue([complete] {
    complete();
    return Status::OK();
  });
  // Not queued: nothing will complete it, so no one may wait for it.
  if (!queued.ok()) complete();
  return queued;
}

Status HostDevice::StreamWait(Stream* stream, Event* event) {
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, OwnStream(stream));
  GEEPS_ASSIGN_OR_RETURN(HostEvent * host_event, AsHostEvent(event));
  std::shared_ptr<EventState> state = host_event->state();
  uint64_t target;
  {
    common::MutexLock lock(&state->mu);
    if (state->completed >= state->recorded) return Status::OK();
    target = state->recorded;
  }
  return host_stream->Enqueue(
      [state, target] {
        common::MutexLock lock(&state->mu);
        lock.Wait(state->cv,
                  [&]() GEEPS_REQUIRES(state->mu) { return state->completed >= target; });
        return Status::OK();
      },
      HostStream::Where::kOnStreamThread);
}

Status HostDevice::Synchronize(Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(HostStream * host_stream, OwnStream(stream));
  return host_stream->Synchronize();
}

Status HostDevice::EventSynchronize(Event* event) {
  GEEPS_ASSIGN_OR_RETURN(HostEvent * host_event, AsHostEvent(event));
  EventState* state = host_event->state().get();
  common::MutexLock lock(&state->mu);
  const uint64_t target = state->recorded;
  lock.Wait(state->cv, [&]() GEEPS_REQUIRES(state->mu) { return state->completed >= target; });
  return Status::OK();
}

const void* HostDevice::HostAlias(const void* p) const {
  return p == nullptr || no_host_alias_ ? nullptr : table_->ToHost(p);
}

void* HostDevice::MapHostMemory(void* p, size_t bytes) {
  return p == nullptr || no_host_alias_ ? nullptr : table_->Map(p, bytes);
}

void HostDevice::UnmapHostMemory(void* device_p) {
  if (device_p == nullptr || table_->Unmap(device_p)) return;
  GEEPS_LOG(Warning) << "host device: UnmapHostMemory(" << device_p
                     << ") of a pointer that is not mapped host memory; ignored";
}

bool HostDevice::EventDone(Event* event) {
  StatusOr<HostEvent*> host_event = AsHostEvent(event);
  if (!host_event.ok()) return true;  // not an event: nothing to wait for
  EventState* state = (*host_event)->state().get();
  common::MutexLock lock(&state->mu);
  return state->completed >= state->recorded;
}

}  // namespace geeps::device::host
