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

#include "client/geeps_access.h"
#include "client/worker.h"
#include "cluster/bootstrap.h"
#include "cluster/job_plan.h"
#include "cluster/membership.h"
#include "common/env_flags.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "device/selection.h"
#include "relay/machine_relay.h"
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
  // Every process, servers too, tells a malformed diagnostic or test-mode
  // variable here.
  return CheckSelfReadEnvironment();
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

namespace process_internal {

// Where the heartbeat thread reports a lost rank. The heartbeats start
// right after the rendezvous, so that a process slow to build its data
// plane (a large checkpoint, a loaded machine) keeps beating meanwhile; a
// loss reported before the worker exists is kept and given to it when it
// is made.
class LossSink {
 public:
  void Report(const Status& why) {
    common::MutexLock lock(&mu_);
    if (worker_ == nullptr) {
      if (first_.ok()) first_ = why;
      return;
    }
    worker_->FailPeers(why);
  }
  void Attach(client::Worker* worker) {
    common::MutexLock lock(&mu_);
    worker_ = worker;
    if (!first_.ok()) worker_->FailPeers(first_);
  }

 private:
  common::Mutex mu_;
  client::Worker* worker_ GEEPS_GUARDED_BY(mu_) = nullptr;
  Status first_ GEEPS_GUARDED_BY(mu_);
};

// A process of a job: what Join builds, step by step, and Process keeps.
struct State {
  Config config;  // the job's: num_workers and num_shards from the roles
  ProcessOptions options;
  int rank = 0;
  int world_size = 1;
  // Declared first so that it is destroyed last, after every socket.
  transport::ContextPtr context;
  // CURVE (null: off). Destroyed after every socket it configured, before
  // the context.
  std::unique_ptr<transport::SecurityConfig> security;
  LossSink losses;  // outlives the heartbeat thread, which reports to it
  std::unique_ptr<cluster::Membership> membership;
  int shard = -1;  // this process's shard index (-1: none)
  std::vector<std::unique_ptr<server::ShardChannel>> channels;
  // With aggregate_per_machine, in the process of its machine's leader.
  std::unique_ptr<relay::MachineRelay> relay;
  client::Worker* worker_impl = nullptr;
  std::unique_ptr<GeePS> worker;
  IpcFiles ipc_files;
  common::Mutex shutdown_mu;
  bool shut_down GEEPS_GUARDED_BY(shutdown_mu) = false;
};

}  // namespace process_internal

namespace {

using process_internal::State;

// "rank R: <why>", with why's code.
Status AtRank(int rank, const Status& why) {
  return Status(why.code(), "rank " + std::to_string(rank) + ": " + why.message());
}

// The machine of aggregate_per_machine: ProcessOptions::machine (or
// GEEPS_MACHINE), else the host name; "" without aggregation.
StatusOr<std::string> MachineName(const Config& config, const ProcessOptions& options) {
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
  return machine;
}

// Rank and world size from the options, else from the launcher's
// environment; returns the local rank.
StatusOr<int> ResolveRank(const ProcessOptions& options, State* s) {
  if (options.rank < 0 && options.world_size < 0) {
    GEEPS_ASSIGN_OR_RETURN(cluster::ProcessEnv env, cluster::DetectProcessEnv());
    s->rank = env.rank;
    s->world_size = env.world_size;
    return env.local_rank;
  }
  if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size)
    return InvalidArgumentError("ProcessOptions: rank " + std::to_string(options.rank) +
                                " and world_size " + std::to_string(options.world_size) +
                                " must satisfy 0 <= rank < world_size");
  s->rank = options.rank;
  s->world_size = options.world_size;
  return options.rank;
}

// The worker's device ordinal (one worker per process; -1 without a
// worker), checked before anything is allocated or bound.
StatusOr<int> WorkerDevice(const Config& config, const ProcessOptions& options, int rank,
                           int local_rank) {
  if (!HasWorker(options.role)) return -1;
  StatusOr<std::vector<int>> ordinals =
      device::SelectWorkerDevices(config, local_rank, /*workers_in_process=*/1);
  if (!ordinals.ok())
    return Status(ordinals.status().code(), "rank " + std::to_string(rank) + " (local rank " +
                                                std::to_string(local_rank) +
                                                "): " + ordinals.status().message());
  return ordinals->front();
}

