// The bounds ValidateConfig and the GEEPS_* variables (common/tunables.h)
// check Config's fields against. Internal: not part of the public API.
#ifndef GEEPS_COMMON_CONFIG_LIMITS_H_
#define GEEPS_COMMON_CONFIG_LIMITS_H_

#include <cstdint>

namespace geeps {

inline constexpr int kMaxWorkers = 4096;
inline constexpr int kMaxShards = 4096;
inline constexpr int kMaxChannels = 64;
inline constexpr int kMaxPartitions = 4096;  // shards x channels: one thread each
inline constexpr int kMaxDevices = 1024;     // device_ordinal, host_devices
inline constexpr uint64_t kMinMessageBytes = 64;
inline constexpr uint64_t kMaxMessageBytes = (1ull << 31) - 4096;  // below libzmq's 2 GB limit
inline constexpr uint64_t kMaxPackBelowBytes = 1ull << 20;         // Config::pack_below_bytes
inline constexpr uint32_t kMaxSpinWaitUs = 100000;                 // Config::spin_wait_us
inline constexpr uint32_t kMaxRowWidth = 1u << 24;
inline constexpr int64_t kMaxCheckpointEvery = 1ll << 40;
// Row counts and indexes travel as 64-bit values but caches index rows with
// 32-bit offsets.
inline constexpr uint64_t kMaxRows = (1ull << 32) - 1;
inline constexpr long long kMaxSlack = 1 << 30;  // GEEPS_DEFAULT_SLACK
inline constexpr long long kMaxPrefetchDepth = 64;
inline constexpr long long kDayMs = 24ll * 3600 * 1000;

}  // namespace geeps

#endif  // GEEPS_COMMON_CONFIG_LIMITS_H_
