#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "geeps/config.h"

#include "common/config_limits.h"
#include "common/env_flags.h"
#include "common/tunables.h"

namespace geeps {
namespace {

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
  if (c.prefetch_depth < 0 || c.prefetch_depth > kMaxPrefetchDepth)
    return InvalidArgumentError("prefetch_depth must be in [0, " +
                                std::to_string(kMaxPrefetchDepth) + "], got " +
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
  if (c.pack_below_bytes > kMaxPackBelowBytes)
    return InvalidArgumentError("pack_below_bytes must be in [0, " +
                                std::to_string(kMaxPackBelowBytes) + "], got " +
                                std::to_string(c.pack_below_bytes));
  if (c.spin_wait_us > kMaxSpinWaitUs)
    return InvalidArgumentError("spin_wait_us must be in [0, " + std::to_string(kMaxSpinWaitUs) +
                                "] microseconds, got " + std::to_string(c.spin_wait_us));
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
StatusOr<bool> HostAsCudaFromEnvironment() { return BoolFlag("GEEPS_HOST_AS_CUDA"); }
StatusOr<bool> CheckedFromEnvironment() { return BoolFlag("GEEPS_CHECKED"); }

Status CheckLogLevelEnvironment() {
  const char* text = std::getenv("GEEPS_LOG_LEVEL");
  if (text == nullptr || text[0] == '\0') return Status::OK();
  for (const char* level : {"error", "warning", "info", "debug"})
    if (std::string(text) == level) return Status::OK();
  return InvalidArgumentError(std::string("GEEPS_LOG_LEVEL='") + text +
                              "': expected one of error|warning|info|debug");
}

Status CheckSelfReadEnvironment() {
  GEEPS_RETURN_IF_ERROR(AsyncHostStreamsFromEnvironment().status());
  GEEPS_RETURN_IF_ERROR(HostOpaquePointersFromEnvironment().status());
  GEEPS_RETURN_IF_ERROR(HostNoAliasFromEnvironment().status());
  GEEPS_RETURN_IF_ERROR(HostAsCudaFromEnvironment().status());
  GEEPS_RETURN_IF_ERROR(CheckedFromEnvironment().status());
  return CheckLogLevelEnvironment();
}

namespace {

// One Config row of common/tunables.h, if its variable is set.
Status ApplyTunable(const tunables::Tunable& t, Config* c) {
  const char* text = std::getenv(t.variable);
  if (text == nullptr) return Status::OK();
  switch (t.kind) {
    case tunables::Kind::kInteger: {
      GEEPS_ASSIGN_OR_RETURN(long long value, ParseInt(t.variable, text, t.lo, t.hi));
      t.set_integer(c, value);
      return Status::OK();
    }
    case tunables::Kind::kChoice:
      for (const tunables::Word& w : t.words) {
        if (std::string(text) == w.word) {
          w.set(c);
          return Status::OK();
        }
      }
      return InvalidArgumentError(std::string(t.variable) + "='" + text + "': expected one of " +
                                  tunables::Values(t));
    case tunables::Kind::kText:
      t.set_text(c, text);
      return Status::OK();
    case tunables::Kind::kOther:
      break;
  }
  return Status::OK();
}

}  // namespace

Status ApplyEnvironment(Config* c) {
  for (const tunables::Tunable& t : tunables::All()) {
    if (t.scope == tunables::Scope::kConfig) GEEPS_RETURN_IF_ERROR(ApplyTunable(t, c));
  }
  GEEPS_RETURN_IF_ERROR(CheckLogLevelEnvironment());
  GEEPS_ASSIGN_OR_RETURN(bool async_host, AsyncHostStreamsFromEnvironment());
  if (async_host) c->async_host_streams = true;
  GEEPS_ASSIGN_OR_RETURN(bool opaque, HostOpaquePointersFromEnvironment());
  if (opaque) c->host_opaque_device_pointers = true;
  GEEPS_ASSIGN_OR_RETURN(bool checked, CheckedFromEnvironment());
  if (checked) c->checked = true;
  return Status::OK();
}

std::vector<RowIndex> RowRange(RowIndex first, RowIndex count) {
  std::vector<RowIndex> rows(count);
  for (RowIndex i = 0; i < count; ++i) rows[i] = first + i;
  return rows;
}

}  // namespace geeps
