// Fuzz target: the configuration read from the environment
// (geeps::ApplyEnvironment, src/common/config.cc) and ValidateConfig.
//
// Input layout: lines split on '\n'. Lines 0-3 describe one more table, added
// after a fixed valid one unless line 0 is "not set": "name", "num_rows",
// "row_width", "local" (parsed here with strtoull; "1" means local). Line
// 4 + i is the value of kVariables[i] (set with setenv; a value ends at its
// first NUL byte). A line that is the single byte 0xFF, or a line past the
// end of the input, leaves its variable unset. New variables go at the end
// of kVariables, so that existing inputs keep their meaning.
//
// Properties checked (beyond "never crashes"): a failing ApplyEnvironment
// is kInvalidArgument naming a variable; when it succeeds, every variable
// that was set to a plain decimal number landed in the config unchanged; a
// config that ValidateConfig accepts has its fields inside the documented
// bounds.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "geeps/config.h"

#ifndef GEEPS_FUZZ_ENTRY
#define GEEPS_FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

namespace geeps::fuzz::config {

// Every variable ApplyEnvironment reads (include/geeps/config.h), in input
// order. Append new ones.
constexpr const char* kVariables[] = {
    "GEEPS_NUM_WORKERS",          "GEEPS_NUM_SHARDS",          "GEEPS_NUM_CHANNELS",
    "GEEPS_READ_MY_WRITES",       "GEEPS_DEFAULT_SLACK",       "GEEPS_DEVICE",
    "GEEPS_DEVICE_MEMORY_BUDGET", "GEEPS_TIMEOUT_MS",          "GEEPS_HEARTBEAT_TIMEOUT_MS",
    "GEEPS_MAX_MESSAGE_BYTES",    "GEEPS_MEMORY_GUARANTEE",    "GEEPS_EMULATED_COPY_BANDWIDTH",
    "GEEPS_STATS_FILE",           "GEEPS_PREFETCH_DEPTH",      "GEEPS_DETERMINISTIC_BSP",
    "GEEPS_CHECKPOINT_DIR",       "GEEPS_CHECKPOINT_EVERY",    "GEEPS_RESUME",
    "GEEPS_EMULATED_COMPUTE_US",  "GEEPS_PIPELINE_PART_BYTES", "GEEPS_PUSH_IN_READ_ORDER",
    "GEEPS_ADAPT_PUSH_ORDER",
};
constexpr size_t kNumVariables = sizeof(kVariables) / sizeof(kVariables[0]);
constexpr size_t kTableLines = 4;

// The value of a plain decimal integer (digits only, fits easily), or false.
bool PlainInteger(const std::string& s, long long* out) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  *out = std::stoll(s);
  return true;
}

