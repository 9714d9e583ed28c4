#include "device/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "common/logging.h"
#include "device/cuda/grid_stride.h"
#include "device/cuda/kernels.h"
#include "device/scoped_device.h"

// geeps.h names CUDA's stream type without CUDA's headers
// (ComputeStream::cuda()); it must be the very type cudaStream_t is.
static_assert(std::is_same_v<cudaStream_t, CUstream_st*>,
              "ComputeStream::cuda() must return a cudaStream_t");

namespace geeps::device::cuda {

namespace {

// Every failed CUDA runtime call also latches its error as the calling
// thread's "last error" (what cudaGetLastError() returns, and clears), kept
// by libgeeps' own copy of cudart (static, its symbols hidden: the
// application's runtime keeps its own). The backend handles every failure
// where it happens (a Status, a retry, a log line), so it clears the last
// error right there: a stale error must never surface in a later, unrelated
// check. Kernel launches do not read the last error at all (kernels.cu
// returns each launch's own error). Sticky errors (a faulting kernel) cannot
// be cleared; every later call reports them anyway.
cudaError_t Handled(cudaError_t error) {
  if (error != cudaSuccess) cudaGetLastError();
  return error;
}

// A call whose failure can only be logged (destructors, Free). Silent while
// the runtime is being unloaded at process exit (objects destroyed after it
// have nothing left to give back).
void LogIfFailed(const char* what, cudaError_t error) {
  if (Handled(error) == cudaSuccess || error == cudaErrorCudartUnloading) {
    return;
  }
  GEEPS_LOG(Warning) << "cuda device: " << what << ": " << cudaGetErrorName(error) << ": "
                     << cudaGetErrorString(error);
}

// "<what>: <cudaErrorName>: <error string>"; out of memory is
// kResourceExhausted, everything else kDeviceError.
Status CudaStatus(const std::string& what, cudaError_t error) {
  std::string message = what + ": " + cudaGetErrorName(error) + ": " + cudaGetErrorString(error);
  if (error == cudaErrorMemoryAllocation) {
    return ResourceExhaustedError(std::move(message));
  }
  return DeviceError(std::move(message));
}

// Returns the CUDA error of `expr` as a Status, cleared from the last error.
#define GEEPS_CUDA_RETURN_IF_ERROR(what, expr)          \
  do {                                                  \
    const cudaError_t geeps_cuda_error = Handled(expr); \
    if (geeps_cuda_error != cudaSuccess) {              \
      return CudaStatus((what), geeps_cuda_error);      \
    }                                                   \
  } while (0)

// The calling thread's current CUDA device, for ScopedCurrentDevice
// (device/scoped_device.h); failures are logged.
struct CudaCurrentDevice {
  static bool Get(int* ordinal) {
    const cudaError_t error = cudaGetDevice(ordinal);
    LogIfFailed("cudaGetDevice", error);
    return error == cudaSuccess;
  }
  static bool Set(int ordinal) {
    const cudaError_t error = cudaSetDevice(ordinal);
    LogIfFailed("cudaSetDevice", error);
    return error == cudaSuccess;
  }
};

// Makes a device current for a scope and restores the caller's after it.
using ScopedCudaDevice = ScopedCurrentDevice<CudaCurrentDevice>;

class CudaStream final : public Stream {
 public:
  CudaStream(cudaStream_t stream, int ordinal) : stream_(stream), ordinal_(ordinal) {}
  // Waits for the queued work (device.h: destroying a stream drains it), on
  // the stream's device; the thread's current device is restored after.
  ~CudaStream() override {
    const ScopedCudaDevice current(ordinal_);
    LogIfFailed("stream destroyed with an error: cudaStreamSynchronize",
                cudaStreamSynchronize(stream_));
    LogIfFailed("cudaStreamDestroy", cudaStreamDestroy(stream_));
  }
  void* native_handle() const override { return stream_; }
  cudaStream_t get() const { return stream_; }
  int ordinal() const { return ordinal_; }

