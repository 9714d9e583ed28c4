// The device layer: memory, streams, events and the few kernels libgeeps
// needs. Everything above src/device talks to a Device; backends are host/
// (always built, a real backend whose device memory is host memory under a
// byte budget) and cuda/ (built when CMake finds nvcc; see docs/cuda.md).
//
// Stream semantics (both backends): operations enqueued on one stream run in
// order, asynchronously to the caller. Pointers passed to an async operation
// must stay valid until it has run (Synchronize the stream or an Event
// recorded after it). Index arrays used by Gather/ScatterAdd live in device
// memory.
#ifndef GEEPS_DEVICE_DEVICE_H_
#define GEEPS_DEVICE_DEVICE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "geeps/config.h"
#include "geeps/status.h"

namespace geeps::device {

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

class Stream {
 public:
  virtual ~Stream() = default;
  // The backend's own handle (a cudaStream_t on CUDA), for applications
  // that order their kernels against the library's work; nullptr on host.
  virtual void* native_handle() const { return nullptr; }
};

// An event marks a point in a stream. Record() re-arms it; a never-recorded
// event counts as complete.
class Event {
 public:
  virtual ~Event() = default;
};

struct DeviceOptions {
  // Which device of its kind (CUDA: the GPU ordinal; host: 0 ..
  // host_devices - 1). -1: CUDA takes the device current on the creating
  // thread (cudaGetDevice), host takes 0. Resolved from Config by
  // SelectDeviceOrdinal (device/selection.h) and checked against
  // DeviceCount before any device is created.
  int ordinal = -1;
  // Host backend only: how many host devices the process presents (for the
  // device's name, "host:1 of 4"). See Config::host_devices.
  int host_devices = 1;
  // Bytes of device memory Allocate() may hand out in total; 0 = no limit.
  uint64_t memory_budget = 0;
  // Host backend only, an emulation for benchmarks: host<->device copies
  // take at least bytes / copy_bandwidth seconds (as if over PCIe); 0 = off.
  uint64_t emulated_copy_bandwidth = 0;  // bytes per second
  // Host backend only, a test mode (Config::async_host_streams): every
  // stream runs each operation on its own thread after a random delay of up
  // to async_max_delay, never inline in a caller's Synchronize(), so that
  // work a caller forgot to order (a missing event or Synchronize) runs late
  // and gives wrong results, as it would on a GPU.
  bool async_streams = false;
  std::chrono::microseconds async_max_delay{200};
  // Host backend only, a test mode (Config::host_opaque_device_pointers):
  // Allocate() returns addresses that the host cannot dereference (a fixed
  // offset puts them outside the canonical address range), as a GPU's are;
  // the device's own operations translate them back. Code that reads or
  // writes device memory on the host then crashes here, not first on a GPU.
  bool opaque_pointers = false;
  // Host backend only, a test mode (GEEPS_HOST_NO_ALIAS=1): HostAlias()
  // returns null, as on CUDA, so that the paths libgeeps takes for device
  // memory the host cannot read (copies instead of sends in place) run on
  // a machine without a GPU too. The memory itself stays host memory.
  bool no_host_alias = false;
  // Host backend only: the device of the CUDA-like mode (GEEPS_HOST_AS_CUDA,
  // device/host/cuda_like.h), named "host:0 of 1 (CUDA-like)". Set by that
  // mode, with the three modes above.
  bool cuda_like = false;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  // "host:1 of 4", "cuda:3 (NVIDIA H200, sm_90)".
  virtual std::string name() const = 0;
  // The device's ordinal among the devices of its kind in this process.
  virtual int ordinal() const = 0;

  // Device memory. kResourceExhausted when the budget would be exceeded (the
  // message gives requested, in use and budget bytes). Memory is not zeroed.
  virtual StatusOr<void*> Allocate(size_t bytes) = 0;
  // REQUIRES: p came from Allocate() of this device and no queued operation
  // still uses it. nullptr is ignored.
  virtual void Free(void* p) = 0;
  // Host memory that the device can copy to and from asynchronously (pinned
  // on CUDA). Not counted against the budget.
  virtual StatusOr<void*> AllocatePinned(size_t bytes) = 0;
  virtual void FreePinned(void* p) = 0;

  virtual uint64_t bytes_in_use() const = 0;
  virtual uint64_t memory_budget() const = 0;  // 0 = no limit

  virtual StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  virtual StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;

  // ---- Asynchronous operations, run in order on `stream` -------------------
  virtual Status Copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream* stream) = 0;

