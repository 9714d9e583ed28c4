#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

namespace {

// The numeric GEEPS_* variables of Config: each name once, with its range
// and the field it sets (booleans are 0 or 1).
struct NumericVariable {
  const char* name;
  long long lo, hi;
  void (*set)(Config*, long long);
};

constexpr long long kDay = 24ll * 3600 * 1000;  // milliseconds

const NumericVariable kNumericVariables[] = {
    {"GEEPS_NUM_WORKERS", 1, kMaxWorkers,
     [](Config* c, long long v) { c->num_workers = static_cast<int>(v); }},
    {"GEEPS_NUM_SHARDS", 1, kMaxShards,
     [](Config* c, long long v) { c->num_shards = static_cast<int>(v); }},
    {"GEEPS_NUM_CHANNELS", 1, kMaxChannels,
     [](Config* c, long long v) { c->num_channels = static_cast<int>(v); }},
    {"GEEPS_DEFAULT_SLACK", 0, 1 << 30,
     [](Config* c, long long v) { c->default_slack = static_cast<int>(v); }},
    {"GEEPS_PREFETCH_DEPTH", 0, 64,
     [](Config* c, long long v) { c->prefetch_depth = static_cast<int>(v); }},
    {"GEEPS_DEVICE_ORDINAL", -1, kMaxDevices - 1,
     [](Config* c, long long v) { c->device_ordinal = static_cast<int>(v); }},
    {"GEEPS_HOST_DEVICES", 1, kMaxDevices,
     [](Config* c, long long v) { c->host_devices = static_cast<int>(v); }},
    {"GEEPS_WORKERS_PER_MACHINE", 0, kMaxWorkers,
     [](Config* c, long long v) { c->workers_per_machine = static_cast<int>(v); }},
    {"GEEPS_DETERMINISTIC_BSP", 0, 1,
     [](Config* c, long long v) { c->deterministic_bsp = v != 0; }},
    {"GEEPS_AGGREGATE_PER_MACHINE", 0, 1,
     [](Config* c, long long v) { c->aggregate_per_machine = v != 0; }},
    {"GEEPS_READ_MY_WRITES", 0, 1, [](Config* c, long long v) { c->read_my_writes = v != 0; }},
    {"GEEPS_RESEND_AFTER_CONNECTION_LOSS", 0, 1,
     [](Config* c, long long v) { c->resend_after_connection_loss = v != 0; }},
    {"GEEPS_DEVICE_MEMORY_BUDGET", 0, 1ll << 62,
     [](Config* c, long long v) { c->device_memory_budget = static_cast<uint64_t>(v); }},
    {"GEEPS_TIMEOUT_MS", 1, kDay,
     [](Config* c, long long v) { c->timeout = std::chrono::milliseconds(v); }},
    {"GEEPS_HEARTBEAT_TIMEOUT_MS", 10, kDay,
     [](Config* c, long long v) { c->heartbeat_timeout = std::chrono::milliseconds(v); }},
    {"GEEPS_MAX_MESSAGE_BYTES", kMinMessageBytes, kMaxMessageBytes,
     [](Config* c, long long v) { c->max_message_bytes = static_cast<uint64_t>(v); }},
    {"GEEPS_PUSH_IN_READ_ORDER", 0, 1,
     [](Config* c, long long v) { c->push_in_read_order = v != 0; }},
    {"GEEPS_ADAPT_PUSH_ORDER", 0, 1, [](Config* c, long long v) { c->adapt_push_order = v != 0; }},
    {"GEEPS_PIPELINE_PART_BYTES", 0, kMaxMessageBytes,
     [](Config* c, long long v) { c->pipeline_part_bytes = static_cast<uint64_t>(v); }},
    {"GEEPS_EMULATED_COPY_BANDWIDTH", 0, 1ll << 50,
     [](Config* c, long long v) { c->emulated_copy_bandwidth = static_cast<uint64_t>(v); }},
    {"GEEPS_EMULATED_COMPUTE_US", 0, 10000000,
     [](Config* c, long long v) { c->emulated_compute_per_access = std::chrono::microseconds(v); }},
    {"GEEPS_CHECKPOINT_EVERY", 0, kMaxCheckpointEvery,
     [](Config* c, long long v) { c->checkpoint_every = v; }},
};

// The GEEPS_* variables of Config that take one of a few words.
struct ChoiceVariable {
  const char* name;
  const char* expected;  // for the error: "off, required or if-present"
  std::vector<std::pair<const char*, void (*)(Config*)>> words;
};

const ChoiceVariable& ResumeVariable() {
  static const ChoiceVariable kVariable{
      "GEEPS_RESUME",
      "off, required or if-present",
      {{"off", [](Config* c) { c->resume = ResumeMode::kOff; }},
       {"required", [](Config* c) { c->resume = ResumeMode::kRequired; }},
       {"if-present", [](Config* c) { c->resume = ResumeMode::kIfPresent; }}}};
  return kVariable;
}

const ChoiceVariable& MemoryGuaranteeVariable() {
  static const ChoiceVariable kVariable{
      "GEEPS_MEMORY_GUARANTEE",
      "none, double, local or cache",
      {{"none", [](Config* c) { c->memory_guarantee = MemoryGuarantee::kNone; }},
       {"double", [](Config* c) { c->memory_guarantee = MemoryGuarantee::kDoubleBuffering; }},
       {"local", [](Config* c) { c->memory_guarantee = MemoryGuarantee::kAllLocalOnDevice; }},
       {"cache", [](Config* c) { c->memory_guarantee = MemoryGuarantee::kWholeCacheOnDevice; }}}};
  return kVariable;
}

const ChoiceVariable& DeviceVariable() {
  static const ChoiceVariable kVariable{
      "GEEPS_DEVICE",
      "auto, host or cuda",
      {{"auto", [](Config* c) { c->device = DeviceKind::kAuto; }},
       {"host", [](Config* c) { c->device = DeviceKind::kHost; }},
       {"cuda", [](Config* c) { c->device = DeviceKind::kCuda; }}}};
  return kVariable;
}

Status ApplyChoice(const ChoiceVariable& v, Config* c) {
  const char* text = std::getenv(v.name);
  if (text == nullptr) return Status::OK();
  for (const auto& [word, set] : v.words) {
    if (std::string(text) == word) {
      set(c);
      return Status::OK();
    }
  }
  return InvalidArgumentError(std::string(v.name) + "='" + text + "': expected " + v.expected);
}

}  // namespace