 private:
  const cudaStream_t stream_;
  const int ordinal_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent(cudaEvent_t event, int ordinal) : event_(event), ordinal_(ordinal) {}
  // On the event's device; the thread's current device is restored after.
  ~CudaEvent() override {
    const ScopedCudaDevice current(ordinal_);
    LogIfFailed("cudaEventDestroy", cudaEventDestroy(event_));
  }
  cudaEvent_t get() const { return event_; }
  int ordinal() const { return ordinal_; }

 private:
  const cudaEvent_t event_;
  const int ordinal_;
};

// A stream or event of another device (a worker handed another worker's):
// kInternal, as on the host backend.
Status CheckSameDevice(const char* what, int theirs, int ours) {
  if (theirs == ours) return Status::OK();
  return InternalError(std::string("cuda device: a ") + what + " of cuda:" +
                       std::to_string(theirs) + " used on cuda:" + std::to_string(ours));
}

StatusOr<cudaStream_t> AsCuda(Stream* stream, int ordinal) {
  if (stream == nullptr) return InvalidArgumentError("stream is null");
  auto* cuda = dynamic_cast<CudaStream*>(stream);
  if (cuda == nullptr) {
    return InvalidArgumentError("stream was not created by a CUDA device");
  }
  GEEPS_RETURN_IF_ERROR(CheckSameDevice("stream", cuda->ordinal(), ordinal));
  return cuda->get();
}

// Events may be waited for across devices (cudaStreamWaitEvent allows it);
// recording needs the stream's device, checked through the stream.
StatusOr<cudaEvent_t> AsCuda(Event* event) {
  if (event == nullptr) return InvalidArgumentError("event is null");
  auto* cuda = dynamic_cast<CudaEvent*>(event);
  if (cuda == nullptr) {
    return InvalidArgumentError("event was not created by a CUDA device");
  }
  return cuda->get();
}

Status CheckNotNull(const char* op, const char* arg, const void* p) {
  if (p != nullptr) return Status::OK();
  return InvalidArgumentError(std::string(op) + ": " + arg + " is null");
}

// Checks that n * width * 4 bytes does not overflow.
Status CheckSize(const char* op, size_t n, size_t width) {
  size_t elements, bytes;
  if (__builtin_mul_overflow(n, width, &elements) ||
      __builtin_mul_overflow(elements, sizeof(float), &bytes)) {
    return InvalidArgumentError(std::string(op) + ": size " + std::to_string(n) + " x " +
                                std::to_string(width) + " floats overflows");
  }
  return Status::OK();
}

void CUDART_CB RunHostWork(void* arg) {
  auto* work = static_cast<std::function<void()>*>(arg);
  (*work)();
  delete work;
}

}  // namespace

Status CudaAvailable() {
  static const Status* const kAvailable = [] {
    int count = 0;
    const cudaError_t error = Handled(cudaGetDeviceCount(&count));
    if (error != cudaSuccess) {
      return new Status(
          UnavailableError(std::string("no CUDA device: cudaGetDeviceCount failed: ") +
                           cudaGetErrorName(error) + ": " + cudaGetErrorString(error)));
    }
    if (count < 1) {
      return new Status(UnavailableError("no CUDA device: cudaGetDeviceCount found 0 devices"));
    }
    return new Status();
  }();
  return *kAvailable;
}

StatusOr<int> CudaDeviceCount() {
  GEEPS_RETURN_IF_ERROR(CudaAvailable());
  int count = 0;
  GEEPS_CUDA_RETURN_IF_ERROR("cuda device: cudaGetDeviceCount", cudaGetDeviceCount(&count));
  return count;
}

StatusOr<std::unique_ptr<Device>> CudaDevice::Create(const DeviceOptions& options) {
  GEEPS_RETURN_IF_ERROR(CudaAvailable());
  int ordinal = options.ordinal;
  if (ordinal < 0) {
    GEEPS_CUDA_RETURN_IF_ERROR("cuda device: cudaGetDevice", cudaGetDevice(&ordinal));
  } else {
    GEEPS_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
    if (ordinal >= count)
      return InvalidArgumentError("cuda device: ordinal " + std::to_string(ordinal) +
                                  " but cudaGetDeviceCount found " + std::to_string(count) +
                                  " devices");
  }
  // The creating thread uses the device from here on (CreateStream etc.).
  GEEPS_CUDA_RETURN_IF_ERROR("cuda device: cudaSetDevice", cudaSetDevice(ordinal));
  cudaDeviceProp prop;
  GEEPS_CUDA_RETURN_IF_ERROR("cuda device: cudaGetDeviceProperties",
                             cudaGetDeviceProperties(&prop, ordinal));
  const std::string name = "cuda:" + std::to_string(ordinal) + " (" + prop.name + ", sm_" +
                           std::to_string(prop.major) + std::to_string(prop.minor) + ")";
  const int max_blocks = MaxBlocks(prop.multiProcessorCount);
  try {
    return std::unique_ptr<Device>(new CudaDevice(ordinal, name, max_blocks, options));
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("out of memory creating the CUDA device");
  }
}

CudaDevice::CudaDevice(int ordinal, std::string name, int max_blocks, const DeviceOptions& options)
    : ordinal_(ordinal),
      name_(std::move(name)),
      max_blocks_(max_blocks),
      device_pool_(
          "cuda device", options.memory_budget,
          [this](size_t bytes) -> StatusOr<void*> {
            void* p = nullptr;
            GEEPS_RETURN_IF_ERROR(MakeCurrent());
            GEEPS_CUDA_RETURN_IF_ERROR("cudaMalloc", cudaMalloc(&p, bytes));
            return p;
          },
          [this](void* p) {
            MakeCurrent().ok();
            LogIfFailed("cudaFree", cudaFree(p));
          },
          // A failed cudaMalloc that the pool handled (device/block_pool.h).
          [] { cudaGetLastError(); }),
      pinned_pool_(
          "cuda device (pinned)", 0,
          [this](size_t bytes) -> StatusOr<void*> {
            void* p = nullptr;
            GEEPS_RETURN_IF_ERROR(MakeCurrent());
            GEEPS_CUDA_RETURN_IF_ERROR("cudaHostAlloc",
                                       cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
            return p;
          },
          [](void* p) { LogIfFailed("cudaFreeHost", cudaFreeHost(p)); },
          [] { cudaGetLastError(); }) {}

CudaDevice::~CudaDevice() {
  // Memory may still be used by queued work of streams the user leaked.
  MakeCurrent().ok();
  LogIfFailed("cudaDeviceSynchronize", cudaDeviceSynchronize());
  device_pool_.ReleaseAll();
  pinned_pool_.ReleaseAll();
}

Status CudaDevice::MakeCurrent() const {
  int current = -1;
  if (Handled(cudaGetDevice(&current)) == cudaSuccess && current == ordinal_) {
    return Status::OK();
  }
  GEEPS_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(ordinal_));
  return Status::OK();
}

StatusOr<void*> CudaDevice::Allocate(size_t bytes) { return device_pool_.Allocate(bytes); }

void CudaDevice::Free(void* p) {
  if (p == nullptr || device_pool_.Free(p)) return;
  GEEPS_LOG(Warning) << "cuda device: Free(" << p
                     << ") of a pointer that is not a live device "
                        "allocation; ignored";
}

StatusOr<void*> CudaDevice::AllocatePinned(size_t bytes) { return pinned_pool_.Allocate(bytes); }

void CudaDevice::FreePinned(void* p) {
  if (p == nullptr || pinned_pool_.Free(p)) return;
  GEEPS_LOG(Warning) << "cuda device: FreePinned(" << p
                     << ") of a pointer that is not a live pinned "
                        "allocation; ignored";
}

uint64_t CudaDevice::bytes_in_use() const { return device_pool_.bytes_in_use(); }

uint64_t CudaDevice::memory_budget() const { return device_pool_.budget(); }

StatusOr<std::unique_ptr<Stream>> CudaDevice::CreateStream() {
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  cudaStream_t stream = nullptr;
  // Non-blocking: no implicit synchronisation with the legacy default stream.
  GEEPS_CUDA_RETURN_IF_ERROR("cudaStreamCreateWithFlags",
                             cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  try {
    return std::unique_ptr<Stream>(new CudaStream(stream, ordinal_));
  } catch (const std::bad_alloc&) {
    cudaStreamDestroy(stream);
    return ResourceExhaustedError("cuda device: out of memory");
  }
}

StatusOr<std::unique_ptr<Event>> CudaDevice::CreateEvent() {
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  cudaEvent_t event = nullptr;
  GEEPS_CUDA_RETURN_IF_ERROR("cudaEventCreateWithFlags",
                             cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  try {
    return std::unique_ptr<Event>(new CudaEvent(event, ordinal_));
  } catch (const std::bad_alloc&) {
    cudaEventDestroy(event);
    return ResourceExhaustedError("cuda device: out of memory");
  }
}

Status CudaDevice::Copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream* stream) {
  static constexpr char kOp[] = "Copy";
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream, ordinal_));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(kOp, "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(kOp, "src", src));
  switch (kind) {
    case CopyKind::kHostToDevice:
    case CopyKind::kDeviceToHost:
    case CopyKind::kDeviceToDevice:
    case CopyKind::kHostToHost:
      break;
    default:
      return InvalidArgumentError("Copy: unknown CopyKind " +
                                  std::to_string(static_cast<int>(kind)));
  }
  if (bytes == 0) return Status::OK();
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  if (kind == CopyKind::kHostToHost) {
    // cudaMemcpyAsync would copy host to host at once, out of stream order.
    return HostFunction([dst, src, bytes] { std::memmove(dst, src, bytes); }, stream);
  }
  // cudaMemcpyDefault: the runtime tells device, pinned and pageable memory
  // apart by address (unified virtual addressing, every 64-bit platform), so
  // a pointer of the application's own runtime or allocator, or a host-side
  // pointer that is in fact device memory, still copies correctly, where an
  // explicit kind that disagrees with a pointer is an error. Whether `kind`
  // matches the pointers is the host backend's to check (it does, in tests).
  GEEPS_CUDA_RETURN_IF_ERROR("Copy: cudaMemcpyAsync",
                             cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  return Status::OK();
}

Status CudaDevice::HostFunction(std::function<void()> work, Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream, ordinal_));
  if (!work) return InvalidArgumentError("HostFunction: work is empty");
  auto* heap = new (std::nothrow) std::function<void()>(std::move(work));
  if (heap == nullptr) return ResourceExhaustedError("HostFunction: out of memory");
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  const cudaError_t error = Handled(cudaLaunchHostFunc(s, RunHostWork, heap));
  if (error != cudaSuccess) {
    delete heap;
    return CudaStatus("HostFunction: cudaLaunchHostFunc", error);
  }
  return Status::OK();
}

