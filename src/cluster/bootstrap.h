// Bootstrap of a multi-process cluster: which rank this process is, how many
// there are, and where the coordinator (the rendezvous point) listens. Read
// from the environment that a launcher set: geeps_launch (GEEPS_*), OpenMPI's
// mpirun (OMPI_COMM_WORLD_*) or Slurm's srun (SLURM_*). Nothing here keeps
// state; the environment is read through an injectable function so that tests
// pass a fake one.
#ifndef GEEPS_CLUSTER_BOOTSTRAP_H_
#define GEEPS_CLUSTER_BOOTSTRAP_H_

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "geeps/status.h"

namespace geeps::cluster {

// Reads one environment variable; nullptr when it is not set.
using GetenvFn = std::function<const char*(const char*)>;

// The port of the coordinator when only a host list names its host.
inline constexpr int kDefaultCoordinatorPort = 29500;
// A host list line may repeat its host at most this many times (slots=N).
inline constexpr int kMaxSlotsPerHost = 4096;

// This process's place in the job.
struct ProcessEnv {
  int rank = 0;        // 0 <= rank < world_size
  int world_size = 1;  // >= 1
  int local_rank = 0;  // index among the processes of this machine (e.g. its GPU)
  std::string source;  // which variables it came from: "geeps", "openmpi", "slurm"
};

// Finds the rank, the world size and the local rank, trying in this order:
//   "geeps"   GEEPS_RANK, GEEPS_WORLD_SIZE, GEEPS_LOCAL_RANK (default: the rank)
//   "openmpi" OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   "slurm"   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// A style is chosen when its rank variable is set (for "geeps", also when
// GEEPS_WORLD_SIZE or GEEPS_LOCAL_RANK is: they are only ever set on purpose),
// and then its other variables must be right; a later style is never used to
// paper over a broken earlier one. For "openmpi" and "slurm" the local rank is
// required: every mpirun and srun sets it, and guessing it would silently put
// two processes on one GPU.
// Errors: kNotFound when no style's variables are set (the message lists
// them); kInvalidArgument naming the variable when one is missing, empty, not
// a decimal integer, or out of range (world size < 1, rank or local rank
// outside [0, world size)).
StatusOr<ProcessEnv> DetectProcessEnv(const GetenvFn& getenv_fn = std::getenv);

struct HostPort {
  std::string host;  // a host name, an IPv4 address or an IPv6 address (no brackets)
  int port = 0;      // 1..65535
};

// Parses "host:port", "1.2.3.4:port" or "[v6-address]:port" (e.g. "[::1]:29500";
// the brackets are dropped from `host`). Host names hold letters, digits, '.',
// '-' and '_'; an IPv6 address must be bracketed. Errors: kInvalidArgument
// saying what is wrong (no port, empty host, bad characters, port not in
// 1..65535).
StatusOr<HostPort> ParseHostPort(const std::string& text);

// The inverse of ParseHostPort: "host:port", or "[host]:port" when the host is
// an IPv6 address. Suits ZeroMQ's "tcp://" endpoints after the prefix.
std::string FormatHostPort(const HostPort& host_port);

// Reads a host list file: one host per line, in the order of the ranks. A line
// may add "slots=N" (as in an OpenMPI hostfile; 1 <= N <= kMaxSlotsPerHost),
// which repeats the host N times, and "max_slots=M", which is accepted and
// ignored. '#' starts a comment; blank lines are skipped. A host is a name, an
// IPv4 address or an unbracketed IPv6 address, without a port.
// Errors: kNotFound when the file does not exist; kInvalidArgument when it
// cannot be read, names no host, or has a malformed line ("path:LINE: ...").
StatusOr<std::vector<std::string>> ReadHostList(const std::string& path);

// Where the coordinator listens:
//   GEEPS_COORDINATOR=host:port when set (see ParseHostPort); otherwise
//   the first host of the list in GEEPS_HOSTFILE (see ReadHostList) with the
//   port GEEPS_COORDINATOR_PORT (default kDefaultCoordinatorPort).
// GEEPS_COORDINATOR_PORT is ignored when GEEPS_COORDINATOR is set.
// Errors: kNotFound when neither GEEPS_COORDINATOR nor GEEPS_HOSTFILE is set;
// the errors of ParseHostPort / ReadHostList, prefixed with the variable's
// name; kInvalidArgument when GEEPS_COORDINATOR_PORT is not in 1..65535.
StatusOr<HostPort> CoordinatorAddress(const GetenvFn& getenv_fn = std::getenv);

}  // namespace geeps::cluster

#endif  // GEEPS_CLUSTER_BOOTSTRAP_H_
