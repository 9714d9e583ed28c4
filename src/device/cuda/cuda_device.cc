#include "device/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "common/logging.h"
#include "device/cuda/kernels.h"

namespace geeps::device::cuda {

namespace {

// "<what>: <cudaErrorName>: <error string>"; out of memory is
// kResourceExhausted, everything else kDeviceError.
Status CudaStatus(const std::string& what, cudaError_t error) {
  std::string message = what + ": " + cudaGetErrorName(error) + ": " +
                        cudaGetErrorString(error);
  if (error == cudaErrorMemoryAllocation) {
    return ResourceExhaustedError(std::move(message));
  }
  return DeviceError(std::move(message));
}

#define GEEPS_CUDA_RETURN_IF_ERROR(what, expr)         \
  do {                                                 \
    const cudaError_t geeps_cuda_error = (expr);       \
    if (geeps_cuda_error != cudaSuccess) {             \
      return CudaStatus((what), geeps_cuda_error);     \
    }                                                  \
  } while (0)

class CudaStream final : public Stream {
 public:
  CudaStream(cudaStream_t stream, int ordinal)
      : stream_(stream), ordinal_(ordinal) {}
  // Waits for the queued work (device.h: destroying a stream drains it).
  ~CudaStream() override {
    cudaSetDevice(ordinal_);
    cudaError_t error = cudaStreamSynchronize(stream_);
    if (error != cudaSuccess) {
      GEEPS_LOG(Warning) << "cuda device: stream destroyed with an error: "
                         << cudaGetErrorString(error);
    }
    cudaStreamDestroy(stream_);
  }
  void* native_handle() const override { return stream_; }
  cudaStream_t get() const { return stream_; }

 private:
  const cudaStream_t stream_;
  const int ordinal_;
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }
  cudaEvent_t get() const { return event_; }

 private:
  const cudaEvent_t event_;
};

StatusOr<cudaStream_t> AsCuda(Stream* stream) {
  if (stream == nullptr) return InvalidArgumentError("stream is null");
  auto* cuda = dynamic_cast<CudaStream*>(stream);
  if (cuda == nullptr) {
    return InvalidArgumentError("stream was not created by a CUDA device");
  }
  return cuda->get();
}

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
    return InvalidArgumentError(std::string(op) + ": size " +
                                std::to_string(n) + " x " +
                                std::to_string(width) + " floats overflows");
  }
  return Status::OK();
}

struct HostCopy {
  void* dst;
  const void* src;
  size_t bytes;
};

void CUDART_CB RunHostCopy(void* arg) {
  auto* copy = static_cast<HostCopy*>(arg);
  std::memmove(copy->dst, copy->src, copy->bytes);
  delete copy;
}

}  // namespace

Status CudaAvailable() {
  static const Status* const available = [] {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      cudaGetLastError();  // do not leave it for an unrelated later check
      return new Status(UnavailableError(
          std::string("no CUDA device: cudaGetDeviceCount failed: ") +
          cudaGetErrorName(error) + ": " + cudaGetErrorString(error)));
    }
    if (count < 1) {
      return new Status(UnavailableError(
          "no CUDA device: cudaGetDeviceCount found 0 devices"));
    }
    return new Status();
  }();
  return *available;
}

StatusOr<std::unique_ptr<Device>> CudaDevice::Create(
    const DeviceOptions& options) {
  GEEPS_RETURN_IF_ERROR(CudaAvailable());
  int ordinal = 0;
  GEEPS_CUDA_RETURN_IF_ERROR("cuda device: cudaGetDevice", cudaGetDevice(&ordinal));
  cudaDeviceProp prop;
  GEEPS_CUDA_RETURN_IF_ERROR("cuda device: cudaGetDeviceProperties",
                             cudaGetDeviceProperties(&prop, ordinal));
  const std::string name = "cuda:" + std::to_string(ordinal) + " (" +
                           prop.name + ", sm_" + std::to_string(prop.major) +
                           std::to_string(prop.minor) + ")";
  const int max_blocks = std::max(1, prop.multiProcessorCount) * 8;
  try {
    return std::unique_ptr<Device>(
        new CudaDevice(ordinal, name, max_blocks, options));
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("out of memory creating the CUDA device");
  }
}

