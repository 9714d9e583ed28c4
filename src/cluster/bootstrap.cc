#include "cluster/bootstrap.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "common/file_util.h"

namespace geeps::cluster {
namespace {

// A host list longer than this is not one (a line per host).
constexpr uint64_t kMaxHostListBytes = 1 << 20;

// The variables of one launcher's style.
struct EnvStyle {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  bool local_rank_required;
  bool chosen_by_any;  // chosen when any of its variables is set, not only the rank
};

constexpr EnvStyle kStyles[] = {
    {"geeps", "GEEPS_RANK", "GEEPS_WORLD_SIZE", "GEEPS_LOCAL_RANK", false, true},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", true,
     false},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", true, false},
};

// A whole decimal integer (optional leading '-'), or nullopt.
std::optional<long long> ParseInteger(const std::string& text) {
  if (text.empty()) return std::nullopt;
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// Reads `name` as an integer in [min, max].
StatusOr<int> IntVariable(const GetenvFn& getenv_fn, const char* name, long long min, long long max,
                          const char* present) {
  const char* raw = getenv_fn(name);
  if (raw == nullptr) {
    return InvalidArgumentError(std::string(name) + " is not set, but " + present + " is");
  }
  const std::optional<long long> value = ParseInteger(raw);
  if (!value) {
    return InvalidArgumentError(std::string(name) + "='" + raw + "' is not a decimal integer");
  }
  if (*value < min || *value > max) {
    return InvalidArgumentError(std::string(name) + "=" + raw + " is out of range [" +
                                std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<int>(*value);
}

StatusOr<ProcessEnv> ReadStyle(const GetenvFn& getenv_fn, const EnvStyle& style) {
  const char* present = style.rank;
  for (const char* name : {style.rank, style.world_size, style.local_rank}) {
    if (getenv_fn(name) != nullptr) {
      present = name;
      break;
    }
  }
  ProcessEnv env;
  env.source = style.source;
  constexpr long long kMaxWorldSize = std::numeric_limits<int>::max();
  GEEPS_ASSIGN_OR_RETURN(env.world_size,
                         IntVariable(getenv_fn, style.world_size, 1, kMaxWorldSize, present));
  GEEPS_ASSIGN_OR_RETURN(env.rank,
                         IntVariable(getenv_fn, style.rank, 0, env.world_size - 1, present));
  if (style.local_rank_required || getenv_fn(style.local_rank) != nullptr) {
    GEEPS_ASSIGN_OR_RETURN(
        env.local_rank, IntVariable(getenv_fn, style.local_rank, 0, env.world_size - 1, present));
  } else {
    env.local_rank = env.rank;
  }
  return env;
}

bool IsHostNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

// Letters, digits, '.', '-', '_'; not empty.
bool IsHostName(const std::string& host) {
  if (host.empty()) return false;
  for (char c : host) {
    if (!IsHostNameChar(c)) return false;
  }
  return true;
}

// Hex digits, ':' and '.' (an embedded IPv4 tail), at least two ':', and an
// optional zone ("%eth0"). Loose on purpose: the resolver has the last word.
bool IsIpv6Address(const std::string& host) {
  const size_t percent = host.find('%');
  const std::string address = host.substr(0, percent);
  if (percent != std::string::npos) {
    const std::string zone = host.substr(percent + 1);
    if (!IsHostName(zone)) return false;
  }
  int colons = 0;
  for (char c : address) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (c == ':') {
      ++colons;
    } else if (!hex && c != '.') {
      return false;
    }
  }
  return colons >= 2;
}

StatusOr<int> ParsePort(const std::string& text, const std::string& context) {
  bool digits = !text.empty();
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  const std::optional<long long> value = digits ? ParseInteger(text) : std::nullopt;
  if (!value || *value < 1 || *value > 65535) {
    return InvalidArgumentError(context + ": port '" + text + "' is not in 1..65535");
  }
  return static_cast<int>(*value);
}

std::string Trim(const std::string& s) {
  constexpr const char* kSpace = " \t\r\n\f\v";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

}  // namespace

StatusOr<ProcessEnv> DetectProcessEnv(const GetenvFn& getenv_fn) {
  for (const EnvStyle& style : kStyles) {
    const bool chosen = getenv_fn(style.rank) != nullptr ||
                        (style.chosen_by_any && (getenv_fn(style.world_size) != nullptr ||
                                                 getenv_fn(style.local_rank) != nullptr));
    if (chosen) return ReadStyle(getenv_fn, style);
  }
  std::string names;
  for (const EnvStyle& style : kStyles) {
    names += std::string(names.empty() ? "" : "; ") + style.rank + "/" + style.world_size + "/" +
             style.local_rank + " (" + style.source + ")";
  }
  return NotFoundError("no rank in the environment: none of " + names +
                       " is set; start the processes with geeps_launch, mpirun or srun");
}

StatusOr<HostPort> ParseHostPort(const std::string& text) {
  const std::string context = "'" + text + "'";
  HostPort result;
  std::string rest;  // ":port"
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) {
      return InvalidArgumentError(context + ": '[' without ']' (expected [v6-address]:port)");
    }
    result.host = text.substr(1, close - 1);
    if (!IsIpv6Address(result.host)) {
      return InvalidArgumentError(context + ": '" + result.host + "' is not an IPv6 address");
    }
    rest = text.substr(close + 1);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgumentError(context + ": no port (expected host:port)");
    }
    result.host = text.substr(0, colon);
    rest = text.substr(colon);
    if (result.host.empty()) return InvalidArgumentError(context + ": empty host");
    if (IsIpv6Address(result.host)) {
      return InvalidArgumentError(context + ": an IPv6 address needs brackets: [address]:port");
    }
    if (!IsHostName(result.host)) {
      return InvalidArgumentError(context + ": host '" + result.host +
                                  "' may hold only letters, digits, '.', '-' and '_'");
    }
  }
  if (rest.empty() || rest[0] != ':') {
    return InvalidArgumentError(context + ": no port (expected host:port)");
  }
  GEEPS_ASSIGN_OR_RETURN(result.port, ParsePort(rest.substr(1), context));
  return result;
}

