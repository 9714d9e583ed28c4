// Machines of a job with Config::aggregate_per_machine: the workers of one
// machine send their summed updates through one relay, which the shards see
// as the machine's leader (its lowest rank). docs/architecture.md, "Several
// devices per machine".
#ifndef GEEPS_COMMON_MACHINES_H_
#define GEEPS_COMMON_MACHINES_H_

#include <algorithm>
#include <vector>

#include "geeps/config.h"

namespace geeps::common {

// Workers per machine (at least 1; every worker its own machine without
// aggregation).
inline int MachineSize(const Config& c) {
  if (!c.aggregate_per_machine) return 1;
  return c.workers_per_machine > 0 ? c.workers_per_machine : std::max(1, c.num_workers);
}

inline int NumMachines(const Config& c) {
  const int size = MachineSize(c);
  return (c.num_workers + size - 1) / size;
}

inline int MachineOf(const Config& c, int worker) { return worker / MachineSize(c); }

// The ranks of machine `m`, ascending (the first is its leader).
inline std::vector<int> MachineMembers(const Config& c, int m) {
  std::vector<int> ranks;
  const int size = MachineSize(c);
  for (int w = m * size; w < std::min(c.num_workers, (m + 1) * size); ++w) ranks.push_back(w);
  return ranks;
}

// Whether the shards hear from `worker` itself: every worker without
// aggregation, only each machine's leader with it.
inline bool IsParticipant(const Config& c, int worker) { return worker % MachineSize(c) == 0; }

}  // namespace geeps::common

#endif  // GEEPS_COMMON_MACHINES_H_
