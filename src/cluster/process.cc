#include "geeps/process.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <zmq.hpp>

#include "client/geeps_access.h"
#include "client/worker.h"
#include "cluster/bootstrap.h"
#include "cluster/machine_relay.h"
#include "cluster/membership.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "device/selection.h"
#include "server/checkpoint.h"
#include "server/shard_channel.h"
#include "transport/control_messages.h"
#include "transport/fingerprint.h"
#include "transport/security.h"
#include "transport/socket_util.h"
#include "transport/sockets.h"

namespace geeps {
namespace {

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// The local IPv4 address that routes to `to` (a UDP connect sends nothing).
StatusOr<std::string> RouteAddress(const cluster::HostPort& to) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(to.host.c_str(), std::to_string(to.port).c_str(), &hints, &res) != 0 || !res)
    return UnavailableError("cannot resolve the coordinator host '" + to.host + "'");
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  std::string result;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)))
      result = buf;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (result.empty())
    return UnavailableError("no local address routes to the coordinator " + to.host +
                            "; set GEEPS_BIND_HOST");
  return result;
}

bool HasShard(ProcessRole r) { return r != ProcessRole::kWorker; }
bool HasWorker(ProcessRole r) { return r != ProcessRole::kServer; }

}  // namespace

Status ApplyEnvironment(ProcessOptions* o) {
  if (const char* v = std::getenv("GEEPS_ROLE")) {
    const std::string s = v;
    if (s == "both")
      o->role = ProcessRole::kWorkerAndServer;
    else if (s == "worker")
      o->role = ProcessRole::kWorker;
    else if (s == "server")
      o->role = ProcessRole::kServer;
    else
      return InvalidArgumentError("GEEPS_ROLE='" + s + "': expected both, worker or server");
  }
  if (const char* v = std::getenv("GEEPS_TRANSPORT")) {
    const std::string s = v;
    if (s == "tcp")
      o->transport = Transport::kTcp;
    else if (s == "ipc")
      o->transport = Transport::kIpc;
    else
      return InvalidArgumentError("GEEPS_TRANSPORT='" + s + "': expected tcp or ipc");
  }
  if (const char* v = std::getenv("GEEPS_BIND_HOST")) o->bind_host = v;
  if (const char* v = std::getenv("GEEPS_IPC_DIR")) o->ipc_dir = v;
  if (const char* v = std::getenv("GEEPS_BASE_PORT")) {
    char* end = nullptr;
    const long port = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || port < 0 || port > 65535)
      return InvalidArgumentError(std::string("GEEPS_BASE_PORT='") + v +
                                  "': expected a port in [0, 65535]");
    o->base_port = static_cast<int>(port);
  }
  if (const char* v = std::getenv("GEEPS_CURVE_KEYS")) o->curve_key_file = v;
  if (const char* v = std::getenv("GEEPS_MACHINE")) {
    if (!transport::ValidMachineName(v))
      return InvalidArgumentError(std::string("GEEPS_MACHINE='") + v +
                                  "': expected 1 to 255 of [A-Za-z0-9._:-], not \"-\"");
    o->machine = v;
  }
  return Status::OK();
}

// The ipc:// socket files this process bound: removed at Shutdown, or when
// a Join that failed after binding drops them (ZeroMQ leaves them behind).
struct IpcFiles {
  std::vector<std::string> paths;
  IpcFiles() = default;
  IpcFiles(const IpcFiles&) = delete;
  IpcFiles& operator=(const IpcFiles&) = delete;
  ~IpcFiles() { Remove(); }
  void Remove() {
    for (const std::string& p : paths) {
      if (unlink(p.c_str()) != 0 && errno != ENOENT) {
        GEEPS_LOG(Warning) << "cannot remove ipc socket file " << p << ": " << std::strerror(errno);
      }
    }
    paths.clear();
  }
};

