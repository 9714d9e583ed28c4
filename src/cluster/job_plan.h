// What one process of a multi-process job connects to, decided from the
// job's layout (the coordinator's WELCOME) alone. A pure function, so that
// its rules (which endpoints a worker's channels use, which worker leads a
// machine and runs its relay, which workers the partitions count) are
// tested without sockets (tests/job_plan_test.cc).
#ifndef GEEPS_CLUSTER_JOB_PLAN_H_
#define GEEPS_CLUSTER_JOB_PLAN_H_

#include <optional>
#include <string>
#include <vector>

#include "cluster/bootstrap.h"
#include "geeps/config.h"
#include "geeps/status.h"
#include "transport/control_messages.h"

namespace geeps::cluster {

struct ProcessPlan {
  // By partition (shard * num_channels + channel): the shards' endpoints.
  std::vector<std::string> partition_endpoints;
  // What this process's worker connects to, by partition: the partitions
  // themselves, or with aggregate_per_machine its machine's relay.
  std::vector<std::string> worker_endpoints;
  // With aggregate_per_machine, by worker: whether the partitions count it
  // (the first worker of each machine, whose relay speaks for the
  // machine); empty: every worker.
  std::vector<bool> participants;
  // This process's worker leads its machine (the lowest worker rank there)
  // and runs the machine's relay.
  struct Relay {
    int machine_index = 0;               // the machine, in name order
    std::vector<int> workers;            // its workers' ranks, ascending
    std::vector<std::string> ipc_paths;  // the relay's socket files, by partition
  };
  std::optional<Relay> relay;
};

// `job`: the job's config with num_workers and num_shards from `layout`.
// `rank` is this process's; `has_worker` whether it runs a worker. The
// relay's ipc:// files go in `ipc_dir`, named by the job (its coordinator's
// port) and the machine's leader, so that every member finds them without
// another exchange. kInternal when this process's machine is missing from
// the layout.
StatusOr<ProcessPlan> PlanProcess(const Config& job, const transport::JobLayout& layout, int rank,
                                  bool has_worker, const std::string& ipc_dir,
                                  int coordinator_port);

// What an embedded cluster (one process, inproc:// endpoints) builds: the
// same plan's parts for every worker and relay at once. Every inproc://
// endpoint of libgeeps is named here (tests connect to the partitions'
// through EmbeddedClusterAccess::ShardEndpoint, which asks PartitionEndpoint).
struct EmbeddedPlan {
  // By partition (shard * num_channels + channel).
  std::vector<std::string> partition_endpoints;
  // With aggregate_per_machine, by machine: its relay.
  struct Relay {
    std::vector<int> workers;                  // its workers' ranks, ascending
    std::vector<std::string> local_endpoints;  // where they connect, by partition
  };
  std::vector<Relay> relays;
  // By worker rank: what its channels connect to, by partition.
  std::vector<std::vector<std::string>> worker_endpoints;
};

// `config` is a valid embedded cluster's config (ValidateConfig).
EmbeddedPlan PlanEmbedded(const Config& config);

// The inproc:// endpoint of a partition of an embedded cluster.
std::string PartitionEndpoint(int shard, int channel);

// The endpoints of a multi-process job, also named here:
// The coordinator's (rank 0's control socket; every rank connects to it).
std::string CoordinatorEndpoint(const HostPort& coordinator);
// The socket file of channel `channel` of rank `rank`'s shard, made by
// process `pid` in `ipc_dir` (the pid keeps two jobs' files apart).
std::string ShardIpcPath(const std::string& ipc_dir, int pid, int rank, int channel);
// The tcp:// endpoint a shard's channel binds: `host`:`port`, or any port
// when `port` is 0.
std::string ShardTcpBind(const std::string& host, int port);
// The endpoint peers connect to for one a socket reports bound: a wildcard
// address (tcp://0.0.0.0:P) becomes `advertise`:P; others stay.
std::string AdvertisedEndpoint(const std::string& bound, const std::string& advertise);

}  // namespace geeps::cluster

#endif  // GEEPS_CLUSTER_JOB_PLAN_H_
