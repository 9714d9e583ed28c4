#include "device/device.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "common/env_flags.h"
#include "device/host/cuda_like.h"
#include "device/host/host_device.h"
#ifdef GEEPS_HAVE_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace geeps::device {

namespace {

StatusOr<std::unique_ptr<Device>> CreateHostDevice(const DeviceOptions& options) {
  try {
    return std::unique_ptr<Device>(std::make_unique<host::HostDevice>(options));
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("out of memory creating the host device");
  }
}

// OK when the CUDA backend is built and sees a GPU; else why not.
Status CudaUsable() {
#ifdef GEEPS_HAVE_CUDA
  return cuda::CudaAvailable();
#else
  return UnavailableError(
      "CUDA backend not built: this libgeeps was built without CUDA "
      "(GEEPS_WITH_CUDA=OFF, or no nvcc at configure time); use "
      "DeviceKind::kHost (or kAuto)");
#endif
}

// GEEPS_DEVICE_TRACE=<file>: every device created appends "<pid> <name>"
// to the file, so that a test run can tell which of its tests touched a GPU
// (scripts/gpu-check.sh's suite stage). A file that cannot be written is
// ignored: the trace is a report, never a reason to fail.
StatusOr<std::unique_ptr<Device>> Traced(StatusOr<std::unique_ptr<Device>> device) {
  const char* path = std::getenv("GEEPS_DEVICE_TRACE");
  if (!device.ok() || path == nullptr || path[0] == '\0') return device;
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return device;
  const std::string line = std::to_string(getpid()) + " " + (*device)->name() + "\n";
  // One write of a short line to an O_APPEND file: lines of several
  // processes do not interleave.
  [[maybe_unused]] const ssize_t written = write(fd, line.data(), line.size());
  close(fd);
  return device;
}

}  // namespace

Status CheckDeviceAvailable(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kAuto:
    case DeviceKind::kHost:
      return Status::OK();
    case DeviceKind::kCuda:
      return CudaUsable();
  }
  return InvalidArgumentError("unknown DeviceKind " + std::to_string(static_cast<int>(kind)));
}

StatusOr<int> DeviceCount(DeviceKind kind, int host_devices) {
  switch (kind) {
    case DeviceKind::kAuto:
      if (!CudaUsable().ok()) {
        GEEPS_ASSIGN_OR_RETURN(bool cuda_like, HostAsCudaFromEnvironment());
        return cuda_like ? 1 : host_devices;
      }
      [[fallthrough]];
    case DeviceKind::kCuda:
      GEEPS_RETURN_IF_ERROR(CudaUsable());
#ifdef GEEPS_HAVE_CUDA
      return cuda::CudaDeviceCount();
#else
      return InternalError("CUDA usable without the CUDA backend");
#endif
    case DeviceKind::kHost:
      return host_devices;
  }
  return InvalidArgumentError("DeviceCount: unknown DeviceKind " +
                              std::to_string(static_cast<int>(kind)));
}

namespace {

StatusOr<std::unique_ptr<Device>> CreateUntraced(DeviceKind kind, const DeviceOptions& options) {
  switch (kind) {
    case DeviceKind::kAuto:
      // Any error of the probe (no driver, no device) means "no GPU".
      if (!CudaUsable().ok()) {
        GEEPS_ASSIGN_OR_RETURN(bool cuda_like, HostAsCudaFromEnvironment());
        if (!cuda_like) return CreateHostDevice(options);
        host::StartDriverStandIn();
        return CreateHostDevice(host::CudaLikeOptions(options));
      }
      [[fallthrough]];
    case DeviceKind::kCuda:
      GEEPS_RETURN_IF_ERROR(CudaUsable());
#ifdef GEEPS_HAVE_CUDA
      return cuda::CudaDevice::Create(options);
#else
      return InternalError("CUDA usable without the CUDA backend");
#endif
    case DeviceKind::kHost:
      return CreateHostDevice(options);
  }
  return InvalidArgumentError("CreateDevice: unknown DeviceKind " +
                              std::to_string(static_cast<int>(kind)));
}

}  // namespace

StatusOr<std::unique_ptr<Device>> CreateDevice(DeviceKind kind, const DeviceOptions& options) {
  return Traced(CreateUntraced(kind, options));
}

}  // namespace geeps::device
