#include "device/device.h"

#include <memory>
#include <new>
#include <string>

#include "device/host/host_device.h"

namespace geeps::device {

namespace {

StatusOr<std::unique_ptr<Device>> CreateHostDevice(
    const DeviceOptions& options) {
  try {
    return std::unique_ptr<Device>(std::make_unique<host::HostDevice>(options));
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("out of memory creating the host device");
  }
}

}  // namespace

StatusOr<std::unique_ptr<Device>> CreateDevice(DeviceKind kind,
                                               const DeviceOptions& options) {
  switch (kind) {
    case DeviceKind::kAuto:
      // The CUDA backend arrives with a later issue; until then kAuto is
      // always the host backend. Once it exists: CUDA when the backend is
      // built and a GPU is present, else host.
    case DeviceKind::kHost:
      return CreateHostDevice(options);
    case DeviceKind::kCuda:
      return UnavailableError(
          "CUDA backend not built: this libgeeps has no CUDA backend yet; "
          "use DeviceKind::kHost (or kAuto)");
  }
  return InvalidArgumentError("CreateDevice: unknown DeviceKind " +
                              std::to_string(static_cast<int>(kind)));
}

}  // namespace geeps::device