std::string FormatHostPort(const HostPort& host_port) {
  const bool v6 = host_port.host.find(':') != std::string::npos;
  return (v6 ? "[" + host_port.host + "]" : host_port.host) + ":" + std::to_string(host_port.port);
}

StatusOr<std::vector<std::string>> ReadHostList(const std::string& path) {
  // Opened without blocking and checked first: a FIFO or a device is an
  // error naming the file, not a hang or gigabytes of reading.
  StatusOr<std::string> text =
      common::ReadRegularFile(path, "host list '" + path + "'", kMaxHostListBytes);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return text.status();
    return InvalidArgumentError(text.status().message());
  }
  std::istringstream in(*text);
  std::vector<std::string> hosts;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    const std::string where = path + ":" + std::to_string(line_number) + ": ";
    std::istringstream tokens(Trim(line.substr(0, line.find('#'))));
    std::string host;
    if (!(tokens >> host)) continue;  // blank or comment only
    if (!IsHostName(host) && !IsIpv6Address(host)) {
      return InvalidArgumentError(where + "'" + host + "' is not a host name or address" +
                                  (host.find(':') != std::string::npos ? " (no port here)" : ""));
    }
    long long slots = 1;
    std::string option;
    while (tokens >> option) {
      const size_t equals = option.find('=');
      const std::string key = option.substr(0, equals);
      const std::optional<long long> value =
          equals == std::string::npos ? std::nullopt : ParseInteger(option.substr(equals + 1));
      if (key != "slots" && key != "max_slots") {
        return InvalidArgumentError(where + "unknown '" + option + "' (expected slots=N)");
      }
      if (!value || *value < 1 || *value > kMaxSlotsPerHost) {
        return InvalidArgumentError(where + "'" + option + "': " + key + " must be in 1.." +
                                    std::to_string(kMaxSlotsPerHost));
      }
      if (key == "slots") slots = *value;
    }
    hosts.insert(hosts.end(), static_cast<size_t>(slots), host);
  }
  if (in.bad() || (in.fail() && !in.eof())) {
    return InvalidArgumentError("host list '" + path + "': cannot read: " + std::strerror(errno));
  }
  if (hosts.empty()) return InvalidArgumentError("host list '" + path + "' names no host");
  return hosts;
}

StatusOr<HostPort> CoordinatorAddress(const GetenvFn& getenv_fn) {
  if (const char* coordinator = getenv_fn("GEEPS_COORDINATOR")) {
    StatusOr<HostPort> parsed = ParseHostPort(coordinator);
    if (!parsed.ok()) {
      return InvalidArgumentError("GEEPS_COORDINATOR=" + parsed.status().message());
    }
    return parsed;
  }
  const char* hostfile = getenv_fn("GEEPS_HOSTFILE");
  if (hostfile == nullptr) {
    return NotFoundError(
        "no coordinator address: set GEEPS_COORDINATOR=host:port, or GEEPS_HOSTFILE=path "
        "(its first host; port GEEPS_COORDINATOR_PORT, default " +
        std::to_string(kDefaultCoordinatorPort) + ")");
  }
  StatusOr<std::vector<std::string>> hosts = ReadHostList(hostfile);
  if (!hosts.ok()) {
    return Status(hosts.status().code(), "GEEPS_HOSTFILE: " + hosts.status().message());
  }
  HostPort result{hosts->front(), kDefaultCoordinatorPort};
  if (const char* port = getenv_fn("GEEPS_COORDINATOR_PORT")) {
    GEEPS_ASSIGN_OR_RETURN(result.port, ParsePort(port, "GEEPS_COORDINATOR_PORT"));
  }
  return result;
}

}  // namespace geeps::cluster
