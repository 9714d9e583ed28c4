#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>

#include "geeps/config.h"

#include "common/env_flags.h"

namespace geeps {
namespace {

constexpr int kMaxWorkers = 4096;
constexpr int kMaxShards = 4096;
constexpr int kMaxChannels = 64;
constexpr int kMaxPartitions = 4096;
constexpr int kMaxDevices = 1024;  // device_ordinal, host_devices
constexpr uint64_t kMinMessageBytes = 64;
constexpr uint64_t kMaxMessageBytes =
    (1ull << 31) - 4096;  // below libzmq's 2 GB limit  // shards x channels: one thread each
constexpr uint32_t kMaxRowWidth = 1u << 24;
constexpr int64_t kMaxCheckpointEvery = 1ll << 40;
// Row counts and indexes travel as 64-bit values but caches index rows with
// 32-bit offsets.
constexpr uint64_t kMaxRows = (1ull << 32) - 1;

StatusOr<long long> ParseInt(const char* name, const char* text, long long lo, long long hi) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    return InvalidArgumentError(std::string(name) + "='" + text + "': expected an integer in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace

Status ValidateConfig(const Config& c) {
  if (c.num_workers < 1 || c.num_workers > kMaxWorkers)
    return InvalidArgumentError("num_workers must be in [1, " + std::to_string(kMaxWorkers) +
                                "], got " + std::to_string(c.num_workers));
  if (c.num_shards < 1 || c.num_shards > kMaxShards)
    return InvalidArgumentError("num_shards must be in [1, " + std::to_string(kMaxShards) +
                                "], got " + std::to_string(c.num_shards));
  if (c.num_channels < 1 || c.num_channels > kMaxChannels)
    return InvalidArgumentError("num_channels must be in [1, " + std::to_string(kMaxChannels) +
                                "], got " + std::to_string(c.num_channels));
  if (static_cast<int64_t>(c.num_shards) * c.num_channels > kMaxPartitions)
    return InvalidArgumentError(
        "num_shards x num_channels must be at most " + std::to_string(kMaxPartitions) + ", got " +
        std::to_string(c.num_shards) + " x " + std::to_string(c.num_channels));
  if (c.prefetch_depth < 0 || c.prefetch_depth > 64)
    return InvalidArgumentError("prefetch_depth must be in [0, 64], got " +
                                std::to_string(c.prefetch_depth));
  if (c.device_ordinal < -1 || c.device_ordinal >= kMaxDevices)
    return InvalidArgumentError("device_ordinal must be -1 (automatic) or in [0, " +
                                std::to_string(kMaxDevices) + "), got " +
                                std::to_string(c.device_ordinal));
  if (c.host_devices < 1 || c.host_devices > kMaxDevices)
    return InvalidArgumentError("host_devices must be in [1, " + std::to_string(kMaxDevices) +
                                "], got " + std::to_string(c.host_devices));
  if (c.workers_per_machine < 0 || c.workers_per_machine > c.num_workers)
    return InvalidArgumentError(
        "workers_per_machine must be in [0, num_workers = " + std::to_string(c.num_workers) +
        "], got " + std::to_string(c.workers_per_machine));
  if (c.workers_per_machine > 0 && !c.aggregate_per_machine)
    return InvalidArgumentError("workers_per_machine is " + std::to_string(c.workers_per_machine) +
                                " but aggregate_per_machine is off (it groups workers only for "
                                "machine-level aggregation)");
  if (c.default_slack < 0)
    return InvalidArgumentError("default_slack must be >= 0, got " +
                                std::to_string(c.default_slack));
  if (c.timeout.count() <= 0) return InvalidArgumentError("timeout must be positive");
  if (c.emulated_compute_per_access.count() < 0 ||
      c.emulated_compute_per_access > std::chrono::seconds(10))
    return InvalidArgumentError("emulated_compute_per_access must be in [0, 10 s], got " +
                                std::to_string(c.emulated_compute_per_access.count()) + " us");
  if (c.heartbeat_timeout.count() < 10)
    return InvalidArgumentError("heartbeat_timeout must be at least 10 ms");
  if (c.max_message_bytes < kMinMessageBytes || c.max_message_bytes > kMaxMessageBytes)
    return InvalidArgumentError(
        "max_message_bytes must be in [" + std::to_string(kMinMessageBytes) + ", " +
        std::to_string(kMaxMessageBytes) + "], got " + std::to_string(c.max_message_bytes));
  if (c.pipeline_part_bytes != 0 &&
      (c.pipeline_part_bytes < kMinMessageBytes || c.pipeline_part_bytes > kMaxMessageBytes))
    return InvalidArgumentError(
        "pipeline_part_bytes must be 0 (off) or in [" + std::to_string(kMinMessageBytes) + ", " +
        std::to_string(kMaxMessageBytes) + "], got " + std::to_string(c.pipeline_part_bytes));
  if (c.checkpoint_every < 0 || c.checkpoint_every > kMaxCheckpointEvery)
    return InvalidArgumentError("checkpoint_every must be in [0, " +
                                std::to_string(kMaxCheckpointEvery) + "] clocks, got " +
                                std::to_string(c.checkpoint_every));
  if (c.checkpoint_dir.empty() && c.checkpoint_every > 0)
    return InvalidArgumentError("checkpoint_every is " + std::to_string(c.checkpoint_every) +
                                " but checkpoint_dir is empty (set the folder to write to)");
  if (c.checkpoint_dir.empty() && c.resume != ResumeMode::kOff)
    return InvalidArgumentError(
        "resume is set but checkpoint_dir is empty (set the folder "
        "to restore from)");
  if (c.checkpoint_dir.size() > 3000)
    return InvalidArgumentError("checkpoint_dir is longer than 3000 characters");
  if (c.resume != ResumeMode::kOff && c.resume != ResumeMode::kRequired &&
      c.resume != ResumeMode::kIfPresent)
    return InvalidArgumentError("resume has an unknown value " +
                                std::to_string(static_cast<int>(c.resume)));
  if (c.tables.empty()) return InvalidArgumentError("config has no tables");
  std::set<std::string> names;
  for (size_t i = 0; i < c.tables.size(); ++i) {
    const TableSpec& t = c.tables[i];
    std::string id = "table " + std::to_string(i) + " ('" + t.name + "')";
    if (t.row_width == 0) return InvalidArgumentError(id + ": row_width must be >= 1");
    if (t.row_width > kMaxRowWidth)
      return InvalidArgumentError(id + ": row_width " + std::to_string(t.row_width) + " exceeds " +
                                  std::to_string(kMaxRowWidth));
    if (t.num_rows == 0) return InvalidArgumentError(id + ": num_rows must be >= 1");
    if (t.num_rows > kMaxRows)
      return InvalidArgumentError(id + ": num_rows " + std::to_string(t.num_rows) + " exceeds " +
                                  std::to_string(kMaxRows));
    if (!t.name.empty() && !names.insert(t.name).second)
      return InvalidArgumentError(id + ": duplicate table name");
  }
  return Status::OK();
}

namespace {
StatusOr<bool> BoolFlag(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || text[0] == '\0') return false;
  const std::string v = text;
  if (v == "1") return true;
  if (v == "0") return false;
  return InvalidArgumentError(std::string(name) + "='" + v + "': expected 0 or 1");
}
}  // namespace

StatusOr<bool> AsyncHostStreamsFromEnvironment() { return BoolFlag("GEEPS_ASYNC_HOST_STREAMS"); }
StatusOr<bool> HostOpaquePointersFromEnvironment() {
  return BoolFlag("GEEPS_HOST_OPAQUE_POINTERS");
}
StatusOr<bool> HostNoAliasFromEnvironment() { return BoolFlag("GEEPS_HOST_NO_ALIAS"); }

Status ApplyEnvironment(Config* c) {
  struct IntVar {
    const char* name;
    int* field;
    long long lo, hi;
  };
  const IntVar int_vars[] = {
      {"GEEPS_NUM_WORKERS", &c->num_workers, 1, kMaxWorkers},
      {"GEEPS_NUM_SHARDS", &c->num_shards, 1, kMaxShards},
      {"GEEPS_NUM_CHANNELS", &c->num_channels, 1, kMaxChannels},
      {"GEEPS_DEFAULT_SLACK", &c->default_slack, 0, 1 << 30},
      {"GEEPS_PREFETCH_DEPTH", &c->prefetch_depth, 0, 64},
      {"GEEPS_DEVICE_ORDINAL", &c->device_ordinal, -1, kMaxDevices - 1},
      {"GEEPS_HOST_DEVICES", &c->host_devices, 1, kMaxDevices},
      {"GEEPS_WORKERS_PER_MACHINE", &c->workers_per_machine, 0, kMaxWorkers},
  };
  for (const IntVar& v : int_vars) {
    if (const char* text = std::getenv(v.name)) {
      GEEPS_ASSIGN_OR_RETURN(long long value, ParseInt(v.name, text, v.lo, v.hi));
      *v.field = static_cast<int>(value);
    }
  }
  if (const char* text = std::getenv("GEEPS_DETERMINISTIC_BSP")) {
    GEEPS_ASSIGN_OR_RETURN(long long value, ParseInt("GEEPS_DETERMINISTIC_BSP", text, 0, 1));
    c->deterministic_bsp = value != 0;
  }
  if (const char* text = std::getenv("GEEPS_AGGREGATE_PER_MACHINE")) {
    GEEPS_ASSIGN_OR_RETURN(long long value, ParseInt("GEEPS_AGGREGATE_PER_MACHINE", text, 0, 1));
    c->aggregate_per_machine = value != 0;
  }
  if (const char* text = std::getenv("GEEPS_READ_MY_WRITES")) {
    GEEPS_ASSIGN_OR_RETURN(long long value, ParseInt("GEEPS_READ_MY_WRITES", text, 0, 1));
    c->read_my_writes = value != 0;
  }
  if (const char* text = std::getenv("GEEPS_RESEND_AFTER_CONNECTION_LOSS")) {
    GEEPS_ASSIGN_OR_RETURN(long long value,
                           ParseInt("GEEPS_RESEND_AFTER_CONNECTION_LOSS", text, 0, 1));
    c->resend_after_connection_loss = value != 0;
  }
  if (const char* text = std::getenv("GEEPS_DEVICE_MEMORY_BUDGET")) {
    GEEPS_ASSIGN_OR_RETURN(long long value,
                           ParseInt("GEEPS_DEVICE_MEMORY_BUDGET", text, 0, (1ll << 62)));
    c->device_memory_budget = static_cast<uint64_t>(value);
  }
  if (const char* text = std::getenv("GEEPS_TIMEOUT_MS")) {
    GEEPS_ASSIGN_OR_RETURN(long long value,
                           ParseInt("GEEPS_TIMEOUT_MS", text, 1, 24ll * 3600 * 1000));
    c->timeout = std::chrono::milliseconds(value);
  }
  if (const char* text = std::getenv("GEEPS_HEARTBEAT_TIMEOUT_MS")) {
    GEEPS_ASSIGN_OR_RETURN(long long value,
                           ParseInt("GEEPS_HEARTBEAT_TIMEOUT_MS", text, 10, 24ll * 3600 * 1000));
    c->heartbeat_timeout = std::chrono::milliseconds(value);
  }
  if (const char* text = std::getenv("GEEPS_MAX_MESSAGE_BYTES")) {
    GEEPS_ASSIGN_OR_RETURN(long long value, ParseInt("GEEPS_MAX_MESSAGE_BYTES", text,
                                                     kMinMessageBytes, kMaxMessageBytes));
    c->max_message_bytes = static_cast<uint64_t>(value);
  }
  if (const char* text = std::getenv("GEEPS_PUSH_IN_READ_ORDER")) {
    GEEPS_ASSIGN_OR_RETURN(long long value, ParseInt("GEEPS_PUSH_IN_READ_ORDER", text, 0, 1));
    c->push_in_read_order = value != 0;
  }
  if (const char* text = std::getenv("GEEPS_ADAPT_PUSH_ORDER")) {
    GEEPS_ASSIGN_OR_RETURN(long long value, ParseInt("GEEPS_ADAPT_PUSH_ORDER", text, 0, 1));
    c->adapt_push_order = value != 0;
  }
  if (const char* text = std::getenv("GEEPS_PIPELINE_PART_BYTES")) {
    GEEPS_ASSIGN_OR_RETURN(long long value,
                           ParseInt("GEEPS_PIPELINE_PART_BYTES", text, 0, kMaxMessageBytes));
    c->pipeline_part_bytes = static_cast<uint64_t>(value);
  }
  if (const char* text = std::getenv("GEEPS_EMULATED_COPY_BANDWIDTH")) {
    GEEPS_ASSIGN_OR_RETURN(long long value,
                           ParseInt("GEEPS_EMULATED_COPY_BANDWIDTH", text, 0, (1ll << 50)));
    c->emulated_copy_bandwidth = static_cast<uint64_t>(value);
  }
  if (const char* text = std::getenv("GEEPS_EMULATED_COMPUTE_US")) {
    GEEPS_ASSIGN_OR_RETURN(long long value,
                           ParseInt("GEEPS_EMULATED_COMPUTE_US", text, 0, 10000000));
    c->emulated_compute_per_access = std::chrono::microseconds(value);
  }
  GEEPS_ASSIGN_OR_RETURN(bool async_host, AsyncHostStreamsFromEnvironment());
  if (async_host) c->async_host_streams = true;
  GEEPS_ASSIGN_OR_RETURN(bool opaque, HostOpaquePointersFromEnvironment());
  if (opaque) c->host_opaque_device_pointers = true;
  if (const char* text = std::getenv("GEEPS_STATS_FILE")) c->stats_file = text;
  if (const char* text = std::getenv("GEEPS_CHECKPOINT_DIR")) c->checkpoint_dir = text;
  if (const char* text = std::getenv("GEEPS_CHECKPOINT_EVERY")) {
    GEEPS_ASSIGN_OR_RETURN(long long value,
                           ParseInt("GEEPS_CHECKPOINT_EVERY", text, 0, kMaxCheckpointEvery));
    c->checkpoint_every = value;
  }
  if (const char* text = std::getenv("GEEPS_RESUME")) {
    const std::string v = text;
    if (v == "off")
      c->resume = ResumeMode::kOff;
    else if (v == "required")
      c->resume = ResumeMode::kRequired;
    else if (v == "if-present")
      c->resume = ResumeMode::kIfPresent;
    else
      return InvalidArgumentError("GEEPS_RESUME='" + v + "': expected off, required or if-present");
  }
  if (const char* text = std::getenv("GEEPS_MEMORY_GUARANTEE")) {
    const std::string v = text;
    if (v == "none")
      c->memory_guarantee = MemoryGuarantee::kNone;
    else if (v == "double")
      c->memory_guarantee = MemoryGuarantee::kDoubleBuffering;
    else if (v == "local")
      c->memory_guarantee = MemoryGuarantee::kAllLocalOnDevice;
    else if (v == "cache")
      c->memory_guarantee = MemoryGuarantee::kWholeCacheOnDevice;
    else
      return InvalidArgumentError("GEEPS_MEMORY_GUARANTEE='" + v +
                                  "': expected none, double, local or cache");
  }
  if (const char* text = std::getenv("GEEPS_DEVICE")) {
    std::string v = text;
    if (v == "auto")
      c->device = DeviceKind::kAuto;
    else if (v == "host")
      c->device = DeviceKind::kHost;
    else if (v == "cuda")
      c->device = DeviceKind::kCuda;
    else
      return InvalidArgumentError("GEEPS_DEVICE='" + v + "': expected auto, host or cuda");
  }
  return Status::OK();
}

std::vector<RowIndex> RowRange(RowIndex first, RowIndex count) {
  std::vector<RowIndex> rows(count);
  for (RowIndex i = 0; i < count; ++i) rows[i] = first + i;
  return rows;
}

}  // namespace geeps
