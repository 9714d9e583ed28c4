#include "common/tunables.h"

#include <chrono>
#include <cstdio>
#include <type_traits>
#include <utility>

#include "common/config_limits.h"

namespace geeps::tunables {
namespace {

// A row with its five named members set and the rest at their defaults.
Tunable Row(const char* variable, Scope scope, Kind kind, const char* field, const char* doc) {
  Tunable t;
  t.variable = variable;
  t.scope = scope;
  t.kind = kind;
  t.field = field;
  t.doc = doc;
  return t;
}

// Setter and getter of an integer or boolean field of Config.
template <auto kField>
void SetField(Config* c, long long v) {
  using T = std::remove_reference_t<decltype(c->*kField)>;
  c->*kField = static_cast<T>(v);
}
template <auto kField>
long long GetField(const Config& c) {
  return static_cast<long long>(c.*kField);
}

template <auto kField>
Tunable Integer(const char* variable, const char* field, long long lo, long long hi,
                const char* doc) {
  Tunable t = Row(variable, Scope::kConfig, Kind::kInteger, field, doc);
  t.lo = lo;
  t.hi = hi;
  t.set_integer = &SetField<kField>;
  t.get_integer = &GetField<kField>;
  return t;
}

template <auto kField>
Tunable Boolean(const char* variable, const char* field, const char* doc) {
  return Integer<kField>(variable, field, 0, 1, doc);
}

// An integer field that is not a plain number (a duration).
Tunable Custom(const char* variable, const char* field, long long lo, long long hi,
               void (*set)(Config*, long long), long long (*get)(const Config&), const char* doc) {
  Tunable t = Row(variable, Scope::kConfig, Kind::kInteger, field, doc);
  t.lo = lo;
  t.hi = hi;
  t.set_integer = set;
  t.get_integer = get;
  return t;
}

Tunable Choice(const char* variable, const char* field, std::vector<Word> words,
               const char* (*get)(const Config&), const char* doc) {
  Tunable t = Row(variable, Scope::kConfig, Kind::kChoice, field, doc);
  t.words = std::move(words);
  t.get_word = get;
  return t;
}

template <auto kField>
Tunable Text(const char* variable, const char* field, const char* doc) {
  Tunable t = Row(variable, Scope::kConfig, Kind::kText, field, doc);
  t.set_text = [](Config* c, const char* v) { c->*kField = v; };
  t.values = "path";
  return t;
}

// A variable read elsewhere (process options, diagnostics, test modes).
Tunable Elsewhere(const char* variable, Scope scope, const char* field, const char* values,
                  const char* fixed_default, const char* doc) {
  Tunable t = Row(variable, scope, Kind::kOther, field, doc);
  t.values = values;
  t.fixed_default = fixed_default;
  return t;
}

std::vector<Tunable> ConfigRows() {
  return {
      Integer<&Config::num_workers>("GEEPS_NUM_WORKERS", "Config::num_workers", 1, kMaxWorkers,
                                    "workers (one application thread each)"),
      Integer<&Config::num_shards>("GEEPS_NUM_SHARDS", "Config::num_shards", 1, kMaxShards,
                                   "server shards; each owns a contiguous row range"),
      Integer<&Config::num_channels>("GEEPS_NUM_CHANNELS", "Config::num_channels", 1, kMaxChannels,
                                     "sockets and threads per shard and per worker"),
      Integer<&Config::default_slack>("GEEPS_DEFAULT_SLACK", "Config::default_slack", 0, kMaxSlack,
                                      "slack of reads that give none (0: BSP)"),
      Boolean<&Config::read_my_writes>("GEEPS_READ_MY_WRITES", "Config::read_my_writes",
                                       "a worker sees its own updates at once"),
      Boolean<&Config::send_updates_in_place>(
          "GEEPS_SEND_UPDATES_IN_PLACE", "Config::send_updates_in_place",
          "host backend: direct updates sent from their buffers, not isolated (0: copied)"),
      Boolean<&Config::deterministic_bsp>("GEEPS_DETERMINISTIC_BSP", "Config::deterministic_bsp",
                                          "servers add a clock's updates in worker rank order"),
      Boolean<&Config::aggregate_per_machine>(
          "GEEPS_AGGREGATE_PER_MACHINE", "Config::aggregate_per_machine",
          "one relay per machine sums its workers' updates (every rank the same)"),
      Integer<&Config::workers_per_machine>(
          "GEEPS_WORKERS_PER_MACHINE", "Config::workers_per_machine", 0, kMaxWorkers,
          "EmbeddedCluster: consecutive ranks per machine (0: one machine)"),
      Choice(
          "GEEPS_DEVICE", "Config::device",
          {{"auto", [](Config* c) { c->device = DeviceKind::kAuto; }},
           {"host", [](Config* c) { c->device = DeviceKind::kHost; }},
           {"cuda", [](Config* c) { c->device = DeviceKind::kCuda; }}},
          [](const Config& c) {
            return c.device == DeviceKind::kAuto   ? "auto"
                   : c.device == DeviceKind::kHost ? "host"
                                                   : "cuda";
          },
          "the device backend (auto: CUDA where a GPU is present)"),
      Integer<&Config::device_ordinal>("GEEPS_DEVICE_ORDINAL", "Config::device_ordinal", -1,
                                       kMaxDevices - 1,
                                       "the device of this process's workers (-1: by local rank)"),
      Integer<&Config::host_devices>("GEEPS_HOST_DEVICES", "Config::host_devices", 1, kMaxDevices,
                                     "host backend: devices a process presents"),
      Integer<&Config::device_memory_budget>(
          "GEEPS_DEVICE_MEMORY_BUDGET", "Config::device_memory_budget", 0, 1ll << 62,
          "device memory per worker, bytes (0: no limit; docs/memory-manager.md)"),
      Choice(
          "GEEPS_MEMORY_GUARANTEE", "Config::memory_guarantee",
          {{"none", [](Config* c) { c->memory_guarantee = MemoryGuarantee::kNone; }},
           {"double", [](Config* c) { c->memory_guarantee = MemoryGuarantee::kDoubleBuffering; }},
           {"local", [](Config* c) { c->memory_guarantee = MemoryGuarantee::kAllLocalOnDevice; }},
           {"cache",
            [](Config* c) { c->memory_guarantee = MemoryGuarantee::kWholeCacheOnDevice; }}},
          [](const Config& c) {
            switch (c.memory_guarantee) {
              case MemoryGuarantee::kNone:
                return "none";
              case MemoryGuarantee::kDoubleBuffering:
                return "double";
              case MemoryGuarantee::kAllLocalOnDevice:
                return "local";
              case MemoryGuarantee::kWholeCacheOnDevice:
                break;
            }
            return "cache";
          },
          "what a memory budget must guarantee"),
      Integer<&Config::prefetch_depth>("GEEPS_PREFETCH_DEPTH", "Config::prefetch_depth", 0,
                                       kMaxPrefetchDepth,
                                       "local accesses swapped in ahead of the application"),
      Custom(
          "GEEPS_TIMEOUT_MS", "Config::timeout", 1, kDayMs,
          [](Config* c, long long v) { c->timeout = std::chrono::milliseconds(v); },
          [](const Config& c) { return static_cast<long long>(c.timeout.count()); },
          "longest wait for peers: start, Read, Sync, leaving"),
      Custom(
          "GEEPS_HEARTBEAT_TIMEOUT_MS", "Config::heartbeat_timeout", 10, kDayMs,
          [](Config* c, long long v) { c->heartbeat_timeout = std::chrono::milliseconds(v); },
          [](const Config& c) { return static_cast<long long>(c.heartbeat_timeout.count()); },
          "silence after which a process is lost"),
      Integer<&Config::max_message_bytes>("GEEPS_MAX_MESSAGE_BYTES", "Config::max_message_bytes",
                                          kMinMessageBytes, kMaxMessageBytes,
                                          "largest message; larger ones go in parts"),
      Integer<&Config::pipeline_part_bytes>(
          "GEEPS_PIPELINE_PART_BYTES", "Config::pipeline_part_bytes", 0, kMaxMessageBytes,
          "pipelined updates in parts of this many bytes (0: off; every rank the same)"),
      Integer<&Config::pack_below_bytes>(
          "GEEPS_PACK_BELOW_BYTES", "Config::pack_below_bytes", 0, kMaxPackBelowBytes,
          "messages smaller than this go as one frame (0: never; every rank the same)"),
      Integer<&Config::spin_wait_us>(
          "GEEPS_SPIN_WAIT_US", "Config::spin_wait_us", 0, kMaxSpinWaitUs,
          "a wait for pushes polls this long before it blocks, while waits are short (0: never)"),
      Boolean<&Config::push_in_read_order>(
          "GEEPS_PUSH_IN_READ_ORDER", "Config::push_in_read_order",
          "partitions push a clock's tables in the order the workers read them"),
      Boolean<&Config::adapt_push_order>(
          "GEEPS_ADAPT_PUSH_ORDER", "Config::adapt_push_order",
          "workers ask for that order while their reads wait long (0: never)"),
      Boolean<&Config::resend_after_connection_loss>(
          "GEEPS_RESEND_AFTER_CONNECTION_LOSS", "Config::resend_after_connection_loss",
          "survive a lost connection by sending again (every rank the same)"),
      Text<&Config::stats_file>("GEEPS_STATS_FILE", "Config::stats_file",
                                "Shutdown writes each worker's stats here (%r: its rank)"),
      Text<&Config::checkpoint_dir>("GEEPS_CHECKPOINT_DIR", "Config::checkpoint_dir",
                                    "where partitions write checkpoints (empty: none)"),
      Integer<&Config::checkpoint_every>("GEEPS_CHECKPOINT_EVERY", "Config::checkpoint_every", 0,
                                         kMaxCheckpointEvery,
                                         "checkpoint every this many clocks (0: only on request)"),
      Choice(
          "GEEPS_RESUME", "Config::resume",
          {{"off", [](Config* c) { c->resume = ResumeMode::kOff; }},
           {"required", [](Config* c) { c->resume = ResumeMode::kRequired; }},
           {"if-present", [](Config* c) { c->resume = ResumeMode::kIfPresent; }}},
          [](const Config& c) {
            return c.resume == ResumeMode::kOff        ? "off"
                   : c.resume == ResumeMode::kRequired ? "required"
                                                       : "if-present";
          },
          "start from the newest complete checkpoint"),
      Integer<&Config::emulated_copy_bandwidth>(
          "GEEPS_EMULATED_COPY_BANDWIDTH", "Config::emulated_copy_bandwidth", 0, 1ll << 50,
          "benchmarks, host backend: host-device copies at this many bytes/s (0: off)"),
      Custom(
          "GEEPS_EMULATED_COMPUTE_US", "Config::emulated_compute_per_access", 0, 10000000,
          [](Config* c, long long v) {
            c->emulated_compute_per_access = std::chrono::microseconds(v);
          },
          [](const Config& c) {
            return static_cast<long long>(c.emulated_compute_per_access.count());
          },
          "benchmarks: wait this many microseconds at each access, as if computing"),
  };
}

std::vector<Tunable> OtherRows() {
  const Scope p = Scope::kProcess;
  return {
      Elsewhere("GEEPS_RANK", p, "ProcessOptions::rank", "integer", "OpenMPI's, Slurm's, else 0",
                "this process's rank (takes precedence over OpenMPI's and Slurm's)"),
      Elsewhere("GEEPS_WORLD_SIZE", p, "ProcessOptions::world_size", "integer",
                "OpenMPI's, Slurm's, else 1", "number of processes of the job"),
      Elsewhere("GEEPS_LOCAL_RANK", p, "", "integer", "OpenMPI's, Slurm's, else 0",
                "this process's index on its machine (picks its device)"),
      Elsewhere("GEEPS_COORDINATOR", p, "", "host:port", "",
                "rank 0's rendezvous address ([::1]:port style accepted)"),
      Elsewhere("GEEPS_HOSTFILE", p, "", "path", "",
                "a host list whose first host is the coordinator"),
      Elsewhere("GEEPS_COORDINATOR_PORT", p, "", "0..65535", "29500",
                "the coordinator's port with GEEPS_HOSTFILE"),
      Elsewhere("GEEPS_ROLE", p, "ProcessOptions::role", "both|worker|server", "both",
                "what this process hosts"),
      Elsewhere("GEEPS_TRANSPORT", p, "ProcessOptions::transport", "tcp|ipc", "tcp",
                "the data plane's sockets (ipc: one machine only)"),
      Elsewhere("GEEPS_BIND_HOST", p, "ProcessOptions::bind_host", "host", "the route to rank 0",
                "the address shard sockets bind (*: every interface)"),
      Elsewhere("GEEPS_BASE_PORT", p, "ProcessOptions::base_port", "0..65535", "0",
                "shard ports from here (0: chosen by the system)"),
      Elsewhere("GEEPS_IPC_DIR", p, "ProcessOptions::ipc_dir", "path", "/tmp",
                "where ipc:// socket files go"),
      Elsewhere("GEEPS_CURVE_KEYS", p, "ProcessOptions::curve_key_file", "path", "",
                "CURVE job key file: authenticate and encrypt every socket (docs/security.md)"),
      Elsewhere("GEEPS_MACHINE", p, "ProcessOptions::machine", "name", "the host name",
                "this process's machine, for machine-level aggregation"),
      Elsewhere("GEEPS_LOG_LEVEL", Scope::kDiagnostics, "", "error|warning|info|debug", "warning",
                "what is logged to stderr"),
      Elsewhere("GEEPS_DEVICE_TRACE", Scope::kDiagnostics, "", "path", "",
                "each device created appends \"<pid> <name>\" here (the GPU check)"),
      Elsewhere("GEEPS_ASYNC_HOST_STREAMS", Scope::kTestMode, "Config::async_host_streams", "0|1",
                "0", "host streams run each operation late on a thread of its own"),
      Elsewhere("GEEPS_HOST_OPAQUE_POINTERS", Scope::kTestMode,
                "Config::host_opaque_device_pointers", "0|1", "0",
                "host device memory the host cannot dereference, as on a GPU"),
      Elsewhere("GEEPS_CHECKED", Scope::kTestMode, "Config::checked", "0|1", "0",
                "the checked mode: misuse of the buffers libgeeps hands out named at its call"),
      Elsewhere("GEEPS_HOST_NO_ALIAS", Scope::kTestMode, "", "0|1", "0",
                "host device memory never aliases host memory (every push copied)"),
      Elsewhere("GEEPS_HOST_AS_CUDA", Scope::kTestMode, "", "0|1", "0",
                "DeviceKind::kAuto without a GPU is a host device that behaves like CUDA"),
  };
}

const char* ScopeName(Scope s) {
  switch (s) {
    case Scope::kConfig:
      return "Config (ApplyEnvironment)";
    case Scope::kProcess:
      return "Process::Join";
    case Scope::kDiagnostics:
      return "diagnostics (every process)";
    case Scope::kTestMode:
      break;
  }
  return "test modes (every worker)";
}

}  // namespace

const std::vector<Tunable>& All() {
  static const std::vector<Tunable>* const kAll = [] {
    auto* all = new std::vector<Tunable>(ConfigRows());
    for (Tunable& t : OtherRows()) all->push_back(std::move(t));
    return all;
  }();
  return *kAll;
}

const Tunable* Find(std::string_view variable) {
  for (const Tunable& t : All())
    if (variable == t.variable) return &t;
  return nullptr;
}

std::string Values(const Tunable& t) {
  if (t.kind == Kind::kInteger) {
    if (t.lo == 0 && t.hi == 1) return "0|1";
    return std::to_string(t.lo) + ".." + std::to_string(t.hi);
  }
  if (t.kind == Kind::kChoice) {
    std::string words;
    for (const Word& w : t.words) words += (words.empty() ? "" : "|") + std::string(w.word);
    return words;
  }
  return t.values;
}

std::string Default(const Tunable& t) {
  const Config defaults;
  if (t.get_integer != nullptr) return std::to_string(t.get_integer(defaults));
  if (t.get_word != nullptr) return t.get_word(defaults);
  if (t.scope == Scope::kConfig) return "";  // text fields: empty by default
  return t.fixed_default;
}

std::string HelpText() {
  std::string out =
      "GEEPS_* environment variables (docs/operations.md). Config's are read where the\n"
      "application calls geeps::ApplyEnvironment; the others by libgeeps itself.\n";
  for (Scope scope : {Scope::kConfig, Scope::kProcess, Scope::kDiagnostics, Scope::kTestMode}) {
    out += "\n" + std::string(ScopeName(scope)) + ":\n";
    for (const Tunable& t : All()) {
      if (t.scope != scope) continue;
      const std::string def = Default(t);
      char line[512];
      std::snprintf(line, sizeof(line), "  %-36s %s%s%s\n      %s\n", t.variable, Values(t).c_str(),
                    def.empty() ? "" : ", default ", def.empty() ? "" : def.c_str(), t.doc);
      out += line;
    }
  }
  return out;
}

std::string MarkdownCell(std::string_view text) {
  std::string out;
  for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

std::string MarkdownTable() {
  std::string out = "| variable | read by | values | default | what it sets |\n";
  out += "| --- | --- | --- | --- | --- |\n";
  for (const Tunable& t : All()) {
    const std::string def = Default(t);
    const std::string values = MarkdownCell(Values(t));
    std::string what = t.doc;
    if (t.field[0] != '\0') what += std::string(" (`") + t.field + "`)";
    out += std::string("| `") + t.variable + "` | " + ScopeName(t.scope) + " | `" + values +
           "` | " + (def.empty() ? "" : "`" + def + "`") + " | " + what + " |\n";
  }
  return out;
}

}  // namespace geeps::tunables
