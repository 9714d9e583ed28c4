#include "geeps/embedded_cluster.h"

#include <cxxabi.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <typeinfo>

#include "client/geeps_access.h"
#include "client/worker.h"
#include "cluster/embedded_cluster_testing.h"
#include "cluster/job_plan.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "device/device.h"
#include "device/selection.h"
#include "relay/machine_relay.h"
#include "server/checkpoint.h"
#include "server/shard_channel.h"
#include "transport/socket_util.h"

namespace geeps {
namespace {

// The RunWorkers calls in flight, shared with them: the destructor waits
// for them to end, and a call's last steps may outlive the cluster.
struct RunGate {
  common::Mutex mu;
  std::condition_variable cv;
  int running GEEPS_GUARDED_BY(mu) = 0;
  bool destroying GEEPS_GUARDED_BY(mu) = false;
};

// The cluster whose worker function this thread runs (RunWorkers' threads),
// else null.
thread_local const EmbeddedCluster* running_worker_of = nullptr;

}  // namespace

struct EmbeddedCluster::Impl {
  Config config;
  // Declared first so that it is destroyed last, after every socket.
  transport::ContextPtr context;
  std::vector<std::unique_ptr<server::ShardChannel>> partitions;  // p = s*C + k
  // With aggregate_per_machine: one per machine, between its workers and
  // the partitions.
  std::vector<std::unique_ptr<relay::MachineRelay>> relays;
  std::vector<std::unique_ptr<GeePS>> workers;
  std::vector<client::Worker*> impls;  // the workers' implementations
  common::Mutex shutdown_mu;
  bool shut_down GEEPS_GUARDED_BY(shutdown_mu) = false;
  std::shared_ptr<RunGate> gate = std::make_shared<RunGate>();
};

EmbeddedCluster::EmbeddedCluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// Destroying the cluster while RunWorkers runs (an exception unwinding the
// caller, a test that gave up) is a misuse, but never a crash: the workers
// are shut down, so their blocked calls return and later ones fail, and the
// destructor waits for the worker functions to return before anything is
// freed. One that does not return within the config's timeout (plus 5 s),
// or a destruction from inside a worker function, ends the process with a
// message naming the misuse.
EmbeddedCluster::~EmbeddedCluster() {
  const std::shared_ptr<RunGate> gate = impl_->gate;
  int running = 0;
  {
    common::MutexLock lock(&gate->mu);
    gate->destroying = true;
    running = gate->running;
    if (running_worker_of == this) {
      std::fprintf(stderr,
                   "libgeeps: EmbeddedCluster destroyed from inside its own RunWorkers worker "
                   "function: it would wait for itself; aborting\n");
      std::abort();
    }
  }
  if (running > 0) {
    GEEPS_LOG(Error) << "EmbeddedCluster destroyed while RunWorkers is running: the workers are "
                        "shut down and the destructor waits for their functions to return "
                        "(destroy a cluster only after RunWorkers has returned)";
  }
  Shutdown().ok();
  const auto limit = impl_->config.timeout + std::chrono::seconds(5);
  common::MutexLock lock(&gate->mu);
  if (!lock.WaitFor(gate->cv, limit,
                    [&]() GEEPS_REQUIRES(gate->mu) { return gate->running == 0; })) {
    std::fprintf(stderr,
                 "libgeeps: EmbeddedCluster destroyed while RunWorkers was running, and its worker "
                 "functions did not return within %lld ms of the shutdown (a function that "
                 "ignores the errors its calls return?); aborting\n",
                 static_cast<long long>(limit.count()));
    std::abort();
  }
}

StatusOr<std::unique_ptr<EmbeddedCluster>> EmbeddedCluster::Start(const Config& config) {
  GEEPS_RETURN_IF_ERROR(ValidateConfig(config));
  // A forced backend that cannot work (GEEPS_DEVICE=cuda without a GPU)
  // fails here, not at each worker's FinishVirtualIteration.
  GEEPS_RETURN_IF_ERROR(device::CheckDeviceAvailable(config.device));
  // Every worker's device ordinal, checked before anything is allocated; an
  // embedded cluster is one process, local rank 0.
  GEEPS_ASSIGN_OR_RETURN(std::vector<int> ordinals,
                         device::SelectWorkerDevices(config, /*local_rank=*/0, config.num_workers));
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  GEEPS_ASSIGN_OR_RETURN(impl->context, transport::NewContext());
  // A shape too large for the socket cap or the descriptor limit is named
  // here, not by a failed socket halfway through.
  GEEPS_RETURN_IF_ERROR(
      transport::CheckSocketNeeds(*impl->context, transport::EmbeddedClusterNeeds(config),
                                  "EmbeddedCluster::Start: " + transport::JobShape(config)));
  std::unique_ptr<EmbeddedCluster> cluster(new EmbeddedCluster(std::move(impl)));
  Impl& c = *cluster->impl_;
  // Checkpoints: every partition's files are in one folder here.
  int64_t resume_clock = 0;
  if (!config.checkpoint_dir.empty()) {
    GEEPS_RETURN_IF_ERROR(server::EnsureCheckpointDir(config.checkpoint_dir));
    GEEPS_ASSIGN_OR_RETURN(
        resume_clock,
        server::ChooseResumeClock(config, server::ListCheckpoints(config.checkpoint_dir)));
  }
  const cluster::EmbeddedPlan plan = cluster::PlanEmbedded(config);
  for (size_t p = 0; p < plan.partition_endpoints.size(); ++p)
    c.partitions.push_back(std::make_unique<server::ShardChannel>(
        c.context.get(), config, static_cast<int>(p), plan.partition_endpoints[p]));
  // Every partition loads (and verifies) its file before any starts.
  if (resume_clock > 0) {
    for (int p : server::CheckpointingPartitions(config))
      GEEPS_RETURN_IF_ERROR(c.partitions[p]->Restore(resume_clock));
  }
  for (auto& p : c.partitions) GEEPS_RETURN_IF_ERROR(p->Start());
  for (size_t m = 0; m < plan.relays.size(); ++m) {
    c.relays.push_back(std::make_unique<relay::MachineRelay>(
        c.context.get(), config, static_cast<int>(m), plan.relays[m].workers,
        plan.relays[m].local_endpoints, plan.partition_endpoints));
    c.relays.back()->SetStartClock(resume_clock);
    GEEPS_RETURN_IF_ERROR(c.relays.back()->Start());
  }
  for (int r = 0; r < config.num_workers; ++r) {
    auto impl =
        std::make_unique<client::Worker>(config, r, c.context.get(), plan.worker_endpoints[r]);
    impl->SetResumeClock(resume_clock);
    impl->SetDeviceOrdinal(ordinals[r]);
    c.impls.push_back(impl.get());
    c.workers.push_back(internal::GeePSAccess::Make(std::move(impl)));
  }
  return cluster;
}

int EmbeddedCluster::num_workers() const { return impl_->config.num_workers; }
int EmbeddedCluster::num_shards() const { return impl_->config.num_shards; }
const Config& EmbeddedCluster::config() const { return impl_->config; }
GeePS* EmbeddedCluster::worker(int rank) {
  if (rank < 0 || rank >= static_cast<int>(impl_->workers.size())) return nullptr;
  return impl_->workers[rank].get();
}

Status EmbeddedCluster::RunWorkers(const std::function<Status(GeePS&)>& fn) {
  // Held by this call: its last steps may come after the destructor has
  // seen it end.
  const std::shared_ptr<RunGate> gate = impl_->gate;
  {
    common::MutexLock lock(&gate->mu);
    if (gate->destroying)
      return FailedPreconditionError("EmbeddedCluster::RunWorkers while the cluster is destroyed");
    ++gate->running;
  }
  const Status result = RunWorkersOnThreads(fn);
  common::MutexLock lock(&gate->mu);
  --gate->running;
  gate->cv.notify_all();
  return result;
}

namespace {

// fn(ps), with an exception it throws as a kUnknown saying what it was.
Status CallWorkerFunction(const std::function<Status(GeePS&)>& fn, GeePS& ps) {
  try {
    return fn(ps);
  } catch (const std::exception& e) {
    int failed = 0;
    char* name = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &failed);
    const std::string type = failed == 0 && name != nullptr ? name : typeid(e).name();
    std::free(name);
    return UnknownError("its function threw " + type + ": " + e.what());
  } catch (...) {
    return UnknownError("its function threw an exception that is not a std::exception");
  }
}

}  // namespace

