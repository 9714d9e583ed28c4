#include "device/device.h"

#include <memory>
#include <new>
#include <string>

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
      if (!CudaUsable().ok()) return host_devices;
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

StatusOr<std::unique_ptr<Device>> CreateDevice(DeviceKind kind, const DeviceOptions& options) {
  switch (kind) {
    case DeviceKind::kAuto:
      // Any error of the probe (no driver, no device) means "no GPU".
      if (!CudaUsable().ok()) return CreateHostDevice(options);
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

}  // namespace geeps::device