// Where the shard sockets bind and the address peers reach them at.
struct Hosts {
  std::string bind, advertise;
};

StatusOr<Hosts> ResolveHosts(const ProcessOptions& options, const cluster::HostPort& coordinator) {
  Hosts h{options.bind_host, options.bind_host};
  if (!h.bind.empty() && h.bind != "*") return h;
  if (IsLoopback(coordinator.host)) {
    h.advertise = "127.0.0.1";
  } else {
    GEEPS_ASSIGN_OR_RETURN(h.advertise, RouteAddress(coordinator));
  }
  if (h.bind.empty()) h.bind = h.advertise;
  return h;
}

// The ZeroMQ context and the job's security: CURVE with a key file (checked
// before anything binds), else the job token guards the data plane.
Status StartSecurity(const ProcessOptions& options, State* s) {
  std::string key_file = options.curve_key_file;
  if (const char* v = std::getenv("GEEPS_CURVE_KEYS"); key_file.empty() && v) key_file = v;
  transport::CurveKeys job_keys;
  if (!key_file.empty()) {
    auto keys = transport::ReadCurveKeyFile(key_file);
    if (!keys.ok()) return AtRank(s->rank, keys.status());
    job_keys = std::move(keys).value();
  }
  GEEPS_ASSIGN_OR_RETURN(s->context, transport::NewContext());
  if (!key_file.empty()) {
    GEEPS_ASSIGN_OR_RETURN(s->security,
                           transport::SecurityConfig::Start(s->context.get(), job_keys));
  } else {
    GEEPS_ASSIGN_OR_RETURN(s->security,
                           transport::SecurityConfig::StartWithToken(s->context.get()));
  }
  return Status::OK();
}

// Binds this process's shard sockets (their addresses go into HELLO, in
// `self`).
Status BindShards(const Config& config, const ProcessOptions& options, int local_rank,
                  const Hosts& hosts, State* s, cluster::PeerInfo* self,
                  std::vector<transport::Socket>* bound) {
  if (!HasShard(options.role)) return Status::OK();
  for (int k = 0; k < config.num_channels; ++k) {
    std::string endpoint;
    if (options.transport == Transport::kIpc) {
      const std::string path = cluster::ShardIpcPath(options.ipc_dir, getpid(), s->rank, k);
      endpoint = "ipc://" + path;
      s->ipc_files.paths.push_back(path);
    } else {
      const int port =
          options.base_port > 0 ? options.base_port + local_rank * config.num_channels + k : 0;
      endpoint = cluster::ShardTcpBind(hosts.bind, port);
    }
    std::string actual;
    auto socket = transport::BindShardSocket(
        *s->context, endpoint, transport::LargestFrameBytes(config), s->security.get(), &actual);
    if (!socket.ok()) return AtRank(s->rank, socket.status());
    // A wildcard bind reports 0.0.0.0; peers connect to the advertised host.
    self->endpoints.push_back(cluster::AdvertisedEndpoint(actual, hosts.advertise));
    bound->push_back(std::move(socket).value());
  }
  return Status::OK();
}

// Checkpoints: every rank reports the files it sees in HELLO (into
// `self`); rank 0 picks the newest clock that the rank hosting each
// partition has (the chooser returned; empty elsewhere), and every rank
// restores it (docs/architecture.md, "Checkpoints").
StatusOr<cluster::ResumeChooser> CheckpointsForHello(const Config& config, ProcessRole role,
                                                     int rank, cluster::PeerInfo* self) {
  if (config.checkpoint_dir.empty()) return cluster::ResumeChooser();
  Status dir = server::EnsureCheckpointDir(config.checkpoint_dir);
  if (!dir.ok()) return AtRank(rank, dir);
  if (config.resume != ResumeMode::kOff && HasShard(role)) {
    for (const auto& [p, clocks] : server::ListCheckpoints(config.checkpoint_dir))
      for (int64_t k : clocks) self->checkpoints.emplace_back(p, k);
  }
  if (rank != 0 || config.resume == ResumeMode::kOff) return cluster::ResumeChooser();
  return cluster::ResumeChooser([config](const cluster::JobLayout& layout) -> StatusOr<int64_t> {
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
  });
}