  // Aliasing, for the kernels below (on CUDA every element runs at once, on
  // __restrict__ pointers where the contract allows it): memory an operation
  // writes must not overlap memory it reads, except where said. Read-only
  // arguments may overlap each other.
  //
  // dst[i*width .. +width) = src[index[i]*width .. +width) for i < n.
  // REQUIRES: dst overlaps neither the rows of src it reads nor index.
  // Repeated indexes are fine.
  virtual Status Gather(float* dst, const float* src, const uint32_t* index, size_t n, size_t width,
                        Stream* stream) = 0;
  // dst[index[i]*width + j] += src[i*width + j]. REQUIRES: indexes within one
  // call are distinct; the rows of dst it writes overlap neither src nor
  // index.
  virtual Status ScatterAdd(float* dst, const float* src, const uint32_t* index, size_t n,
                            size_t width, Stream* stream) = 0;
  // dst[index[i]*width .. +width) = src[i*width .. +width) (assignment).
  // REQUIRES: the rows of dst it writes overlap neither src nor index. With a
  // repeated index one of its source rows lands, which one is unspecified.
  virtual Status Scatter(float* dst, const float* src, const uint32_t* index, size_t n,
                         size_t width, Stream* stream) = 0;
  // dst[i] += src[i] for i < count. dst == src is allowed (each element is
  // doubled); otherwise the two ranges of `count` floats must not overlap at
  // all: a partial overlap is kInvalidArgument (at once, on every backend).
  virtual Status Add(float* dst, const float* src, size_t count, Stream* stream) = 0;
  // dst[i] = value for i < count.
  virtual Status Fill(float* dst, float value, size_t count, Stream* stream) = 0;

  // Runs `work` on the host in stream order: after everything enqueued on
  // `stream` before it, before anything enqueued after it. `work` must not
  // call into the device (on CUDA it is a cudaLaunchHostFunc callback, which
  // may not call CUDA) and must not throw.
  virtual Status HostFunction(std::function<void()> work, Stream* stream) = 0;

  // ---- Ordering -------------------------------------------------------------
  // Marks the current end of `stream` in `event`.
  virtual Status Record(Event* event, Stream* stream) = 0;
  // Later operations on `stream` wait until `event` has completed.
  virtual Status StreamWait(Stream* stream, Event* event) = 0;
  // Blocks the caller until everything enqueued on `stream` has run. Returns
  // the first error of an operation on the stream, if any.
  virtual Status Synchronize(Stream* stream) = 0;
  // Blocks the caller until `event` has completed.
  virtual Status EventSynchronize(Event* event) = 0;
  // Non-blocking: whether `event` has completed.
  virtual bool EventDone(Event* event) = 0;
  // The host address of device memory `p` when the host may read it there
  // (the host backend: device memory is host memory), else null (CUDA).
  // Reads through it must be ordered after the device's writes
  // (Synchronize) like any copy.
  virtual const void* HostAlias(const void* p) const {
    (void)p;
    return nullptr;
  }
  // Host memory [p, p + bytes) used as device memory in place: the device
  // address by which the device's operations (and the application, through
  // them) reach it until UnmapHostMemory(), or null where the device cannot
  // (CUDA; the host backend's no-alias mode). Not counted against the
  // budget; the caller keeps the memory alive until it unmaps. Lets a worker
  // on the host backend keep a push in the message that brought it instead
  // of copying it into the cache (docs/architecture.md, "Pushes kept where
  // they arrived").
  virtual void* MapHostMemory(void* p, size_t bytes) {
    (void)p;
    (void)bytes;
    return nullptr;
  }
  // REQUIRES: `device_p` came from MapHostMemory() of this device and no
  // queued operation still uses it.
  virtual void UnmapHostMemory(void* device_p) { (void)device_p; }
};

// Creates a device. kAuto picks CUDA when the backend is built and a GPU is
// present, else host; with GEEPS_HOST_AS_CUDA=1, that host device is the
// CUDA-like one (device/host/cuda_like.h: `options` with the modes above,
// and the driver's side effects). kCuda without CUDA is kUnavailable with
// the reason.
// With GEEPS_DEVICE_TRACE=<file> set, each device created appends
// "<pid> <name>" to that file (a test run's record of the devices it used).
StatusOr<std::unique_ptr<Device>> CreateDevice(DeviceKind kind, const DeviceOptions& options);

// How many devices of `kind` this process can use: for kHost,
// `host_devices`; for kCuda, cudaGetDeviceCount (kUnavailable as
// CheckDeviceAvailable without one); kAuto is kCuda when a GPU is usable,
// else kHost (1 with GEEPS_HOST_AS_CUDA=1, as on a machine with one GPU).
StatusOr<int> DeviceCount(DeviceKind kind, int host_devices);

// Whether CreateDevice(kind) can succeed, without creating anything: OK for
// kHost and kAuto; for kCuda, kUnavailable naming the reason ("CUDA backend
// not built", or "no CUDA device: " and the cudaGetDeviceCount error). The
// GPU probe runs once per process. Any thread.
Status CheckDeviceAvailable(DeviceKind kind);

}  // namespace geeps::device

#endif  // GEEPS_DEVICE_DEVICE_H_