Status CudaDevice::Rows(int op, const char* name, float* dst, const float* src,
                        const uint32_t* index, size_t n, size_t width, Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream, ordinal_));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(name, "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(name, "src", src));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(name, "index", index));
  GEEPS_RETURN_IF_ERROR(CheckSize(name, n, width));
  if (n == 0 || width == 0) return Status::OK();
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR(
      std::string(name) + ": kernel launch",
      LaunchRows(static_cast<RowOp>(op), dst, src, index, n, width, max_blocks_, s));
  return Status::OK();
}

Status CudaDevice::Gather(float* dst, const float* src, const uint32_t* index, size_t n,
                          size_t width, Stream* stream) {
  return Rows(static_cast<int>(RowOp::kGather), "Gather", dst, src, index, n, width, stream);
}

Status CudaDevice::ScatterAdd(float* dst, const float* src, const uint32_t* index, size_t n,
                              size_t width, Stream* stream) {
  return Rows(static_cast<int>(RowOp::kScatterAdd), "ScatterAdd", dst, src, index, n, width,
              stream);
}

Status CudaDevice::Scatter(float* dst, const float* src, const uint32_t* index, size_t n,
                           size_t width, Stream* stream) {
  return Rows(static_cast<int>(RowOp::kScatter), "Scatter", dst, src, index, n, width, stream);
}