CudaDevice::CudaDevice(int ordinal, std::string name, int max_blocks,
                       const DeviceOptions& options)
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
            cudaFree(p);
          }),
      pinned_pool_(
          "cuda device (pinned)", 0,
          [this](size_t bytes) -> StatusOr<void*> {
            void* p = nullptr;
            GEEPS_RETURN_IF_ERROR(MakeCurrent());
            GEEPS_CUDA_RETURN_IF_ERROR(
                "cudaHostAlloc",
                cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
            return p;
          },
          [](void* p) { cudaFreeHost(p); }) {}

CudaDevice::~CudaDevice() {
  // Memory may still be used by queued work of streams the user leaked.
  MakeCurrent().ok();
  cudaDeviceSynchronize();
  device_pool_.ReleaseAll();
  pinned_pool_.ReleaseAll();
}

Status CudaDevice::MakeCurrent() const {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == ordinal_) {
    return Status::OK();
  }
  GEEPS_CUDA_RETURN_IF_ERROR("cudaSetDevice", cudaSetDevice(ordinal_));
  return Status::OK();
}

StatusOr<void*> CudaDevice::Allocate(size_t bytes) {
  return device_pool_.Allocate(bytes);
}

void CudaDevice::Free(void* p) {
  if (p == nullptr || device_pool_.Free(p)) return;
  GEEPS_LOG(Warning) << "cuda device: Free(" << p
                     << ") of a pointer that is not a live device "
                        "allocation; ignored";
}

StatusOr<void*> CudaDevice::AllocatePinned(size_t bytes) {
  return pinned_pool_.Allocate(bytes);
}

void CudaDevice::FreePinned(void* p) {
  if (p == nullptr || pinned_pool_.Free(p)) return;
  GEEPS_LOG(Warning) << "cuda device: FreePinned(" << p
                     << ") of a pointer that is not a live pinned "
                        "allocation; ignored";
}

uint64_t CudaDevice::bytes_in_use() const {
  return device_pool_.bytes_in_use();
}

uint64_t CudaDevice::memory_budget() const { return device_pool_.budget(); }

