// Fuzz target: the bootstrap of a multi-process job (src/cluster/bootstrap.h):
// DetectProcessEnv and CoordinatorAddress with a fake getenv, ParseHostPort /
// FormatHostPort, and ReadHostList on a host list file written from the input.
//
// Input layout: lines split on '\n'; line i is the value of kVariables[i]
// (a value ends at its first NUL byte). A line that is the single byte 0xFF,
// or a line past the end of the input, leaves the variable unset. When
// GEEPS_HOSTFILE (the last variable) is set, its value is replaced by the
// path of a scratch file holding the rest of the input after its line
// (or by a path that does not exist, when the value is "missing").
//
// Properties checked (beyond "never crashes"): a detected rank, world size
// and local rank are in range; ParseHostPort and FormatHostPort are inverses;
// CoordinatorAddress agrees with ParseHostPort / ReadHostList.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cluster/bootstrap.h"
#include "fuzz_util.h"

#ifndef GEEPS_FUZZ_ENTRY
#define GEEPS_FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

namespace geeps::fuzz::process_env {

constexpr const char* kVariables[] = {
    "GEEPS_RANK",           "GEEPS_WORLD_SIZE",       "GEEPS_LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",   "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_PROCID",         "SLURM_NTASKS",           "SLURM_LOCALID",
    "GEEPS_COORDINATOR",    "GEEPS_COORDINATOR_PORT", "GEEPS_HOSTFILE",
};
constexpr size_t kNumVariables = sizeof(kVariables) / sizeof(kVariables[0]);

// The scratch host list of this process (one file, rewritten per input).
const std::string& HostFilePath() {
  static const std::string kPath = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string templ =
        std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/geeps-fuzz-hosts-XXXXXX";
    const int fd = mkstemp(templ.data());
    if (fd < 0) std::abort();
    close(fd);
    static const std::string kToRemove = templ;
    std::atexit([] { unlink(kToRemove.c_str()); });
    return templ;
  }();
  return kPath;
}

void CheckHostPort(const std::string& text) {
  StatusOr<cluster::HostPort> hp = cluster::ParseHostPort(text);
  if (!hp.ok()) {
    GEEPS_FUZZ_CHECK(hp.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  GEEPS_FUZZ_CHECK(!hp->host.empty() && hp->port >= 1 && hp->port <= 65535);
  const std::string formatted = cluster::FormatHostPort(*hp);
  StatusOr<cluster::HostPort> again = cluster::ParseHostPort(formatted);
  GEEPS_FUZZ_CHECK(again.ok());
  GEEPS_FUZZ_CHECK(again->host == hp->host && again->port == hp->port);
}

int Run(const uint8_t* data, size_t size) {
  const std::vector<Line> lines = SplitLines(data, size);
  std::map<std::string, std::string> env;
  for (size_t i = 0; i < kNumVariables && i < lines.size(); ++i) {
    if (lines[i].set) env[kVariables[i]] = lines[i].value;
  }
  auto hostfile = env.find("GEEPS_HOSTFILE");
  if (hostfile != env.end()) {
    if (hostfile->second == "missing") {
      hostfile->second = "/nonexistent/geeps-fuzz-hosts";
    } else {
      // The rest of the input after the GEEPS_HOSTFILE line.
      size_t at = 0;
      for (size_t newlines = 0; at < size && newlines < kNumVariables; ++at) {
        if (data[at] == '\n') ++newlines;
      }
      FILE* f = std::fopen(HostFilePath().c_str(), "wb");
      if (f == nullptr) std::abort();
      if (at < size) std::fwrite(data + at, 1, size - at, f);
      std::fclose(f);
      hostfile->second = HostFilePath();
    }
  }
  const cluster::GetenvFn fake = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };

  StatusOr<cluster::ProcessEnv> pe = cluster::DetectProcessEnv(fake);
  if (pe.ok()) {
    GEEPS_FUZZ_CHECK(pe->world_size >= 1);
    GEEPS_FUZZ_CHECK(pe->rank >= 0 && pe->rank < pe->world_size);
    GEEPS_FUZZ_CHECK(pe->local_rank >= 0 && pe->local_rank < pe->world_size);
    GEEPS_FUZZ_CHECK(pe->source == "geeps" || pe->source == "openmpi" || pe->source == "slurm");
  } else {
    const bool any = env.count("GEEPS_RANK") || env.count("GEEPS_WORLD_SIZE") ||
                     env.count("GEEPS_LOCAL_RANK") || env.count("OMPI_COMM_WORLD_RANK") ||
                     env.count("SLURM_PROCID");
    GEEPS_FUZZ_CHECK(pe.status().code() ==
                     (any ? StatusCode::kInvalidArgument : StatusCode::kNotFound));
  }

  for (size_t i = 0; i < lines.size() && i <= kNumVariables; ++i) CheckHostPort(lines[i].value);

  StatusOr<cluster::HostPort> coordinator = cluster::CoordinatorAddress(fake);
  if (coordinator.ok()) {
    GEEPS_FUZZ_CHECK(!coordinator->host.empty());
    GEEPS_FUZZ_CHECK(coordinator->port >= 1 && coordinator->port <= 65535);
  }
  if (env.count("GEEPS_COORDINATOR")) {
    StatusOr<cluster::HostPort> direct = cluster::ParseHostPort(env["GEEPS_COORDINATOR"]);
    GEEPS_FUZZ_CHECK(direct.ok() == coordinator.ok());
    if (direct.ok()) {
      GEEPS_FUZZ_CHECK(direct->host == coordinator->host && direct->port == coordinator->port);
    }
  } else if (hostfile != env.end()) {
    StatusOr<std::vector<std::string>> hosts = cluster::ReadHostList(hostfile->second);
    if (hosts.ok()) {
      GEEPS_FUZZ_CHECK(!hosts->empty());
      for (const std::string& h : *hosts) GEEPS_FUZZ_CHECK(!h.empty());
      if (coordinator.ok()) GEEPS_FUZZ_CHECK(coordinator->host == hosts->front());
    } else {
      GEEPS_FUZZ_CHECK(!coordinator.ok());
    }
  } else {
    GEEPS_FUZZ_CHECK(!coordinator.ok() && coordinator.status().code() == StatusCode::kNotFound);
  }
  return 0;
}

}  // namespace geeps::fuzz::process_env

extern "C" int GEEPS_FUZZ_ENTRY(const uint8_t* data, size_t size) {
  return geeps::fuzz::process_env::Run(data, size);
}