Status CudaDevice::Add(float* dst, const float* src, size_t count, Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream, ordinal_));
  GEEPS_RETURN_IF_ERROR(CheckNotNull("Add", "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckNotNull("Add", "src", src));
  GEEPS_RETURN_IF_ERROR(CheckSize("Add", count, 1));
  // device.h: dst == src (AddKernel has no __restrict__) or disjoint ranges;
  // a partial overlap would race between threads. Two compares: checked.
  const uintptr_t dst_at = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t src_at = reinterpret_cast<uintptr_t>(src);
  if (dst_at != src_at &&
      (dst_at < src_at ? src_at - dst_at : dst_at - src_at) < count * sizeof(float)) {
    return InvalidArgumentError("Add: dst and src overlap partially (" + std::to_string(count) +
                                " floats each); only dst == src or disjoint ranges are allowed");
  }
  if (count == 0) return Status::OK();
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("Add: kernel launch", LaunchAdd(dst, src, count, max_blocks_, s));
  return Status::OK();
}

Status CudaDevice::Fill(float* dst, float value, size_t count, Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream, ordinal_));
  GEEPS_RETURN_IF_ERROR(CheckNotNull("Fill", "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckSize("Fill", count, 1));
  if (count == 0) return Status::OK();
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("Fill: kernel launch", LaunchFill(dst, value, count, max_blocks_, s));
  return Status::OK();
}

Status CudaDevice::Record(Event* event, Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaEvent_t e, AsCuda(event));
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream, ordinal_));
  // cudaEventRecord needs the event and the stream on one device.
  GEEPS_RETURN_IF_ERROR(
      CheckSameDevice("event", static_cast<CudaEvent*>(event)->ordinal(), ordinal_));
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("Record: cudaEventRecord", cudaEventRecord(e, s));
  return Status::OK();
}

