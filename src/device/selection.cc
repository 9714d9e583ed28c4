#include "device/selection.h"

#include <cstdint>
#include <string>

#include "common/env_flags.h"
#include "device/device.h"

namespace geeps::device {

StatusOr<int> SelectDeviceOrdinal(int configured, int local_rank, int workers_in_process,
                                  int worker, int device_count) {
  if (device_count < 1)
    return InvalidArgumentError("device selection: no device (device count " +
                                std::to_string(device_count) + ")");
  if (configured >= device_count)
    return InvalidArgumentError("Config::device_ordinal " + std::to_string(configured) +
                                " is not a device of this process: it has " +
                                std::to_string(device_count) + " devices (ordinals 0 to " +
                                std::to_string(device_count - 1) + ")");
  if (configured >= 0) return configured;
  if (configured != -1)
    return InvalidArgumentError("Config::device_ordinal must be -1 (automatic) or >= 0, got " +
                                std::to_string(configured));
  if (local_rank < 0 || workers_in_process < 1 || worker < 0 || worker >= workers_in_process)
    return InvalidArgumentError("device selection: local rank " + std::to_string(local_rank) +
                                ", worker " + std::to_string(worker) + " of " +
                                std::to_string(workers_in_process) + " in the process");
  // In 64 bits: local_rank * workers_in_process may exceed an int.
  const int64_t slot = static_cast<int64_t>(local_rank) * workers_in_process + worker;
  return static_cast<int>(slot % device_count);
}

StatusOr<std::vector<int>> SelectWorkerDevices(const Config& config, int local_rank,
                                               int workers_in_process) {
  GEEPS_ASSIGN_OR_RETURN(int count, DeviceCount(config.device, config.host_devices));
  std::vector<int> ordinals;
  for (int w = 0; w < workers_in_process; ++w) {
    StatusOr<int> ordinal =
        SelectDeviceOrdinal(config.device_ordinal, local_rank, workers_in_process, w, count);
    if (!ordinal.ok()) {
      const bool automatic_host =
          config.device == DeviceKind::kAuto && !CheckDeviceAvailable(DeviceKind::kCuda).ok();
      const bool host = config.device == DeviceKind::kHost || automatic_host;
      const StatusOr<bool> cuda_like = HostAsCudaFromEnvironment();
      const char* hint = !host ? "; CUDA devices are the GPUs cudaGetDeviceCount sees"
                         : automatic_host && cuda_like.ok() && *cuda_like
                             ? "; DeviceKind::kAuto is one device in the CUDA-like host mode "
                               "(GEEPS_HOST_AS_CUDA=1), as on a machine with one GPU"
                             : "; host devices are Config::host_devices (GEEPS_HOST_DEVICES)";
      return Status(ordinal.status().code(), ordinal.status().message() + hint);
    }
    ordinals.push_back(*ordinal);
  }
  return ordinals;
}

}  // namespace geeps::device
