// What tests (and only tests) reach inside an EmbeddedCluster for: its
// ZeroMQ context and the inproc endpoints of its shards' channels, to connect
// sockets of their own (malformed frames, foreign peers). Not installed.
#ifndef GEEPS_CLUSTER_EMBEDDED_CLUSTER_TESTING_H_
#define GEEPS_CLUSTER_EMBEDDED_CLUSTER_TESTING_H_

#include <string>

#include "geeps/embedded_cluster.h"
#include "transport/context.h"

namespace geeps {
namespace internal {

class EmbeddedClusterAccess {
 public:
  // The cluster's ZeroMQ context; every inproc endpoint lives in it.
  static transport::Context* ZmqContext(EmbeddedCluster& cluster);
  // The inproc endpoint of channel `channel` of shard `shard`.
  static std::string ShardEndpoint(int shard, int channel);
};

}  // namespace internal
}  // namespace geeps

#endif  // GEEPS_CLUSTER_EMBEDDED_CLUSTER_TESTING_H_