Status EmbeddedCluster::RunWorkersOnThreads(const std::function<Status(GeePS&)>& fn) {
  const int n = num_workers();
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (client::Worker* w : impl_->impls) w->ClearEndedPeers();
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      running_worker_of = this;
      results[r] = CallWorkerFunction(fn, *impl_->workers[r]);
      if (results[r].ok()) {
        // Its clocks stop here: a peer that waits for a later one fails at
        // once, naming it, instead of at its deadline.
        const int64_t clock = impl_->impls[r]->clock();
        for (int other = 0; other < n; ++other)
          if (other != r) impl_->impls[other]->PeerEnded(r, clock);
        return;
      }
      // A failed worker stops, and its peers fail at once instead of waiting
      // for its clocks until their deadline.
      impl_->workers[r]->Shutdown().ok();
      for (int other = 0; other < n; ++other) {
        if (other == r) continue;
        impl_->impls[other]->FailPeers(
            UnavailableError("worker " + std::to_string(r) + " failed: " + results[r].ToString()));
      }
    });
  }
  for (auto& t : threads) t.join();
  // The first failure is the cause; the peers' kUnavailable follow from it.
  int first = -1;
  for (int r = 0; r < n; ++r) {
    if (results[r].ok()) continue;
    if (first < 0 || (results[first].code() == StatusCode::kUnavailable &&
                      results[r].code() != StatusCode::kUnavailable))
      first = r;
  }
  if (first >= 0)
    return Status(results[first].code(),
                  "worker " + std::to_string(first) + ": " + results[first].message());
  return Status::OK();
}