Status ApplyEnvironment(Config* c) {
  for (const NumericVariable& v : kNumericVariables) {
    if (const char* text = std::getenv(v.name)) {
      GEEPS_ASSIGN_OR_RETURN(long long value, ParseInt(v.name, text, v.lo, v.hi));
      v.set(c, value);
    }
  }
  GEEPS_ASSIGN_OR_RETURN(bool async_host, AsyncHostStreamsFromEnvironment());
  if (async_host) c->async_host_streams = true;
  GEEPS_ASSIGN_OR_RETURN(bool opaque, HostOpaquePointersFromEnvironment());
  if (opaque) c->host_opaque_device_pointers = true;
  if (const char* text = std::getenv("GEEPS_STATS_FILE")) c->stats_file = text;
  if (const char* text = std::getenv("GEEPS_CHECKPOINT_DIR")) c->checkpoint_dir = text;
  for (const ChoiceVariable* v : {&ResumeVariable(), &MemoryGuaranteeVariable(), &DeviceVariable()})
    GEEPS_RETURN_IF_ERROR(ApplyChoice(*v, c));
  return Status::OK();
}

std::vector<RowIndex> RowRange(RowIndex first, RowIndex count) {
  std::vector<RowIndex> rows(count);
  for (RowIndex i = 0; i < count; ++i) rows[i] = first + i;
  return rows;
}

}  // namespace geeps