// The rendezvous: the job's layout from the coordinator, its token, and
// the job's config (s->config) with its roles counted; checks this
// process's sockets for the whole job before the worker makes one per
// partition.
StatusOr<cluster::JobLayout> Rendezvous(const Config& config, const cluster::HostPort& coordinator,
                                        const cluster::PeerInfo& self,
                                        const cluster::ResumeChooser& choose, State* s) {
  s->membership = std::make_unique<cluster::Membership>(
      s->context.get(), s->rank, s->world_size, coordinator, config.timeout,
      config.heartbeat_timeout, s->security.get());
  GEEPS_ASSIGN_OR_RETURN(
      cluster::JobLayout layout,
      s->membership->Rendezvous(
          self, transport::JobFingerprint(config, transport::FingerprintScope::kRendezvous),
          config.num_channels, choose));
  if (layout.num_workers == 0 || layout.num_shards == 0)
    return InvalidArgumentError("the job has " + std::to_string(layout.num_workers) +
                                " workers and " + std::to_string(layout.num_shards) +
                                " shards; it needs at least one of each (see GEEPS_ROLE)");
  if (!s->security->curve()) {
    Status token = s->security->SetJobToken(layout.token);
    if (!token.ok())
      return UnavailableError("rank " + std::to_string(s->rank) +
                              ": the coordinator's WELCOME has no valid job token (" +
                              token.message() + "; is rank 0 an older libgeeps?)");
  }
  Config job = config;
  job.num_workers = layout.num_workers;
  job.num_shards = layout.num_shards;
  GEEPS_RETURN_IF_ERROR(ValidateConfig(job));
  s->config = job;
  const ProcessRole role = s->options.role;
  GEEPS_RETURN_IF_ERROR(transport::CheckSocketNeeds(
      *s->context,
      transport::ProcessNeeds(job, HasWorker(role) ? 1 : 0, HasShard(role) ? job.num_channels : 0,
                              s->world_size, true),
      "Process::Join: rank " + std::to_string(s->rank) + " of a job of " +
          transport::JobShape(job)));
  return layout;
}

// This machine's relay, in the process of its leading worker.
Status StartRelay(const cluster::ProcessPlan& plan, int64_t resume_clock,
                  const std::string& machine, State* s) {
  const cluster::ProcessPlan::Relay& r = *plan.relay;
  s->relay = std::make_unique<relay::MachineRelay>(s->context.get(), s->config, r.machine_index,
                                                   r.workers, plan.worker_endpoints,
                                                   plan.partition_endpoints, s->security.get());
  s->relay->SetStartClock(resume_clock);
  for (const std::string& path : r.ipc_paths) s->ipc_files.paths.push_back(path);
  Status started = s->relay->Start();
  if (!started.ok())
    return Status(started.code(),
                  "rank " + std::to_string(s->rank) + ": machine relay: " + started.message());
  GEEPS_LOG(Info) << "rank " << s->rank << ": relay of machine '" << machine << "' for workers "
                  << r.workers.size() << " (first " << r.workers.front() << ")";
  return Status::OK();
}

// This process's shard channels on the bound sockets: each restores the
// checkpoint (all load and verify theirs before any starts), then starts.
Status StartChannels(const cluster::JobLayout& layout, const cluster::PeerInfo& self,
                     const std::vector<bool>& participants, std::vector<transport::Socket>* bound,
                     State* s) {
  const Config& job = s->config;
  s->shard = layout.shard_index[s->rank];
  for (size_t k = 0; k < bound->size(); ++k) {
    const int partition = s->shard * job.num_channels + static_cast<int>(k);
    s->channels.push_back(std::make_unique<server::ShardChannel>(
        s->context.get(), job, partition, self.endpoints[k], std::move((*bound)[k]), participants));
    s->channels.back()->SetSecurity(s->security.get());
    // With CURVE keys, checkpoints carry a MAC by a key derived from them.
    if (s->security->curve())
      s->channels.back()->SetCheckpointKey(
          server::CheckpointKeyFromSecret(s->security->keys().secret_key));
  }
  if (layout.resume_clock > 0) {
    const std::vector<int> checkpointing = server::CheckpointingPartitions(job);
    for (size_t k = 0; k < s->channels.size(); ++k) {
      const int partition = static_cast<int>(k) + s->shard * job.num_channels;
      if (std::find(checkpointing.begin(), checkpointing.end(), partition) == checkpointing.end())
        continue;
      Status st = s->channels[k]->Restore(layout.resume_clock);
      if (!st.ok()) return AtRank(s->rank, st);
    }
  }
  for (auto& c : s->channels) GEEPS_RETURN_IF_ERROR(c->Start());
  return Status::OK();
}

