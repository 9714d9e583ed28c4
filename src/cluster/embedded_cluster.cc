#include "geeps/embedded_cluster.h"

#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "client/worker.h"
#include "server/shard_channel.h"

namespace geeps {

struct EmbeddedCluster::Impl {
  Config config;
  // Declared first so that it is destroyed last, after every socket.
  std::unique_ptr<zmq::context_t> context;
  std::vector<std::unique_ptr<server::ShardChannel>> partitions;  // p = s*C + k
  std::vector<std::unique_ptr<GeePS>> workers;
  std::mutex shutdown_mu;
  bool shut_down = false;
};

EmbeddedCluster::EmbeddedCluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EmbeddedCluster::~EmbeddedCluster() { Shutdown().ok(); }

StatusOr<std::unique_ptr<EmbeddedCluster>> EmbeddedCluster::Start(const Config& config) {
  GEEPS_RETURN_IF_ERROR(ValidateConfig(config));
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  try {
    impl->context = std::make_unique<zmq::context_t>(1);
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string("cannot create a ZeroMQ context: ") + e.what());
  }
  std::unique_ptr<EmbeddedCluster> cluster(new EmbeddedCluster(std::move(impl)));
  Impl& c = *cluster->impl_;
  const int num_partitions = config.num_shards * config.num_channels;
  std::vector<std::string> endpoints;
  for (int p = 0; p < num_partitions; ++p) {
    endpoints.push_back(cluster->ShardEndpoint(p / config.num_channels, p % config.num_channels));
    c.partitions.push_back(
        std::make_unique<server::ShardChannel>(c.context.get(), config, p, endpoints.back()));
    GEEPS_RETURN_IF_ERROR(c.partitions.back()->Start());
  }
  for (int r = 0; r < config.num_workers; ++r) {
    c.workers.push_back(std::make_unique<GeePS>(
        std::make_unique<client::Worker>(config, r, c.context.get(), endpoints)));
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
  const int n = num_workers();
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      results[r] = fn(*impl_->workers[r]);
      // A failed worker stops, so that its peers fail fast instead of waiting.
      if (!results[r].ok()) impl_->workers[r]->Shutdown().ok();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!results[r].ok())
      return Status(results[r].code(), "worker " + std::to_string(r) + ": " + results[r].message());
  }
  return Status::OK();
}

ShardStats EmbeddedCluster::GetShardStats(int shard) const {
  ShardStats total;
  total.shard = shard;
  const int channels = impl_->config.num_channels;
  if (shard < 0 || shard >= impl_->config.num_shards) return total;
  for (int k = 0; k < channels; ++k) {
    ShardStats s = impl_->partitions[shard * channels + k]->GetStats();
    total.updates_applied += s.updates_applied;
    total.rows_applied += s.rows_applied;
    total.pushes_sent += s.pushes_sent;
    total.bytes_received += s.bytes_received;
    total.bytes_sent += s.bytes_sent;
    total.frames_dropped += s.frames_dropped;
  }
  return total;
}

std::string EmbeddedCluster::ShardEndpoint(int shard, int channel) const {
  return "inproc://geeps-shard-" + std::to_string(shard) + "-channel-" + std::to_string(channel);
}

void* EmbeddedCluster::zmq_context() { return impl_->context.get(); }

Status EmbeddedCluster::Shutdown() {
  std::lock_guard<std::mutex> lock(impl_->shutdown_mu);
  if (impl_->shut_down) return Status::OK();
  impl_->shut_down = true;
  Status first;
  for (auto& w : impl_->workers) {
    Status st = w->Shutdown();
    if (first.ok() && !st.ok()) first = st;
  }
  for (auto& p : impl_->partitions) p->Stop();
  return first;
}

}  // namespace geeps