RelayStats EmbeddedCluster::GetRelayStats(int machine) const {
  if (machine < 0 || machine >= static_cast<int>(impl_->relays.size())) return RelayStats();
  return impl_->relays[machine]->GetStats();
}

ShardStats EmbeddedCluster::GetShardStats(int shard) const {
  ShardStats total;
  total.shard = shard;
  const int channels = impl_->config.num_channels;
  if (shard < 0 || shard >= impl_->config.num_shards) return total;
  for (int k = 0; k < channels; ++k) total.Add(impl_->partitions[shard * channels + k]->GetStats());
  return total;
}

int64_t EmbeddedCluster::checkpoints_written() const {
  int64_t n = 0;
  for (const auto& p : impl_->partitions) n += p->checkpoints_written();
  return n;
}

std::string internal::EmbeddedClusterAccess::ShardEndpoint(int shard, int channel) {
  return cluster::PartitionEndpoint(shard, channel);
}

transport::Context* internal::EmbeddedClusterAccess::ZmqContext(EmbeddedCluster& cluster) {
  return cluster.impl_->context.get();
}

Status EmbeddedCluster::Shutdown() {
  common::MutexLock lock(&impl_->shutdown_mu);
  if (impl_->shut_down) return Status::OK();
  impl_->shut_down = true;
  Status first;
  for (auto& w : impl_->workers) {
    Status st = w->Shutdown();
    if (first.ok() && !st.ok()) first = st;
  }
  // What the workers sent last passes the relays before the partitions stop.
  for (auto& r : impl_->relays) r->Stop();
  for (auto& p : impl_->partitions) p->Stop();
  return first;
}

}  // namespace geeps