// This process's worker (if it has one), which the heartbeats fail when a
// rank is lost.
Status StartWorker(const cluster::JobLayout& layout, const cluster::ProcessPlan& plan,
                   int device_ordinal, State* s) {
  if (HasWorker(s->options.role)) {
    auto worker =
        std::make_unique<client::Worker>(s->config, layout.worker_index[s->rank], s->context.get(),
                                         plan.worker_endpoints, s->security.get());
    worker->SetResumeClock(layout.resume_clock);
    worker->SetDeviceOrdinal(device_ordinal);
    s->worker_impl = worker.get();
    s->worker = internal::GeePSAccess::Make(std::move(worker));
  }
  if (s->worker_impl) s->losses.Attach(s->worker_impl);
  return Status::OK();
}

}  // namespace

struct Process::Impl : process_internal::State {};

Process::Process(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Process::~Process() { Shutdown().ok(); }

StatusOr<std::unique_ptr<Process>> Process::Join(const Config& config,
                                                 const ProcessOptions& options) {
  GEEPS_ASSIGN_OR_RETURN(const std::string machine, MachineName(config, options));
  Config job = config;
  job.num_workers = 1;  // set from the roles below; ValidateConfig needs >= 1
  job.num_shards = 1;
  GEEPS_RETURN_IF_ERROR(ValidateConfig(job));
  if (options.transport != Transport::kTcp && options.transport != Transport::kIpc)
    return InvalidArgumentError("ProcessOptions::transport must be Transport::kTcp or kIpc, got " +
                                std::to_string(static_cast<int>(options.transport)));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  GEEPS_ASSIGN_OR_RETURN(const int local_rank, ResolveRank(options, impl.get()));
  GEEPS_ASSIGN_OR_RETURN(const int device_ordinal,
                         WorkerDevice(config, options, impl->rank, local_rank));
  cluster::HostPort coordinator;
  if (!options.coordinator.empty()) {
    GEEPS_ASSIGN_OR_RETURN(coordinator, cluster::ParseHostPort(options.coordinator));
  } else {
    GEEPS_ASSIGN_OR_RETURN(coordinator, cluster::CoordinatorAddress());
  }
  GEEPS_ASSIGN_OR_RETURN(const Hosts hosts, ResolveHosts(options, coordinator));
  GEEPS_RETURN_IF_ERROR(StartSecurity(options, impl.get()));
  cluster::PeerInfo self;
  self.rank = impl->rank;
  self.role = options.role;
  if (config.aggregate_per_machine && HasWorker(options.role)) self.machine = machine;
  std::vector<transport::Socket> bound;
  GEEPS_RETURN_IF_ERROR(BindShards(config, options, local_rank, hosts, impl.get(), &self, &bound));
  GEEPS_ASSIGN_OR_RETURN(const cluster::ResumeChooser choose,
                         CheckpointsForHello(config, options.role, impl->rank, &self));
  GEEPS_ASSIGN_OR_RETURN(const cluster::JobLayout layout,
                         Rendezvous(config, coordinator, self, choose, impl.get()));
  GEEPS_RETURN_IF_ERROR(impl->membership->Start(
      [sink = &impl->losses](int, const Status& why) { sink->Report(why); }));
  GEEPS_ASSIGN_OR_RETURN(
      const cluster::ProcessPlan plan,
      cluster::PlanProcess(impl->config, layout, impl->rank, HasWorker(options.role),
                           options.ipc_dir, coordinator.port));
  if (plan.relay)
    GEEPS_RETURN_IF_ERROR(StartRelay(plan, layout.resume_clock, self.machine, impl.get()));
  GEEPS_RETURN_IF_ERROR(StartChannels(layout, self, plan.participants, &bound, impl.get()));
  GEEPS_RETURN_IF_ERROR(StartWorker(layout, plan, device_ordinal, impl.get()));
  GEEPS_LOG(Info) << "rank " << impl->rank << " of " << impl->world_size
                  << " joined: " << impl->config.num_workers << " workers, "
                  << impl->config.num_shards << " shards";
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

RelayStats Process::GetRelayStats() const {
  return impl_->relay ? impl_->relay->GetStats() : RelayStats();
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
