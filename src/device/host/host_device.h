// The host backend: a Device whose "device memory" is ordinary host memory,
// handed out under a byte budget, and whose streams are worker threads. It is
// always built; every library test runs on it.
//
// Beyond device.h, the host backend checks what a GPU would not:
// - Every pointer an operation treats as device memory (both sides of a
//   kernel, the device side of a Copy) must lie, with its whole extent, inside
//   a live Allocate()d block of this device; otherwise the call fails at once
//   with kInvalidArgument. Null pointers are always kInvalidArgument, even for
//   an empty operation.
// - When the operation runs, the pointers are checked again (a block freed
//   while the operation was queued is kDeviceError), and Gather / Scatter /
//   ScatterAdd check that the largest index stays inside the indexed block
//   (kOutOfRange). A failing operation does nothing; the error is reported by
//   the next Synchronize() of its stream, and later operations still run.
//
// The asynchronous host mode (DeviceOptions::async_streams) delays every
// operation by a random time on its stream's thread and never runs one
// inline in Synchronize(): missing stream ordering then shows up here as
// wrong results, as it would on a GPU.
//
// The opaque-pointer mode (DeviceOptions::opaque_pointers): Allocate()
// returns the block's host address plus kOpaqueOffset, an address the host
// cannot dereference (non-canonical on x86-64; outside the user address range
// on AArch64, even with its top-byte-ignore), so that host code touching
// device memory crashes (SIGSEGV) as it would on a GPU, while pointer
// arithmetic on it still works. Every operation translates the device
// pointers it gets back to host addresses before it runs; the checks above,
// and their error messages, use the caller's pointers. Pinned memory stays
// ordinary host memory.
//
// The no-alias mode (DeviceOptions::no_host_alias): HostAlias() returns null
// for every pointer, as the CUDA backend's does, so that the callers' paths
// for device memory without a host alias (copies through the stream instead
// of reads in place) run here too.
//
// Several host devices (DeviceOptions::ordinal, host_devices; see
// Config::host_devices) stand in for the GPUs of a machine, so that device
// selection is tested without GPUs: each device has its own allocation
// table, and, as the CUDA backend calls cudaSetDevice, every entry point
// that allocates, launches, copies or waits makes the device current on the
// calling thread (CurrentHostDevice, host_stream.h). An operation on memory
// of another host device, or on a stream of another host device, is
// kInternal naming both; so is a queued operation that runs on a thread
// whose current device is another.
//
// Thread safety: every method may be called from any thread at the same time,
// including several threads enqueuing on one stream. Streams and events may
// outlive the device; memory the device still owns is freed with it.
#ifndef GEEPS_DEVICE_HOST_HOST_DEVICE_H_
#define GEEPS_DEVICE_HOST_HOST_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "device/device.h"

namespace geeps::device::host {

class AllocationTable;  // Device and pinned blocks, shared with queued tasks.
class HostStream;

class HostDevice final : public Device {
 public:
  // Alignment of every block Allocate() and AllocatePinned() return.
  static constexpr size_t kAlignment = 64;
  // Blocks of at least this many bytes start on a page (kPageBytes), as
  // cudaMalloc's and cudaHostAlloc's do: a large block at 64 bytes into a
  // page, where the C library's aligned_alloc puts it, made the kernel's
  // copy of a lent update from it 2.5x slower on one machine
  // (docs/performance.md, "Where the 16 MiB gap goes").
  static constexpr size_t kPageAlignedFrom = size_t{64} << 10;
  static constexpr size_t kPageBytes = 4096;
  // Device address - host address of a block in the opaque-pointer mode.
  // User addresses are below 2^56, so the sum has bit 62 set and bit 63
  // clear: non-canonical on x86-64 (#GP, SIGSEGV). On AArch64 (user
  // addresses below 2^52, top byte ignored) bit 54 puts it outside the user
  // range. Subtracting it gives the host address back exactly.
  static constexpr uintptr_t kOpaqueOffset = (uintptr_t{1} << 62) | (uintptr_t{1} << 54);

  explicit HostDevice(const DeviceOptions& options);
  ~HostDevice() override;

  HostDevice(const HostDevice&) = delete;
  HostDevice& operator=(const HostDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::kHost; }
  std::string name() const override;  // "host:1 of 4"
  int ordinal() const override { return ordinal_; }

  // bytes_in_use() counts the bytes requested (not the rounding up to
  // kAlignment). Allocate(0) returns a distinct non-null block of 0 bytes.
  StatusOr<void*> Allocate(size_t bytes) override;
  // An unknown pointer (not from Allocate(), or already freed) is logged as a
  // warning and otherwise ignored.
  void Free(void* p) override;
  StatusOr<void*> AllocatePinned(size_t bytes) override;
  void FreePinned(void* p) override;  // unknown pointers: as Free()

  uint64_t bytes_in_use() const override;
  uint64_t memory_budget() const override;

  // Starts the stream's worker thread. Destroying the stream runs everything
  // still queued on it, then joins the thread.
  StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  StatusOr<std::unique_ptr<Event>> CreateEvent() override;

  // Copies use memmove, so overlapping ranges are fine.
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
  // The stream waits for the event's latest Record() as of this call; later
  // re-recording does not extend the wait.
  Status StreamWait(Stream* stream, Event* event) override;
  // Waits for everything enqueued on `stream` before this call (work other
  // threads enqueue meanwhile is not waited for). Returns the first error of
  // an operation since the previous Synchronize() of the stream and clears it.
  Status Synchronize(Stream* stream) override;
  Status EventSynchronize(Event* event) override;
  bool EventDone(Event* event) override;
  const void* HostAlias(const void* p) const override;
  // Null in the no-alias mode (as on CUDA), for an empty range, or where
  // the range overlaps a block already known.
  void* MapHostMemory(void* p, size_t bytes) override;
  void UnmapHostMemory(void* device_p) override;  // unknown pointers: as Free()

 private:
  enum class IndexedSide { kSource, kDestination };
  // A row kernel on host addresses: (dst, src, index, n, width).
  using RowKernel = void (*)(float*, const float*, const uint32_t*, size_t, size_t);

  // Shared by Gather, ScatterAdd and Scatter: checks the arguments, then
  // enqueues `kernel` behind a run-time check of all ranges, including the
  // indexed side (`indexed`) up to the largest index; the kernel gets the
  // pointers translated to host addresses.
  Status EnqueueIndexed(const char* op, float* dst, const float* src, const uint32_t* index,
                        size_t n, size_t width, IndexedSide indexed, Stream* stream,
                        RowKernel kernel);

  // Makes this device the calling thread's current one (cudaSetDevice).
  void MakeCurrent() const;
  // The host stream behind `stream`; kInternal when it belongs to another
  // host device.
  StatusOr<HostStream*> OwnStream(Stream* stream) const;

  const int ordinal_;       // DeviceOptions::ordinal (-1 taken as 0)
  const int host_devices_;  // DeviceOptions::host_devices
  const uint64_t memory_budget_;
  const uint64_t copy_bandwidth_;  // DeviceOptions::emulated_copy_bandwidth
  const bool async_streams_;       // DeviceOptions::async_streams
  const bool no_host_alias_;       // DeviceOptions::no_host_alias
  const bool cuda_like_;           // DeviceOptions::cuda_like
  const std::chrono::microseconds async_max_delay_;
  const std::shared_ptr<AllocationTable> table_;
};

}  // namespace geeps::device::host

#endif  // GEEPS_DEVICE_HOST_HOST_DEVICE_H_