struct Process::Impl {
  Config config;  // the job's: num_workers and num_shards from the roles
  ProcessOptions options;
  int rank = 0;
  int world_size = 1;
  // Declared first so that it is destroyed last, after every socket.
  std::unique_ptr<zmq::context_t> context;
  // CURVE (null: off). Destroyed after every socket it configured, before
  // the context.
  std::unique_ptr<transport::SecurityConfig> security;
  std::unique_ptr<cluster::Membership> membership;
  int shard = -1;  // this process's shard index (-1: none)
  std::vector<std::unique_ptr<server::ShardChannel>> channels;
  // With aggregate_per_machine, in the process of its machine's leader.
  std::unique_ptr<cluster::MachineRelay> relay;
  client::Worker* worker_impl = nullptr;
  std::unique_ptr<GeePS> worker;
  IpcFiles ipc_files;
  common::Mutex shutdown_mu;
  bool shut_down GEEPS_GUARDED_BY(shutdown_mu) = false;
};

Process::Process(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Process::~Process() { Shutdown().ok(); }

StatusOr<std::unique_ptr<Process>> Process::Join(const Config& config,
                                                 const ProcessOptions& options) {
  if (config.aggregate_per_machine && config.workers_per_machine > 0)
    return InvalidArgumentError(
        "workers_per_machine is " + std::to_string(config.workers_per_machine) +
        ", but a multi-process job finds its machines from ProcessOptions::machine "
        "(GEEPS_MACHINE, else the host name): leave it 0");
  std::string machine = options.machine;
  if (config.aggregate_per_machine && machine.empty()) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0)
      return UnavailableError(std::string("cannot read the host name (for the machine of "
                                          "aggregate_per_machine; set GEEPS_MACHINE): ") +
                              std::strerror(errno));
    machine = name;
  }
  if (!machine.empty() && !transport::ValidMachineName(machine))
    return InvalidArgumentError("machine name '" + machine +
                                "' (ProcessOptions::machine, GEEPS_MACHINE or the host name): "
                                "expected 1 to 255 of [A-Za-z0-9._:-], not \"-\"");
  Config job = config;
  job.num_workers = 1;  // set from the roles below; ValidateConfig needs >= 1
  job.num_shards = 1;
  GEEPS_RETURN_IF_ERROR(ValidateConfig(job));
  if (options.transport != Transport::kTcp && options.transport != Transport::kIpc)
    return InvalidArgumentError("ProcessOptions::transport must be Transport::kTcp or kIpc, got " +
                                std::to_string(static_cast<int>(options.transport)));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  int local_rank = 0;
  if (options.rank >= 0 || options.world_size >= 0) {
    if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size)
      return InvalidArgumentError("ProcessOptions: rank " + std::to_string(options.rank) +
                                  " and world_size " + std::to_string(options.world_size) +
                                  " must satisfy 0 <= rank < world_size");
    impl->rank = options.rank;
    impl->world_size = options.world_size;
    local_rank = options.rank;
  } else {
    GEEPS_ASSIGN_OR_RETURN(cluster::ProcessEnv env, cluster::DetectProcessEnv());
    impl->rank = env.rank;
    impl->world_size = env.world_size;
    local_rank = env.local_rank;
  }
  // The worker's device (one worker per process), checked before anything
  // is allocated or bound.
  int device_ordinal = -1;
  if (HasWorker(options.role)) {
    StatusOr<std::vector<int>> ordinals =
        device::SelectWorkerDevices(config, local_rank, /*workers_in_process=*/1);
    if (!ordinals.ok())
      return Status(ordinals.status().code(), "rank " + std::to_string(impl->rank) +
                                                  " (local rank " + std::to_string(local_rank) +
                                                  "): " + ordinals.status().message());
    device_ordinal = ordinals->front();
  }
  cluster::HostPort coordinator;
  if (!options.coordinator.empty()) {
    GEEPS_ASSIGN_OR_RETURN(coordinator, cluster::ParseHostPort(options.coordinator));
  } else {
    GEEPS_ASSIGN_OR_RETURN(coordinator, cluster::CoordinatorAddress());
  }
  std::string host = options.bind_host;
  std::string advertise = host;
  if (host.empty() || host == "*") {
    if (IsLoopback(coordinator.host)) {
      advertise = "127.0.0.1";
    } else {
      GEEPS_ASSIGN_OR_RETURN(advertise, RouteAddress(coordinator));
    }
    if (host.empty()) host = advertise;
  }
  // CURVE: the key file is checked before anything binds.
  std::string key_file = options.curve_key_file;
  if (const char* v = std::getenv("GEEPS_CURVE_KEYS"); key_file.empty() && v) key_file = v;
  transport::CurveKeys job_keys;
  if (!key_file.empty()) {
    auto keys = transport::ReadCurveKeyFile(key_file);
    if (!keys.ok())
      return Status(keys.status().code(),
                    "rank " + std::to_string(impl->rank) + ": " + keys.status().message());
    job_keys = std::move(keys).value();
  }
  GEEPS_ASSIGN_OR_RETURN(impl->context, transport::NewContext());
  // CURVE with a key file; else the job token guards the data plane.
  if (!key_file.empty()) {
    GEEPS_ASSIGN_OR_RETURN(impl->security,
                           transport::SecurityConfig::Start(impl->context.get(), job_keys));
  } else {
    GEEPS_ASSIGN_OR_RETURN(impl->security,
                           transport::SecurityConfig::StartWithToken(impl->context.get()));
  }

  // Bind this process's shard sockets first: their addresses go into HELLO.
  cluster::PeerInfo self;
  self.rank = impl->rank;
  self.role = options.role;
  if (config.aggregate_per_machine && HasWorker(options.role)) self.machine = machine;
  std::vector<std::unique_ptr<zmq::socket_t>> bound;
  if (HasShard(options.role)) {
    for (int k = 0; k < config.num_channels; ++k) {
      std::string endpoint;
      if (options.transport == Transport::kIpc) {
        const std::string path = options.ipc_dir + "/geeps-" + std::to_string(getpid()) + "-r" +
                                 std::to_string(impl->rank) + "-c" + std::to_string(k) + ".sock";
        endpoint = "ipc://" + path;
        impl->ipc_files.paths.push_back(path);
      } else {
        const int port =
            options.base_port > 0 ? options.base_port + local_rank * config.num_channels + k : 0;
        endpoint = "tcp://" + host + ":" + (port > 0 ? std::to_string(port) : "*");
      }
      std::string actual;
      auto socket =
          transport::BindShardRouter(*impl->context, endpoint, transport::LargestFrameBytes(config),
                                     impl->security.get(), &actual);
      if (!socket.ok())
        return Status(socket.status().code(),
                      "rank " + std::to_string(impl->rank) + ": " + socket.status().message());
      // A wildcard bind reports 0.0.0.0; peers connect to the advertised host.
      const std::string wildcard = "tcp://0.0.0.0:";
      if (actual.rfind(wildcard, 0) == 0)
        actual = "tcp://" + advertise + ":" + actual.substr(wildcard.size());
      self.endpoints.push_back(actual);
      bound.push_back(std::move(socket).value());
    }
  }

  // Checkpoints: every rank reports the files it sees in HELLO; rank 0
  // picks the newest clock that the rank hosting each partition has, and
  // every rank restores it (docs/architecture.md, "Checkpoints").
  cluster::ResumeChooser choose;
  if (!config.checkpoint_dir.empty()) {
    Status dir = server::EnsureCheckpointDir(config.checkpoint_dir);
    if (!dir.ok())
      return Status(dir.code(), "rank " + std::to_string(impl->rank) + ": " + dir.message());
    if (config.resume != ResumeMode::kOff && HasShard(options.role)) {
      for (const auto& [p, clocks] : server::ListCheckpoints(config.checkpoint_dir))
        for (int64_t k : clocks) self.checkpoints.emplace_back(p, k);
    }
    if (impl->rank == 0 && config.resume != ResumeMode::kOff) {
      choose = [&config](const cluster::JobLayout& layout) -> StatusOr<int64_t> {
        Config job = config;
        job.num_workers = std::max(1, layout.num_workers);
        job.num_shards = std::max(1, layout.num_shards);
        std::map<int, std::set<int64_t>> seen;  // by the rank hosting the partition
        for (const cluster::PeerInfo& peer : layout.peers) {
          const int shard = layout.shard_index[peer.rank];
          if (shard < 0) continue;
          for (const auto& [p, k] : peer.checkpoints)
            if (p / job.num_channels == shard) seen[p].insert(k);
        }
        return server::ChooseResumeClock(job, seen);
      };
    }
  }
  impl->membership = std::make_unique<cluster::Membership>(
      impl->context.get(), impl->rank, impl->world_size, coordinator, config.timeout,
      config.heartbeat_timeout, impl->security.get());
  GEEPS_ASSIGN_OR_RETURN(
      cluster::JobLayout layout,
      impl->membership->Rendezvous(
          self, transport::JobFingerprint(config, transport::FingerprintScope::kRendezvous),
          config.num_channels, choose));
  if (layout.num_workers == 0 || layout.num_shards == 0)
    return InvalidArgumentError("the job has " + std::to_string(layout.num_workers) +
                                " workers and " + std::to_string(layout.num_shards) +
                                " shards; it needs at least one of each (see GEEPS_ROLE)");
  if (!impl->security->curve()) {
    Status token = impl->security->SetJobToken(layout.token);
    if (!token.ok())
      return UnavailableError("rank " + std::to_string(impl->rank) +
                              ": the coordinator's WELCOME has no valid job token (" +
                              token.message() + "; is rank 0 an older libgeeps?)");
  }
  job.num_workers = layout.num_workers;
  job.num_shards = layout.num_shards;
  GEEPS_RETURN_IF_ERROR(ValidateConfig(job));
  impl->config = job;
  // This process's sockets for the whole job, checked before the worker
  // makes one per partition.
  GEEPS_RETURN_IF_ERROR(transport::CheckSocketNeeds(
      *impl->context,
      transport::ProcessNeeds(job, HasWorker(options.role) ? 1 : 0,
                              HasShard(options.role) ? job.num_channels : 0, impl->world_size,
                              true),
      "Process::Join: rank " + std::to_string(impl->rank) + " of a job of " +
          transport::JobShape(job)));

  std::vector<std::string> endpoints(static_cast<size_t>(job.num_shards) * job.num_channels);
  for (const cluster::PeerInfo& p : layout.peers) {
    const int s = layout.shard_index[p.rank];
    if (s < 0) continue;
    for (int k = 0; k < job.num_channels; ++k) endpoints[s * job.num_channels + k] = p.endpoints[k];
  }
  // Machine-level aggregation: the worker processes of one machine, by
  // worker rank; the first leads and runs the machine's relay, which every
  // member's channels connect to over ipc:// instead of the partitions.
  std::vector<bool> participants;  // empty: every worker
  std::vector<std::string> worker_endpoints = endpoints;
  if (job.aggregate_per_machine) {
    std::map<std::string, std::vector<int>> machines;  // name -> worker ranks
    for (const cluster::PeerInfo& p : layout.peers) {
      const int w = layout.worker_index[p.rank];
      if (w >= 0) machines[p.machine].push_back(w);
    }
    participants.assign(job.num_workers, false);
    std::vector<int> mine;
    int machine_index = 0, index = 0;  // this process's machine, in name order
    for (auto& [name, ranks] : machines) {
      std::sort(ranks.begin(), ranks.end());
      participants[ranks.front()] = true;
      if (name == layout.peers[impl->rank].machine && HasWorker(options.role)) {
        mine = ranks;
        machine_index = index;
      }
      ++index;
    }
    if (HasWorker(options.role) && mine.empty())
      return InternalError("rank " + std::to_string(impl->rank) + ": machine '" + self.machine +
                           "' is not in the job's layout");
    if (HasWorker(options.role)) {
      const int leader = mine.front();
      const int num_partitions = job.num_shards * job.num_channels;
      // Named by the job (its coordinator's port) and the leader, so that
      // every member finds them without another exchange.
      std::vector<std::string> local;
      std::vector<std::string> paths;
      for (int p = 0; p < num_partitions; ++p) {
        paths.push_back(options.ipc_dir + "/geeps-relay-" + std::to_string(coordinator.port) +
                        "-w" + std::to_string(leader) + "-p" + std::to_string(p) + ".sock");
        local.push_back("ipc://" + paths.back());
      }
      worker_endpoints = local;
      if (layout.worker_index[impl->rank] == leader) {
        impl->relay = std::make_unique<cluster::MachineRelay>(
            impl->context.get(), job, machine_index, mine, local, endpoints, impl->security.get());
        impl->relay->SetStartClock(layout.resume_clock);
        for (const std::string& path : paths) impl->ipc_files.paths.push_back(path);
        Status started = impl->relay->Start();
        if (!started.ok())
          return Status(started.code(), "rank " + std::to_string(impl->rank) +
                                            ": machine relay: " + started.message());
        GEEPS_LOG(Info) << "rank " << impl->rank << ": relay of machine '" << self.machine
                        << "' for workers " << mine.size() << " (first " << leader << ")";
      }
    }
  }
  const int my_shard = layout.shard_index[impl->rank];
  impl->shard = my_shard;
  const std::vector<int> checkpointing = server::CheckpointingPartitions(job);
  for (size_t k = 0; k < bound.size(); ++k) {
    const int partition = my_shard * job.num_channels + static_cast<int>(k);
    impl->channels.push_back(std::make_unique<server::ShardChannel>(
        impl->context.get(), job, partition, self.endpoints[k], std::move(bound[k]), participants));
    impl->channels.back()->SetSecurity(impl->security.get());
    // With CURVE keys, checkpoints carry a MAC by a key derived from them.
    if (impl->security->curve())
      impl->channels.back()->SetCheckpointKey(
          server::CheckpointKeyFromSecret(impl->security->keys().secret_key));
  }
  // Every channel loads (and verifies) its file before any starts.
  if (layout.resume_clock > 0) {
    for (auto& c : impl->channels) {
      const int partition =
          static_cast<int>(&c - impl->channels.data()) + my_shard * job.num_channels;
      if (std::find(checkpointing.begin(), checkpointing.end(), partition) == checkpointing.end())
        continue;
      Status st = c->Restore(layout.resume_clock);
      if (!st.ok())
        return Status(st.code(), "rank " + std::to_string(impl->rank) + ": " + st.message());
    }
  }
  for (auto& c : impl->channels) GEEPS_RETURN_IF_ERROR(c->Start());
  if (HasWorker(options.role)) {
    auto worker =
        std::make_unique<client::Worker>(job, layout.worker_index[impl->rank], impl->context.get(),
                                         worker_endpoints, impl->security.get());
    worker->SetResumeClock(layout.resume_clock);
    worker->SetDeviceOrdinal(device_ordinal);
    impl->worker_impl = worker.get();
    impl->worker = internal::GeePSAccess::Make(std::move(worker));
  }
  client::Worker* worker = impl->worker_impl;
  GEEPS_RETURN_IF_ERROR(impl->membership->Start([worker](int, const Status& why) {
    if (worker) worker->FailPeers(why);
  }));
  GEEPS_LOG(Info) << "rank " << impl->rank << " of " << impl->world_size
                  << " joined: " << job.num_workers << " workers, " << job.num_shards << " shards";
  return std::unique_ptr<Process>(new Process(std::move(impl)));
}

