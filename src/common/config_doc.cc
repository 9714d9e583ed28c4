// docs/api.md's table of the Config fields a GEEPS_* variable sets: the
// rows of tunables.cc, each with the longer meaning the guide gives it here
// (tests/tunables_test.cc checks that the guide holds this table and that
// every Config row has a meaning; scripts/update-env-doc.sh writes it).
#include "common/config_doc.h"

#include <string>
#include <string_view>

#include "common/tunables.h"

namespace geeps::tunables {

namespace {

struct Meaning {
  const char* field;  // "Config::num_workers", as in the tunables' rows
  const char* text;   // one table cell of markdown
};

// In no particular order: the table follows the tunables' rows.
constexpr Meaning kMeanings[] = {
    {"Config::num_workers", "workers"},
    {"Config::num_shards", "server shards"},
    {"Config::num_channels", "channels per shard and worker"},
    {"Config::default_slack", "slack of `VirtualRead` without one"},
    {"Config::read_my_writes", "own updates visible at once"},
    {"Config::send_updates_in_place",
     "host backend: a direct update (`WorkerStats::updates_direct`) is sent from the update "
     "buffer itself, one pass fewer than the copy into its send slot; not isolated: a write into "
     "the buffer after `Update` may reach the servers and every worker. Off: copied at `Update`, "
     "as on CUDA (docs/api.md, \"Writing through the pointers libgeeps returns\")"},
    {"Config::deterministic_bsp",
     "servers add each clock's updates in worker rank order: bitwise reproducible runs whatever "
     "the channel count or timing"},
    {"Config::aggregate_per_machine",
     "machine-level aggregation: a machine's workers add their updates of each clock (in rank "
     "order) and one relay per machine sends the sum and shares each push; reads see the same "
     "values (BSP exact, SSP bound per worker). A multi-process job's machines are its worker "
     "processes with the same `ProcessOptions::machine` (`GEEPS_MACHINE`, default the host name); "
     "an embedded cluster's, `workers_per_machine` consecutive ranks (docs/operations.md, "
     "\"Several GPUs per machine\")"},
    {"Config::workers_per_machine",
     "0: all ranks one machine; with `aggregate_per_machine`, in an `EmbeddedCluster`: machines of "
     "this many consecutive ranks (0..num_workers); set without aggregation, or in a multi-process "
     "job, `kInvalidArgument`"},
    {"Config::device",
     "device backend: auto = CUDA when the backend is built and a GPU is present, else host; cuda "
     "without a GPU makes `EmbeddedCluster::Start` fail with `kUnavailable` and the reason "
     "(docs/cuda.md)"},
    {"Config::device_ordinal",
     "-1: automatic; the device of every worker of the process; automatic: worker w of a process "
     "gets `(local_rank * workers_in_process + w) mod device_count`, local_rank from "
     "`OMPI_COMM_WORLD_LOCAL_RANK`, `SLURM_LOCALID` or `GEEPS_LOCAL_RANK` (0 for an "
     "`EmbeddedCluster`; a `Process` has one worker); an ordinal >= the device count makes "
     "`EmbeddedCluster::Start` / `Process::Join` fail with `kInvalidArgument` naming both numbers, "
     "before anything is allocated. The worker logs its device at `FinishVirtualIteration`; "
     "`WorkerStats::device` names it"},
    {"Config::host_devices",
     "host backend: devices a process presents (\"host:1 of 4\"), each with its own memory; an "
     "operation of one on another's buffer or stream is `kInternal` naming both (tests device "
     "selection without GPUs)"},
    {"Config::device_memory_budget",
     "bytes, 0: no budget; device memory per worker; with one, the memory manager keeps local "
     "tables, then cached parameter rows, in pinned host memory when they do not fit "
     "(docs/memory-manager.md)"},
    {"Config::memory_guarantee",
     "what a budget must still give: pool of 1x or 2x the peak, all local data on the device, the "
     "whole cache on the device"},
    {"Config::prefetch_depth",
     "with a budget: how many local accesses to data in host memory the memory manager swaps in "
     "ahead of the application (0: each is copied at the access itself; prefetching needs a plan "
     "with double buffering: docs/memory-manager.md)"},
    {"Config::timeout", "milliseconds; longest wait for a peer"},
    {"Config::heartbeat_timeout",
     "milliseconds; multi-process: silence after which a process is lost"},
    {"Config::max_message_bytes",
     "default 1 GiB; larger messages travel in parts (64 B .. 2 GiB - 4 KiB; every rank must "
     "agree: `Process::Join` refuses a rank that differs)"},
    {"Config::pipeline_part_bytes",
     "0: off; pipelined updates: each update to a partition leaves in parts of this many bytes, in "
     "row order, and a shard pushes the rows every worker has updated before the last part arrives "
     "(64 B .. 2 GiB - 4 KiB; every rank must agree: `Process::Join` refuses a rank that differs; "
     "docs/architecture.md, \"Pipelined pushes\")"},
    {"Config::pack_below_bytes",
     "default 16 KiB; a message (or part) smaller than this travels as one frame holding its "
     "header, rows and values, copied there (fewer frames cost ZeroMQ less per message; "
     "docs/performance.md, \"4 KiB\"); larger ones go as separate frames, values sent without a "
     "copy where they can be (0 = never; at most 1 MiB; every rank must agree: `Process::Join` "
     "refuses a rank that differs)"},
    {"Config::spin_wait_us",
     "a Read or Sync that waits for pushes first polls for them without blocking (yielding its "
     "core between polls) for up to this many microseconds, while the worker's recent waits "
     "averaged within that; then it blocks. Saves the wake-up of a blocked thread (tens of "
     "microseconds on a virtual machine: a 4 KiB round trip goes from 0.89 to about 1.4 of a "
     "blocking ZeroMQ pair); waits longer than that stop spinning after a few. 0 = never spin; at "
     "most 100000; each worker may choose its own. `WorkerStats::waits_spun` and "
     "`waits_ended_spinning` show what it did (docs/architecture.md, \"Threads of the data "
     "path\")"},
    {"Config::push_in_read_order",
     "always ask for pushes in the order of need: a partition holds a clock's push of a table "
     "until the tables the workers read before it have been pushed (helps where the network or CPU "
     "is the limit during the backward pass, hurts where compute hides the pushes; "
     "docs/architecture.md, \"Pushes in the order of need\"; docs/performance.md, \"16 "
     "machines\")"},
    {"Config::adapt_push_order",
     "unless `push_in_read_order`: each worker asks for the order of need while its reads wait for "
     "much of its iterations (over 30% of the last three turns it on, under 20% off), so you need "
     "not choose; false: pushes always go as their clocks complete. `WorkerStats::asks_read_order` "
     "and `push_order_switches` show what it did"},
    {"Config::resend_after_connection_loss",
     "multi-process jobs: a worker-to-partition connection that is lost and comes back loses "
     "nothing (updates kept until a push acknowledges them and sent again, the last push sent "
     "again); off, such a job times out naming the lost connection (every rank must agree; "
     "docs/architecture.md, \"Connection loss and resend\")"},
    {"Config::stats_file",
     "empty: none; `%r` is the rank; Shutdown writes `WorkerStats::ToJson()` (with the memory "
     "plan) there; a file that cannot be written makes that worker's `Shutdown()` return "
     "`kUnavailable` naming the path, and `EmbeddedCluster::Shutdown()` its first such error (its "
     "destructor drops it, and `RunWorkers`, which shuts no worker down, returns OK)"},
    {"Config::checkpoint_dir", "empty: off; folder of the checkpoint files (created if missing)"},
    {"Config::checkpoint_every",
     "clocks, 0: on request only; every server partition writes a checkpoint when its minimum "
     "clock is a multiple of this; needs `checkpoint_dir` (every rank must agree: `Process::Join` "
     "refuses a rank that differs)"},
    {"Config::resume",
     "start from the newest complete checkpoint in `checkpoint_dir`; `required`: none is an error"},
    {"Config::emulated_copy_bandwidth",
     "bytes/s, 0: off; host backend: host<->device copies as slow as over PCIe (benchmarks)"},
    {"Config::emulated_compute_per_access",
     "microseconds, 0: off; emulation for benchmarks: the application thread waits this long at "
     "every PostRead, Update and PostLocalAccess, as if it had computed on the buffer"},
};

}  // namespace

const char* ConfigMeaning(std::string_view field) {
  for (const Meaning& m : kMeanings)
    if (field == m.field) return m.text;
  return nullptr;
}

std::string ConfigMarkdownTable() {
  std::string out = "| field | variable | values | default | meaning |\n";
  out += "| --- | --- | --- | --- | --- |\n";
  for (const Tunable& t : All()) {
    if (t.scope != Scope::kConfig) continue;
    const std::string_view field(t.field);
    const char* meaning = ConfigMeaning(field);
    const std::string def = Default(t);
    out += "| `" + std::string(field.substr(field.find("::") + 2)) + "` | `" + t.variable +
           "` | `" + MarkdownCell(Values(t)) + "` | " + (def.empty() ? "" : "`" + def + "`") +
           " | " + (meaning != nullptr ? meaning : t.doc) + " |\n";
  }
  return out;
}

}  // namespace geeps::tunables