Status CudaDevice::StreamWait(Stream* stream, Event* event) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream, ordinal_));
  GEEPS_ASSIGN_OR_RETURN(cudaEvent_t e, AsCuda(event));
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("StreamWait: cudaStreamWaitEvent", cudaStreamWaitEvent(s, e, 0));
  return Status::OK();
}

Status CudaDevice::Synchronize(Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream, ordinal_));
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("Synchronize: cudaStreamSynchronize", cudaStreamSynchronize(s));
  return Status::OK();
}

Status CudaDevice::EventSynchronize(Event* event) {
  GEEPS_ASSIGN_OR_RETURN(cudaEvent_t e, AsCuda(event));
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("EventSynchronize: cudaEventSynchronize", cudaEventSynchronize(e));
  return Status::OK();
}

bool CudaDevice::EventDone(Event* event) {
  StatusOr<cudaEvent_t> e = AsCuda(event);
  if (!e.ok()) return true;  // not an event: nothing to wait for
  MakeCurrent().ok();
  const cudaError_t error = cudaEventQuery(*e);
  if (error == cudaSuccess) return true;
  if (error == cudaErrorNotReady) {
    // "Not ready" is an answer, not a failure, but the runtime may still
    // record it as this thread's last error; left there, the next
    // cudaGetLastError() check (ours or any code's that reads it after a
    // <<<...>>> launch) would report a kernel launch as failed with
    // cudaErrorNotReady. Clear it only if it is what is latched: peeking first
    // leaves any other error where it is.
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  LogIfFailed("cudaEventQuery", error);
  return true;
}

}  // namespace geeps::device::cuda
