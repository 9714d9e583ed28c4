// cluster::PlanProcess: what one process of a multi-process job connects
// to, from the job's layout alone (src/cluster/job_plan.h). Table-driven:
// each case is a layout (ranks with roles, machines and shard endpoints)
// and what one rank's plan must say. cluster::PlanEmbedded: the same for
// every worker and relay of an embedded cluster, table-driven by shape.
#include "cluster/job_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace geeps {
namespace {

using cluster::PlanProcess;
using cluster::ProcessPlan;
using transport::JobLayout;
using transport::PeerInfo;

constexpr int kPort = 29500;  // the coordinator's
const char* const kDir = "/run/geeps";

struct Rank {
  ProcessRole role;
  std::string machine;
};

// A layout of `ranks`; each rank with a shard has `channels` endpoints
// "tcp://r<rank>:<channel>".
JobLayout Layout(const std::vector<Rank>& ranks, int channels) {
  std::vector<PeerInfo> peers;
  for (size_t r = 0; r < ranks.size(); ++r) {
    PeerInfo p;
    p.rank = static_cast<int>(r);
    p.role = ranks[r].role;
    p.machine = ranks[r].machine;
    if (p.role != ProcessRole::kWorker)
      for (int k = 0; k < channels; ++k)
        p.endpoints.push_back("tcp://r" + std::to_string(r) + ":" + std::to_string(k));
    peers.push_back(p);
  }
  return transport::MakeLayout(std::move(peers));
}

Config Job(const JobLayout& layout, int channels, bool aggregate) {
  Config c;
  c.num_workers = layout.num_workers;
  c.num_shards = layout.num_shards;
  c.num_channels = channels;
  c.aggregate_per_machine = aggregate;
  return c;
}

std::string Relay(int leader, int partition) {
  return std::string(kDir) + "/geeps-relay-" + std::to_string(kPort) + "-w" +
         std::to_string(leader) + "-p" + std::to_string(partition) + ".sock";
}

constexpr ProcessRole kBoth = ProcessRole::kWorkerAndServer;
constexpr ProcessRole kWorker = ProcessRole::kWorker;
constexpr ProcessRole kServer = ProcessRole::kServer;

struct Case {
  const char* name;
  std::vector<Rank> ranks;
  int channels;
  bool aggregate;
  int rank;  // whose plan
  // Expected:
  std::vector<std::string> partition_endpoints;
  std::vector<std::string> worker_endpoints;
  std::vector<bool> participants;
  bool relay;
  int machine_index;               // with relay
  std::vector<int> relay_workers;  // with relay
};

TEST(JobPlanTest, PlansFollowTheLayout) {
  const std::vector<Case> cases = {
      {"every rank both, no aggregation",
       {{kBoth, ""}, {kBoth, ""}},
       1,
       false,
       1,
       {"tcp://r0:0", "tcp://r1:0"},
       {"tcp://r0:0", "tcp://r1:0"},
       {},
       false,
       0,
       {}},
      {"partitions by shard, then channel; servers only among them",
       {{kWorker, ""}, {kServer, ""}, {kServer, ""}},
       2,
       false,
       0,
       {"tcp://r1:0", "tcp://r1:1", "tcp://r2:0", "tcp://r2:1"},
       {"tcp://r1:0", "tcp://r1:1", "tcp://r2:0", "tcp://r2:1"},
       {},
       false,
       0,
       {}},
      {"aggregation: the machine's first worker leads and runs the relay",
       {{kServer, "m0"}, {kWorker, "b"}, {kWorker, "a"}, {kWorker, "b"}},
       1,
       true,
       1,
       {"tcp://r0:0"},
       {"ipc://" + Relay(0, 0)},
       {true, true, false},
       true,
       1,
       {0, 2}},
      {"aggregation: another worker of the machine connects to its leader's relay",
       {{kServer, "m0"}, {kWorker, "b"}, {kWorker, "a"}, {kWorker, "b"}},
       1,
       true,
       3,
       {"tcp://r0:0"},
       {"ipc://" + Relay(0, 0)},
       {true, true, false},
       false,
       0,
       {}},
      {"aggregation: a machine of one worker relays for itself",
       {{kServer, "m0"}, {kWorker, "b"}, {kWorker, "a"}, {kWorker, "b"}},
       1,
       true,
       2,
       {"tcp://r0:0"},
       {"ipc://" + Relay(1, 0)},
       {true, true, false},
       true,
       0,
       {1}},
      {"aggregation: a server-only rank plans no relay but counts the leaders",
       {{kServer, ""}, {kWorker, "a"}, {kWorker, "a"}},
       2,
       true,
       0,
       {"tcp://r0:0", "tcp://r0:1"},
       {"tcp://r0:0", "tcp://r0:1"},
       {true, false},
       false,
       0,
       {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const JobLayout layout = Layout(c.ranks, c.channels);
    const Config job = Job(layout, c.channels, c.aggregate);
    const bool has_worker = c.ranks[c.rank].role != kServer;
    StatusOr<ProcessPlan> plan = PlanProcess(job, layout, c.rank, has_worker, kDir, kPort);
    ASSERT_OK(plan.status());
    EXPECT_EQ(plan->partition_endpoints, c.partition_endpoints);
    EXPECT_EQ(plan->worker_endpoints, c.worker_endpoints);
    EXPECT_EQ(plan->participants, c.participants);
    ASSERT_EQ(plan->relay.has_value(), c.relay);
    if (!c.relay) continue;
    EXPECT_EQ(plan->relay->machine_index, c.machine_index);
    EXPECT_EQ(plan->relay->workers, c.relay_workers);
    ASSERT_EQ(plan->relay->ipc_paths.size(), c.partition_endpoints.size());
    EXPECT_EQ("ipc://" + plan->relay->ipc_paths[0], plan->worker_endpoints[0]);
  }
}

// A worker whose machine the layout does not list (a coordinator that
// dropped it) is an internal error naming the machine, not a crash.
TEST(JobPlanTest, AMachineMissingFromTheLayoutIsAnInternalError) {
  JobLayout layout = Layout({{kServer, "m0"}, {kWorker, "a"}}, 1);
  const Config job = Job(layout, 1, true);
  layout.worker_index[1] = -1;  // rank 1 is no worker in this layout
  StatusOr<ProcessPlan> plan = PlanProcess(job, layout, 1, /*has_worker=*/true, kDir, kPort);
  ASSERT_EQ(plan.status().code(), StatusCode::kInternal) << plan.status();
  EXPECT_NE(plan.status().message().find("machine 'a'"), std::string::npos) << plan.status();
}

// Embedded clusters: workers, shards, channels, workers per machine (-1:
// no aggregation, 0: all in one machine), and the machines' sizes.
struct EmbeddedCase {
  int workers, shards, channels, per_machine;
  std::vector<size_t> machines;
};

void PrintTo(const EmbeddedCase& c, std::ostream* os) {
  *os << c.workers << " workers, " << c.shards << " shards, " << c.channels << " channels, "
      << c.per_machine << " per machine";
}

class EmbeddedPlanTest : public ::testing::TestWithParam<EmbeddedCase> {};

TEST_P(EmbeddedPlanTest, EveryWorkerReachesEveryPartitionOnce) {
  const EmbeddedCase& c = GetParam();
  Config config;
  config.num_workers = c.workers;
  config.num_shards = c.shards;
  config.num_channels = c.channels;
  config.tables = {{"t", 10, 1}};
  config.aggregate_per_machine = c.per_machine >= 0;
  config.workers_per_machine = std::max(0, c.per_machine);
  ASSERT_OK(ValidateConfig(config));
  const cluster::EmbeddedPlan plan = cluster::PlanEmbedded(config);
  const size_t partitions = static_cast<size_t>(c.shards) * c.channels;
  // Partition p is shard p / C's channel p % C, each endpoint distinct.
  ASSERT_EQ(plan.partition_endpoints.size(), partitions);
  std::set<std::string> names;
  for (size_t p = 0; p < partitions; ++p) {
    EXPECT_EQ(plan.partition_endpoints[p],
              cluster::PartitionEndpoint(static_cast<int>(p) / c.channels,
                                         static_cast<int>(p) % c.channels));
    EXPECT_EQ(plan.partition_endpoints[p].rfind("inproc://", 0), 0u);
    names.insert(plan.partition_endpoints[p]);
  }
  // Relays: the machines' sizes, consecutive ranks covering every worker.
  ASSERT_EQ(plan.relays.size(), c.machines.size());
  int next = 0;
  for (size_t m = 0; m < plan.relays.size(); ++m) {
    const cluster::EmbeddedPlan::Relay& relay = plan.relays[m];
    ASSERT_EQ(relay.workers.size(), c.machines[m]) << "machine " << m;
    for (int w : relay.workers) EXPECT_EQ(w, next++) << "machine " << m;
    ASSERT_EQ(relay.local_endpoints.size(), partitions);
    for (const std::string& e : relay.local_endpoints) names.insert(e);
  }
  if (!plan.relays.empty()) EXPECT_EQ(next, c.workers);
  // Every endpoint named once: no relay shares a name with another or a
  // partition.
  EXPECT_EQ(names.size(), partitions * (1 + plan.relays.size()));
  // Each worker: its machine's relay, or the partitions themselves.
  ASSERT_EQ(plan.worker_endpoints.size(), static_cast<size_t>(c.workers));
  for (int w = 0; w < c.workers; ++w) {
    if (plan.relays.empty()) {
      EXPECT_EQ(plan.worker_endpoints[w], plan.partition_endpoints) << "worker " << w;
      continue;
    }
    int machine = 0;
    for (size_t m = 0; m < plan.relays.size(); ++m)
      for (int x : plan.relays[m].workers)
        if (x == w) machine = static_cast<int>(m);
    EXPECT_EQ(plan.worker_endpoints[w], plan.relays[machine].local_endpoints) << "worker " << w;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmbeddedPlanTest,
    ::testing::Values(EmbeddedCase{1, 1, 1, -1, {}}, EmbeddedCase{3, 2, 2, -1, {}},
                      EmbeddedCase{4, 2, 1, 2, {2, 2}}, EmbeddedCase{5, 2, 2, 2, {2, 2, 1}},
                      EmbeddedCase{4, 3, 2, 0, {4}}, EmbeddedCase{3, 1, 3, 1, {1, 1, 1}}),
    [](const ::testing::TestParamInfo<EmbeddedCase>& info) {
      const EmbeddedCase& c = info.param;
      return std::to_string(c.workers) + "w" + std::to_string(c.shards) + "s" +
             std::to_string(c.channels) + "c" +
             (c.per_machine >= 0 ? std::to_string(c.per_machine) + "m" : "");
    });

// The multi-process job's own endpoints, named in job_plan.cc.
TEST(JobEndpointsTest, CoordinatorShardsAndAdvertisedAddresses) {
  cluster::HostPort coordinator;
  coordinator.host = "10.0.0.7";
  coordinator.port = 29500;
  EXPECT_EQ(cluster::CoordinatorEndpoint(coordinator), "tcp://10.0.0.7:29500");
  EXPECT_EQ(cluster::ShardIpcPath("/run/x", 4242, 3, 1), "/run/x/geeps-4242-r3-c1.sock");
  EXPECT_NE(cluster::ShardIpcPath("/run/x", 4242, 3, 1),
            cluster::ShardIpcPath("/run/x", 4243, 3, 1))
      << "two jobs' processes must not share a socket file";
  EXPECT_EQ(cluster::ShardTcpBind("0.0.0.0", 0), "tcp://0.0.0.0:*");
  EXPECT_EQ(cluster::ShardTcpBind("127.0.0.1", 30001), "tcp://127.0.0.1:30001");
  EXPECT_EQ(cluster::AdvertisedEndpoint("tcp://0.0.0.0:40123", "node7"), "tcp://node7:40123");
  EXPECT_EQ(cluster::AdvertisedEndpoint("tcp://127.0.0.1:40123", "node7"), "tcp://127.0.0.1:40123");
  EXPECT_EQ(cluster::AdvertisedEndpoint("ipc:///run/x/a.sock", "node7"), "ipc:///run/x/a.sock");
}

}  // namespace
}  // namespace geeps
