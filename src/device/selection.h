// Which device each worker of a process uses (docs/architecture.md,
// "Several devices per machine", item 1).
#ifndef GEEPS_DEVICE_SELECTION_H_
#define GEEPS_DEVICE_SELECTION_H_

#include <vector>

#include "geeps/config.h"
#include "geeps/status.h"

namespace geeps::device {

// The ordinal of worker `worker` (0-based among the `workers_in_process`
// workers of this process) of the process with index `local_rank` on its
// machine, given `device_count` devices: `configured` when it is >= 0
// (Config::device_ordinal), else (local_rank * workers_in_process + worker)
// mod device_count. kInvalidArgument when `configured` >= device_count (the
// message names both numbers) or an argument is out of range. Pure.
StatusOr<int> SelectDeviceOrdinal(int configured, int local_rank, int workers_in_process,
                                  int worker, int device_count);

// SelectDeviceOrdinal for each of the `workers_in_process` workers of this
// process, with the device count of config.device (DeviceCount). Allocates
// nothing on any device; errors name the device kind ("2 host devices").
StatusOr<std::vector<int>> SelectWorkerDevices(const Config& config, int local_rank,
                                               int workers_in_process);

}  // namespace geeps::device

#endif  // GEEPS_DEVICE_SELECTION_H_
