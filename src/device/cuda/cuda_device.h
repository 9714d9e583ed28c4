// The CUDA backend: device memory from a pool of cudaMalloc'd blocks under
// the DeviceOptions budget, pinned host memory (cudaHostAlloc, pooled too),
// streams (non-blocking cudaStream_t), events (cudaEvent_t without timing),
// cudaMemcpyAsync copies and the kernels of kernels.cu. See docs/cuda.md.
//
// Compiled wherever nvcc exists; not yet run on a GPU.
//
// Differences from the host backend (both satisfy device.h):
// - Arguments are checked for null pointers, null streams and size overflow
//   (kInvalidArgument, synchronously); device pointers and index values are
//   not range-checked (an index out of range is undefined behaviour, as for
//   any CUDA kernel; the host backend's run-time checks catch it in tests).
// - A failing CUDA call becomes kDeviceError (kResourceExhausted for out of
//   memory) with the CUDA error name and string in the message; an error of
//   an enqueued operation is reported by a later Synchronize/EventSynchronize
//   (CUDA errors in kernels are sticky: the context is then unusable).
// - The device is DeviceOptions::ordinal (chosen by device/selection.h from
//   Config::device_ordinal), or with -1 the CUDA device current when it was
//   created. Every call that allocates, launches, copies or waits makes it
//   current on the calling thread first (cudaSetDevice is per thread) and
//   leaves it current. Stream and event destructors make their device
//   current too, but restore the thread's previous device when they end
//   (device/scoped_device.h): they run wherever the application drops the
//   object, on threads that may have a device of their own current. A
//   stream or event of another device is kInternal naming both. (Compiled,
//   not run on a GPU: the host backend's N host devices test the same
//   rules; host_device.h.)
// - Free/FreePinned return blocks to the pool: they never call cudaFree or
//   cudaFreeHost (which synchronise the whole device). The pools give the
//   memory back when the device is destroyed.
//
// Thread safety: every method may be called from any thread at the same time.
// Streams and events must be destroyed before the device.
#ifndef GEEPS_DEVICE_CUDA_CUDA_DEVICE_H_
#define GEEPS_DEVICE_CUDA_CUDA_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "device/block_pool.h"
#include "device/device.h"

namespace geeps::device::cuda {

// OK when the CUDA runtime sees at least one device; else kUnavailable
// "no CUDA device: ..." with the cudaGetDeviceCount error. Probes once per
// process (the answer is cached).
Status CudaAvailable();

// The number of CUDA devices (cudaGetDeviceCount). REQUIRES: CudaAvailable()
// is OK.
StatusOr<int> CudaDeviceCount();

class CudaDevice final : public Device {
 public:
  // REQUIRES: CudaAvailable() is OK.
  static StatusOr<std::unique_ptr<Device>> Create(const DeviceOptions& options);
  ~CudaDevice() override;

  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string name() const override { return name_; }
  int ordinal() const override { return ordinal_; }

  StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;  // unknown pointers are logged and ignored
  StatusOr<void*> AllocatePinned(size_t bytes) override;
  void FreePinned(void* p) override;
  uint64_t bytes_in_use() const override;
  uint64_t memory_budget() const override;

  // Destroying a stream waits for its queued work, then destroys it.
  StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  StatusOr<std::unique_ptr<Event>> CreateEvent() override;

  // Host-to-host copies run as a host function on the stream (in order).
  Status Copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream* stream) override;
  Status Gather(float* dst, const float* src, const uint32_t* index, size_t n, size_t width,
                Stream* stream) override;
  Status ScatterAdd(float* dst, const float* src, const uint32_t* index, size_t n, size_t width,
                    Stream* stream) override;
  Status Scatter(float* dst, const float* src, const uint32_t* index, size_t n, size_t width,
                 Stream* stream) override;
  Status Add(float* dst, const float* src, size_t count, Stream* stream) override;
  Status Fill(float* dst, float value, size_t count, Stream* stream) override;

  Status HostFunction(std::function<void()> work, Stream* stream) override;

  Status Record(Event* event, Stream* stream) override;
  Status StreamWait(Stream* stream, Event* event) override;
  Status Synchronize(Stream* stream) override;
  Status EventSynchronize(Event* event) override;
  // An event whose query fails counts as done (the error is logged; the next
  // Synchronize reports it).
  bool EventDone(Event* event) override;

 private:
  CudaDevice(int ordinal, std::string name, int max_blocks, const DeviceOptions& options);
  Status MakeCurrent() const;
  Status Rows(int op, const char* name, float* dst, const float* src, const uint32_t* index,
              size_t n, size_t width, Stream* stream);

  const int ordinal_;
  const std::string name_;
  const int max_blocks_;  // grid cap: a few blocks per multiprocessor
  BlockPool device_pool_;
  BlockPool pinned_pool_;
};

}  // namespace geeps::device::cuda

#endif  // GEEPS_DEVICE_CUDA_CUDA_DEVICE_H_