int Run(const uint8_t* data, size_t size) {
  const std::vector<Line> lines = SplitLines(data, size);
  auto line = [&](size_t i) { return i < lines.size() ? lines[i].value : std::string(); };
  // The value of variable `name` when the input sets it.
  auto value = [&](const char* name, std::string* out) {
    for (size_t i = 0; i < kNumVariables; ++i) {
      if (std::strcmp(kVariables[i], name) != 0) continue;
      const size_t at = kTableLines + i;
      if (at >= lines.size() || !lines[at].set) return false;
      *out = lines[at].value;
      return true;
    }
    return false;
  };
  for (const char* name : kVariables) {
    std::string v;
    if (value(name, &v)) {
      setenv(name, v.c_str(), 1);
    } else {
      unsetenv(name);
    }
  }

  Config c;
  c.tables.push_back({"fixed", 10, 3, false});
  if (!lines.empty() && lines[0].set) {
    TableSpec extra;
    extra.name = line(0);
    extra.num_rows = std::strtoull(line(1).c_str(), nullptr, 10);
    extra.row_width = static_cast<uint32_t>(std::strtoull(line(2).c_str(), nullptr, 10));
    extra.local = line(3) == "1";
    c.tables.push_back(extra);
  }

  const Status applied = ApplyEnvironment(&c);
  if (!applied.ok()) {
    GEEPS_FUZZ_CHECK(applied.code() == StatusCode::kInvalidArgument);
    GEEPS_FUZZ_CHECK(applied.message().rfind("GEEPS_", 0) == 0);
  } else {
    // Numeric variables: the field holds the number given.
    const struct {
      const char* name;
      long long field;
    } numbers[] = {
        {"GEEPS_NUM_WORKERS", c.num_workers},
        {"GEEPS_NUM_SHARDS", c.num_shards},
        {"GEEPS_NUM_CHANNELS", c.num_channels},
        {"GEEPS_READ_MY_WRITES", c.read_my_writes ? 1 : 0},
        {"GEEPS_DEFAULT_SLACK", c.default_slack},
        {"GEEPS_DEVICE_MEMORY_BUDGET", static_cast<long long>(c.device_memory_budget)},
        {"GEEPS_TIMEOUT_MS", static_cast<long long>(c.timeout.count())},
        {"GEEPS_HEARTBEAT_TIMEOUT_MS", static_cast<long long>(c.heartbeat_timeout.count())},
        {"GEEPS_MAX_MESSAGE_BYTES", static_cast<long long>(c.max_message_bytes)},
        {"GEEPS_EMULATED_COPY_BANDWIDTH", static_cast<long long>(c.emulated_copy_bandwidth)},
        {"GEEPS_PREFETCH_DEPTH", c.prefetch_depth},
        {"GEEPS_DETERMINISTIC_BSP", c.deterministic_bsp ? 1 : 0},
        {"GEEPS_CHECKPOINT_EVERY", static_cast<long long>(c.checkpoint_every)},
        {"GEEPS_EMULATED_COMPUTE_US",
         static_cast<long long>(c.emulated_compute_per_access.count())},
        {"GEEPS_PIPELINE_PART_BYTES", static_cast<long long>(c.pipeline_part_bytes)},
        {"GEEPS_PUSH_IN_READ_ORDER", c.push_in_read_order ? 1 : 0},
        {"GEEPS_ADAPT_PUSH_ORDER", c.adapt_push_order ? 1 : 0},
    };
    for (const auto& n : numbers) {
      std::string text;
      long long v = 0;
      if (value(n.name, &text) && PlainInteger(text, &v)) GEEPS_FUZZ_CHECK(n.field == v);
    }
    std::string stats_file;
    if (value("GEEPS_STATS_FILE", &stats_file)) GEEPS_FUZZ_CHECK(c.stats_file == stats_file);
    std::string checkpoint_dir;
    if (value("GEEPS_CHECKPOINT_DIR", &checkpoint_dir))
      GEEPS_FUZZ_CHECK(c.checkpoint_dir == checkpoint_dir);
  }

  const Status valid = ValidateConfig(c);
  if (valid.ok()) {
    GEEPS_FUZZ_CHECK(c.num_workers >= 1 && c.num_workers <= 4096);
    GEEPS_FUZZ_CHECK(c.num_shards >= 1 && c.num_channels >= 1 && c.num_channels <= 64);
    GEEPS_FUZZ_CHECK(static_cast<long long>(c.num_shards) * c.num_channels <= 4096);
    GEEPS_FUZZ_CHECK(c.prefetch_depth >= 0 && c.prefetch_depth <= 64);
    GEEPS_FUZZ_CHECK(c.default_slack >= 0 && c.timeout.count() > 0);
    GEEPS_FUZZ_CHECK(c.heartbeat_timeout.count() >= 10);
    GEEPS_FUZZ_CHECK(c.max_message_bytes >= 64 && c.max_message_bytes < (1ull << 31));
    GEEPS_FUZZ_CHECK(c.checkpoint_every >= 0);
    GEEPS_FUZZ_CHECK(!c.checkpoint_dir.empty() ||
                     (c.checkpoint_every == 0 && c.resume == ResumeMode::kOff));
    for (const TableSpec& t : c.tables) {
      GEEPS_FUZZ_CHECK(t.num_rows >= 1 && t.num_rows < (1ull << 32));
      GEEPS_FUZZ_CHECK(t.row_width >= 1 && t.row_width <= (1u << 24));
    }
  } else {
    GEEPS_FUZZ_CHECK(valid.code() == StatusCode::kInvalidArgument);
  }

  for (const char* name : kVariables) unsetenv(name);
  return 0;
}

}  // namespace geeps::fuzz::config

extern "C" int GEEPS_FUZZ_ENTRY(const uint8_t* data, size_t size) {
  return geeps::fuzz::config::Run(data, size);
}
