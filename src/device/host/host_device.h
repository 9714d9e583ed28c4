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

  explicit HostDevice(const DeviceOptions& options);
  ~HostDevice() override;

  HostDevice(const HostDevice&) = delete;
  HostDevice& operator=(const HostDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::kHost; }
  std::string name() const override;

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
  Status Copy(void* dst, const void* src, size_t bytes, CopyKind kind,
              Stream* stream) override;
  Status Gather(float* dst, const float* src, const uint32_t* index, size_t n,
                size_t width, Stream* stream) override;
  Status ScatterAdd(float* dst, const float* src, const uint32_t* index,
                    size_t n, size_t width, Stream* stream) override;
  Status Scatter(float* dst, const float* src, const uint32_t* index, size_t n,
                 size_t width, Stream* stream) override;
  Status Add(float* dst, const float* src, size_t count,
             Stream* stream) override;
  Status Fill(float* dst, float value, size_t count, Stream* stream) override;

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

 private:
  enum class IndexedSide { kSource, kDestination };

  // Shared by Gather, ScatterAdd and Scatter: checks the arguments, then
  // enqueues `kernel` behind a run-time check of all ranges, including the
  // indexed side (`indexed`) up to the largest index.
  Status EnqueueIndexed(const char* op, float* dst, const float* src,
                        const uint32_t* index, size_t n, size_t width,
                        IndexedSide indexed, Stream* stream,
                        std::function<void()> kernel);

  const uint64_t memory_budget_;
  const uint64_t copy_bandwidth_;  // DeviceOptions::emulated_copy_bandwidth
  const std::shared_ptr<AllocationTable> table_;
};

}  // namespace geeps::device::host

#endif  // GEEPS_DEVICE_HOST_HOST_DEVICE_H_
