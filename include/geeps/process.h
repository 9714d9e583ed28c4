// One process of a multi-process job: the same workers and shards as the
// embedded cluster, over tcp:// (or ipc:// on one machine) between processes
// started by mpirun, srun or geeps_launch.
//
//   geeps::Config config;                     // tables etc., as for a cluster
//   auto process = geeps::Process::Join(config, geeps::ProcessOptions());
//   GeePS* ps = (*process)->worker();         // null on a server-only process
//   ... the same calls as with an embedded cluster ...
//   (*process)->Shutdown();
//
// Rank and world size come from the launcher's environment (OpenMPI:
// OMPI_COMM_WORLD_*, Slurm: SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, or
// GEEPS_RANK/GEEPS_WORLD_SIZE), the coordinator (rank 0's rendezvous
// address) from GEEPS_COORDINATOR=host:port or GEEPS_HOSTFILE. See
// docs/operations.md.
#ifndef GEEPS_PROCESS_H_
#define GEEPS_PROCESS_H_

#include <memory>
#include <string>

#include "geeps/config.h"
#include "geeps/export.h"
#include "geeps/geeps.h"
#include "geeps/stats.h"
#include "geeps/status.h"

namespace geeps {

enum class ProcessRole {
  kWorkerAndServer,  // a worker and a server shard (the default)
  kWorker,           // a worker only
  kServer,           // a server shard only
};

enum class Transport {
  kTcp,  // tcp://: processes on any machines
  kIpc,  // ipc://: Unix sockets, every process on one machine
};

struct ProcessOptions {
  ProcessRole role = ProcessRole::kWorkerAndServer;
  Transport transport = Transport::kTcp;
  // Address the shard sockets bind to and other processes connect to. Empty:
  // 127.0.0.1 when the coordinator is on loopback, else the local address
  // that routes to the coordinator. Nothing binds to all interfaces unless
  // this says "*".
  std::string bind_host;
  // First port of the shard sockets (channel k of the process with local
  // rank l binds base_port + l * num_channels + k); 0 = ports the system picks.
  int base_port = 0;
  // Folder of the ipc:// socket files (each process removes its own at
  // Shutdown).
  std::string ipc_dir = "/tmp";
  // -1: from the environment. Set both to run without a launcher.
  int rank = -1;
  int world_size = -1;
  // host:port of rank 0's rendezvous; empty: from the environment.
  std::string coordinator;
  // CURVE key file (written by geeps_keygen; mode 0600) shared by every
  // process of the job: with it, every tcp:// and ipc:// socket of the job is
  // authenticated and encrypted, and only holders of the key can connect
  // (docs/security.md). Empty: GEEPS_CURVE_KEYS if set, else CURVE is off.
  std::string curve_key_file;
  // The machine this process runs on, for Config::aggregate_per_machine:
  // the worker processes with the same name share one relay, in the one
  // with the lowest worker rank. Empty: GEEPS_MACHINE if set, else the host
  // name. 1 to 255 of [A-Za-z0-9._:-], not "-" (e.g. one name per network namespace
  // when several "machines" share a host).
  std::string machine;
};

// Overrides options from GEEPS_ROLE (both|worker|server), GEEPS_TRANSPORT
// (tcp|ipc), GEEPS_BIND_HOST, GEEPS_BASE_PORT, GEEPS_IPC_DIR,
// GEEPS_CURVE_KEYS. A malformed value is kInvalidArgument naming the
// variable. Not applied by Process::Join (which reads only GEEPS_CURVE_KEYS
// when curve_key_file is empty, and the launcher's rank variables): call it
// on the options first to let the environment choose.
GEEPS_EXPORT Status ApplyEnvironment(ProcessOptions* options);

// Writes a new CURVE key pair for a job to `path` (mode 0600; what
// ProcessOptions::curve_key_file reads; geeps_keygen is this call) and
// returns its public key (Z85). kFailedPrecondition if the file exists and
// not `overwrite`; errors name the path.
GEEPS_EXPORT StatusOr<std::string> WriteNewCurveKeyFile(const std::string& path, bool overwrite);

class GEEPS_EXPORT Process {
 public:
  // Joins the job: finds rank and world size, binds this process's shard
  // sockets, meets every other process at the coordinator (rank 0 binds it)
  // and learns their endpoints, then starts heartbeats. Every rank must pass
  // the same config (checked). Errors: a rank missing after Config::timeout
  // (kDeadlineExceeded naming it), a port in use (kUnavailable naming it),
  // a config that differs between ranks (kInvalidArgument), a CURVE key
  // file that is missing (kNotFound) or bad or readable by others
  // (kInvalidArgument), each naming it.
  static StatusOr<std::unique_ptr<Process>> Join(const Config& config,
                                                 const ProcessOptions& options);
  ~Process();  // Shutdown()
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // This process's rank among the job's processes, and their count.
  int rank() const;
  int world_size() const;
  // The job's config: num_workers and num_shards as the roles made them.
  const Config& config() const;
  // This process's worker (its rank among the workers is worker()->rank()),
  // or null when the role has none.
  GeePS* worker();
  // This process's shard statistics, `shard` its shard index (zeros, and
  // shard -1, when the role has no shard).
  ShardStats GetShardStats() const;
  // The statistics of the machine relay this process runs (with
  // aggregate_per_machine, in the process of each machine's first worker);
  // zeros and machine -1 elsewhere.
  RelayStats GetRelayStats() const;
  // With CURVE: connection attempts this process refused so far (peers
  // without the job's key, or not using CURVE); 0 when CURVE is off.
  int64_t rejected_connections() const;

  // Leaves the job: shuts the worker down (sending its queued updates), then
  // waits until every process has left or is lost (at most Config::timeout),
  // so that no shard stops while others still need it, then stops the
  // shards and heartbeats. Idempotent.
  Status Shutdown();

 private:
  struct Impl;
  explicit Process(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace geeps

#endif  // GEEPS_PROCESS_H_
