// An embedded cluster: N workers and M server shards in one process, wired
// with ZeroMQ inproc:// sockets. The default for examples and tests.
#ifndef GEEPS_EMBEDDED_CLUSTER_H_
#define GEEPS_EMBEDDED_CLUSTER_H_

#include <functional>
#include <memory>

#include "geeps/config.h"
#include "geeps/export.h"
#include "geeps/geeps.h"
#include "geeps/stats.h"
#include "geeps/status.h"

namespace geeps {
namespace internal {
class EmbeddedClusterAccess;  // tests' access (src/cluster/embedded_cluster_testing.h)
}  // namespace internal

class GEEPS_EXPORT EmbeddedCluster {
 public:
  // Validates `config`, starts the shards' threads and makes the workers.
  static StatusOr<std::unique_ptr<EmbeddedCluster>> Start(const Config& config);
  ~EmbeddedCluster();  // Shutdown()
  EmbeddedCluster(const EmbeddedCluster&) = delete;
  EmbeddedCluster& operator=(const EmbeddedCluster&) = delete;

  // The config's worker and shard counts, and the config as started.
  int num_workers() const;
  int num_shards() const;
  const Config& config() const;
  // REQUIRES: 0 <= rank < num_workers(). Owned by the cluster.
  GeePS* worker(int rank);

  // Runs `fn(worker)` for every worker, each on its own thread, and joins
  // them. Returns the cause of a failure as "worker <rank>: <message>" with
  // its code: the first failed worker by rank whose error is not a
  // kUnavailable that the failure of another caused. When a worker fails,
  // it is shut down and the others' calls fail at once (kUnavailable naming
  // it). An exception thrown by `fn` is caught and is that worker's failure
  // (kUnknown with the exception's type and what()). A worker whose `fn`
  // returns OK while the others still iterate makes a Read or Sync of
  // theirs that needs its later clocks fail at once (kFailedPrecondition
  // naming it and the clocks it completed).
  //
  // Destroy the cluster only after RunWorkers has returned. A cluster
  // destroyed while it runs (an exception unwinding the caller) shuts its
  // workers down, so that the functions' calls fail (kCancelled,
  // kFailedPrecondition), and waits for the functions to return before it
  // frees anything; a function that does not return within Config::timeout
  // plus 5 s, or a destruction from inside a worker function, ends the
  // process with a message (std::abort) rather than a crash.
  Status RunWorkers(const std::function<Status(GeePS&)>& fn);

  // Shard `shard`'s counters, summed over its channels (zeros, with the
  // given index, for a shard out of range). Any thread.
  ShardStats GetShardStats(int shard) const;
  // Machine `machine`'s relay (with aggregate_per_machine; zeros and
  // machine -1 without, or for a machine out of range). Any thread.
  RelayStats GetRelayStats(int machine) const;
  // Checkpoint files the shards have written (Config::checkpoint_dir).
  int64_t checkpoints_written() const;

  // Shuts every worker down, then every shard; joins all threads. Idempotent.
  Status Shutdown();

 private:
  friend class internal::EmbeddedClusterAccess;
  struct Impl;
  explicit EmbeddedCluster(std::unique_ptr<Impl> impl);
  Status RunWorkersOnThreads(const std::function<Status(GeePS&)>& fn);
  std::unique_ptr<Impl> impl_;
};

}  // namespace geeps

#endif  // GEEPS_EMBEDDED_CLUSTER_H_
