#include "cluster/job_plan.h"

#include <algorithm>
#include <map>

#include "common/machines.h"

namespace geeps::cluster {
namespace {

// The relay's socket files of the machine led by worker `leader`.
std::vector<std::string> RelayPaths(const Config& job, const std::string& ipc_dir,
                                    int coordinator_port, int leader) {
  std::vector<std::string> paths;
  const int num_partitions = job.num_shards * job.num_channels;
  for (int p = 0; p < num_partitions; ++p)
    paths.push_back(ipc_dir + "/geeps-relay-" + std::to_string(coordinator_port) + "-w" +
                    std::to_string(leader) + "-p" + std::to_string(p) + ".sock");
  return paths;
}

// The inproc:// endpoints of machine `m`'s relay, by partition.
std::vector<std::string> RelayEndpoints(int m, int partitions) {
  std::vector<std::string> out;
  for (int p = 0; p < partitions; ++p)
    out.push_back("inproc://geeps-relay-" + std::to_string(m) + "-partition-" + std::to_string(p));
  return out;
}

}  // namespace

std::string PartitionEndpoint(int shard, int channel) {
  return "inproc://geeps-shard-" + std::to_string(shard) + "-channel-" + std::to_string(channel);
}

std::string CoordinatorEndpoint(const HostPort& coordinator) {
  return "tcp://" + FormatHostPort(coordinator);
}

std::string ShardIpcPath(const std::string& ipc_dir, int pid, int rank, int channel) {
  return ipc_dir + "/geeps-" + std::to_string(pid) + "-r" + std::to_string(rank) + "-c" +
         std::to_string(channel) + ".sock";
}

std::string ShardTcpBind(const std::string& host, int port) {
  return "tcp://" + host + ":" + (port > 0 ? std::to_string(port) : "*");
}

std::string AdvertisedEndpoint(const std::string& bound, const std::string& advertise) {
  const std::string wildcard = "tcp://0.0.0.0:";
  if (bound.rfind(wildcard, 0) != 0) return bound;
  return "tcp://" + advertise + ":" + bound.substr(wildcard.size());
}

EmbeddedPlan PlanEmbedded(const Config& config) {
  EmbeddedPlan plan;
  const int partitions = config.num_shards * config.num_channels;
  for (int p = 0; p < partitions; ++p)
    plan.partition_endpoints.push_back(
        PartitionEndpoint(p / config.num_channels, p % config.num_channels));
  if (config.aggregate_per_machine) {
    for (int m = 0; m < common::NumMachines(config); ++m)
      plan.relays.push_back({common::MachineMembers(config, m), RelayEndpoints(m, partitions)});
  }
  for (int r = 0; r < config.num_workers; ++r)
    plan.worker_endpoints.push_back(
        config.aggregate_per_machine
            ? plan.relays[static_cast<size_t>(common::MachineOf(config, r))].local_endpoints
            : plan.partition_endpoints);
  return plan;
}

StatusOr<ProcessPlan> PlanProcess(const Config& job, const transport::JobLayout& layout, int rank,
                                  bool has_worker, const std::string& ipc_dir,
                                  int coordinator_port) {
  ProcessPlan plan;
  plan.partition_endpoints.resize(static_cast<size_t>(job.num_shards) * job.num_channels);
  for (const transport::PeerInfo& p : layout.peers) {
    const int s = layout.shard_index[p.rank];
    if (s < 0) continue;
    for (int k = 0; k < job.num_channels; ++k)
      plan.partition_endpoints[s * job.num_channels + k] = p.endpoints[k];
  }
  plan.worker_endpoints = plan.partition_endpoints;
  if (!job.aggregate_per_machine) return plan;
  // The worker processes of each machine, by worker rank; the first leads.
  std::map<std::string, std::vector<int>> machines;  // name -> worker ranks
  for (const transport::PeerInfo& p : layout.peers) {
    const int w = layout.worker_index[p.rank];
    if (w >= 0) machines[p.machine].push_back(w);
  }
  plan.participants.assign(job.num_workers, false);
  std::vector<int> mine;
  int machine_index = 0, index = 0;
  for (auto& [name, ranks] : machines) {
    std::sort(ranks.begin(), ranks.end());
    plan.participants[ranks.front()] = true;
    if (has_worker && name == layout.peers[rank].machine) {
      mine = ranks;
      machine_index = index;
    }
    ++index;
  }
  if (!has_worker) return plan;
  if (mine.empty())
    return InternalError("rank " + std::to_string(rank) + ": machine '" +
                         layout.peers[rank].machine + "' is not in the job's layout");
  const std::vector<std::string> paths = RelayPaths(job, ipc_dir, coordinator_port, mine.front());
  plan.worker_endpoints.clear();
  for (const std::string& path : paths) plan.worker_endpoints.push_back("ipc://" + path);
  if (layout.worker_index[rank] == mine.front())
    plan.relay = ProcessPlan::Relay{machine_index, mine, paths};
  return plan;
}

}  // namespace geeps::cluster