int Process::rank() const { return impl_->rank; }
int64_t Process::rejected_connections() const {
  return impl_->security ? impl_->security->rejected_connections() : 0;
}
int Process::world_size() const { return impl_->world_size; }
const Config& Process::config() const { return impl_->config; }
GeePS* Process::worker() { return impl_->worker.get(); }

ShardStats Process::GetShardStats() const {
  ShardStats total;
  total.shard = impl_->shard;  // -1 in a process without a shard
  for (const auto& c : impl_->channels) total.Add(c->GetStats());
  return total;
}

Status Process::Shutdown() {
  common::MutexLock lock(&impl_->shutdown_mu);
  if (impl_->shut_down) return Status::OK();
  impl_->shut_down = true;
  Status first;
  if (impl_->worker) first = impl_->worker->Shutdown();
  if (impl_->membership) {
    Status left = impl_->membership->Leave(impl_->config.timeout);
    if (!left.ok()) {
      GEEPS_LOG(Warning) << "rank " << impl_->rank << ": " << left.message();
    }
    impl_->membership->Stop();
  }
  // Every process has left: what the members sent last passes the relay
  // before this process's shards stop.
  if (impl_->relay) impl_->relay->Stop();
  for (auto& c : impl_->channels) c->Stop();
  impl_->ipc_files.Remove();
  return first;
}

}  // namespace geeps