StatusOr<std::unique_ptr<Stream>> CudaDevice::CreateStream() {
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  cudaStream_t stream = nullptr;
  // Non-blocking: no implicit synchronisation with the legacy default stream.
  GEEPS_CUDA_RETURN_IF_ERROR(
      "cudaStreamCreateWithFlags",
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
  GEEPS_CUDA_RETURN_IF_ERROR(
      "cudaEventCreateWithFlags",
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  try {
    return std::unique_ptr<Event>(new CudaEvent(event));
  } catch (const std::bad_alloc&) {
    cudaEventDestroy(event);
    return ResourceExhaustedError("cuda device: out of memory");
  }
}

Status CudaDevice::Copy(void* dst, const void* src, size_t bytes,
                        CopyKind kind, Stream* stream) {
  static constexpr char kOp[] = "Copy";
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(kOp, "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(kOp, "src", src));
  cudaMemcpyKind cuda_kind;
  switch (kind) {
    case CopyKind::kHostToDevice:
      cuda_kind = cudaMemcpyHostToDevice;
      break;
    case CopyKind::kDeviceToHost:
      cuda_kind = cudaMemcpyDeviceToHost;
      break;
    case CopyKind::kDeviceToDevice:
      cuda_kind = cudaMemcpyDeviceToDevice;
      break;
    case CopyKind::kHostToHost:
      cuda_kind = cudaMemcpyHostToHost;
      break;
    default:
      return InvalidArgumentError("Copy: unknown CopyKind " +
                                  std::to_string(static_cast<int>(kind)));
  }
  if (bytes == 0) return Status::OK();
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  if (cuda_kind == cudaMemcpyHostToHost) {
    // cudaMemcpyAsync would copy host to host at once, out of stream order.
    auto* copy = new (std::nothrow) HostCopy{dst, src, bytes};
    if (copy == nullptr) return ResourceExhaustedError("Copy: out of memory");
    const cudaError_t error = cudaLaunchHostFunc(s, RunHostCopy, copy);
    if (error != cudaSuccess) {
      delete copy;
      return CudaStatus("Copy: cudaLaunchHostFunc", error);
    }
    return Status::OK();
  }
  GEEPS_CUDA_RETURN_IF_ERROR("Copy: cudaMemcpyAsync",
                             cudaMemcpyAsync(dst, src, bytes, cuda_kind, s));
  return Status::OK();
}

Status CudaDevice::Rows(int op, const char* name, float* dst, const float* src,
                        const uint32_t* index, size_t n, size_t width,
                        Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(name, "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(name, "src", src));
  GEEPS_RETURN_IF_ERROR(CheckNotNull(name, "index", index));
  GEEPS_RETURN_IF_ERROR(CheckSize(name, n, width));
  if (n == 0 || width == 0) return Status::OK();
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR(
      std::string(name) + ": kernel launch",
      LaunchRows(static_cast<RowOp>(op), dst, src, index, n, width,
                 max_blocks_, s));
  return Status::OK();
}

Status CudaDevice::Gather(float* dst, const float* src, const uint32_t* index,
                          size_t n, size_t width, Stream* stream) {
  return Rows(static_cast<int>(RowOp::kGather), "Gather", dst, src, index, n,
              width, stream);
}

Status CudaDevice::ScatterAdd(float* dst, const float* src,
                              const uint32_t* index, size_t n, size_t width,
                              Stream* stream) {
  return Rows(static_cast<int>(RowOp::kScatterAdd), "ScatterAdd", dst, src,
              index, n, width, stream);
}

Status CudaDevice::Scatter(float* dst, const float* src, const uint32_t* index,
                           size_t n, size_t width, Stream* stream) {
  return Rows(static_cast<int>(RowOp::kScatter), "Scatter", dst, src, index, n,
              width, stream);
}

Status CudaDevice::Add(float* dst, const float* src, size_t count,
                       Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream));
  GEEPS_RETURN_IF_ERROR(CheckNotNull("Add", "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckNotNull("Add", "src", src));
  GEEPS_RETURN_IF_ERROR(CheckSize("Add", count, 1));
  if (count == 0) return Status::OK();
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("Add: kernel launch",
                             LaunchAdd(dst, src, count, max_blocks_, s));
  return Status::OK();
}

Status CudaDevice::Fill(float* dst, float value, size_t count,
                        Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream));
  GEEPS_RETURN_IF_ERROR(CheckNotNull("Fill", "dst", dst));
  GEEPS_RETURN_IF_ERROR(CheckSize("Fill", count, 1));
  if (count == 0) return Status::OK();
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("Fill: kernel launch",
                             LaunchFill(dst, value, count, max_blocks_, s));
  return Status::OK();
}

Status CudaDevice::Record(Event* event, Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaEvent_t e, AsCuda(event));
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream));
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("Record: cudaEventRecord", cudaEventRecord(e, s));
  return Status::OK();
}

Status CudaDevice::StreamWait(Stream* stream, Event* event) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream));
  GEEPS_ASSIGN_OR_RETURN(cudaEvent_t e, AsCuda(event));
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("StreamWait: cudaStreamWaitEvent",
                             cudaStreamWaitEvent(s, e, 0));
  return Status::OK();
}

Status CudaDevice::Synchronize(Stream* stream) {
  GEEPS_ASSIGN_OR_RETURN(cudaStream_t s, AsCuda(stream));
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("Synchronize: cudaStreamSynchronize",
                             cudaStreamSynchronize(s));
  return Status::OK();
}

Status CudaDevice::EventSynchronize(Event* event) {
  GEEPS_ASSIGN_OR_RETURN(cudaEvent_t e, AsCuda(event));
  GEEPS_RETURN_IF_ERROR(MakeCurrent());
  GEEPS_CUDA_RETURN_IF_ERROR("EventSynchronize: cudaEventSynchronize",
                             cudaEventSynchronize(e));
  return Status::OK();
}

bool CudaDevice::EventDone(Event* event) {
  StatusOr<cudaEvent_t> e = AsCuda(event);
  if (!e.ok()) return true;  // not an event: nothing to wait for
  MakeCurrent().ok();
  const cudaError_t error = cudaEventQuery(*e);
  if (error == cudaSuccess) return true;
  if (error == cudaErrorNotReady) return false;
  GEEPS_LOG(Warning) << "cuda device: cudaEventQuery: "
                     << cudaGetErrorString(error);
  return true;
}

}  // namespace geeps::device::cuda
