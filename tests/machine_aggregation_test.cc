// Machine-level aggregation (Config::aggregate_per_machine): the workers of a
// machine send one summed update per clock and partition through their
// machine's relay, which shares each push with them. The exact-sum suites
// run it over several shapes (cluster_test.cc, "InprocAggregated") and the
// deterministic suite checks its order of additions
// (deterministic_test.cc); this file checks the config, what the shards see
// and a stalled worker inside a machine.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "exact_sum.h"
#include "geeps/embedded_cluster.h"
#include "geeps/process.h"
#include "test_cluster.h"
#include "test_paths.h"
#include "test_util.h"
#include "transport/control_messages.h"

namespace geeps {
namespace {

Config Aggregated(int workers, int per_machine) {
  Config c = testing::MakeConfig({workers, 2, 2});
  c.aggregate_per_machine = true;
  c.workers_per_machine = per_machine;
  return c;
}

TEST(MachineAggregationConfigTest, BadSettingsAreNamed) {
  Config c = Aggregated(4, 5);
  Status st = ValidateConfig(c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("workers_per_machine must be in [0, num_workers = 4], got 5"),
            std::string::npos)
      << st;
  c.workers_per_machine = -1;
  EXPECT_EQ(ValidateConfig(c).code(), StatusCode::kInvalidArgument);
  c = Aggregated(4, 2);
  c.aggregate_per_machine = false;
  st = ValidateConfig(c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("aggregate_per_machine is off"), std::string::npos) << st;
  EXPECT_OK(ValidateConfig(Aggregated(4, 2)));
  EXPECT_OK(ValidateConfig(Aggregated(4, 0)));
  EXPECT_OK(ValidateConfig(Aggregated(5, 2)));  // machines of 2, 2 and 1
}

TEST(MachineAggregationConfigTest, EnvironmentSetsIt) {
  Config c = testing::MakeConfig({4, 1, 1});
  {
    testing::ScopedEnv on("GEEPS_AGGREGATE_PER_MACHINE", "1");
    testing::ScopedEnv size("GEEPS_WORKERS_PER_MACHINE", "2");
    ASSERT_OK(ApplyEnvironment(&c));
  }
  EXPECT_TRUE(c.aggregate_per_machine);
  EXPECT_EQ(c.workers_per_machine, 2);
  testing::ScopedEnv bad("GEEPS_AGGREGATE_PER_MACHINE", "yes");
  const Status st = ApplyEnvironment(&c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("GEEPS_AGGREGATE_PER_MACHINE"), std::string::npos) << st;
}

// A multi-process job finds its machines from their names, never from
// workers_per_machine; a bad machine name is named.
TEST(MachineAggregationConfigTest, ProcessesRefuseWorkersPerMachineAndBadNames) {
  ProcessOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.coordinator = "127.0.0.1:1";
  auto p = Process::Join(Aggregated(1, 1), o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("finds its machines from ProcessOptions::machine"),
            std::string::npos)
      << p.status();
  o.machine = "two words";
  p = Process::Join(Aggregated(1, 0), o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("machine name 'two words'"), std::string::npos) << p.status();
  testing::ScopedEnv bad("GEEPS_MACHINE", "a/b");
  ProcessOptions from_env;
  const Status st = ApplyEnvironment(&from_env);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("GEEPS_MACHINE='a/b'"), std::string::npos) << st;
}

// The machine names travel in HELLO and WELCOME ("-": none).
TEST(MachineAggregationConfigTest, MachineNamesTravelInTheRendezvous) {
  transport::PeerInfo a;
  a.rank = 0;
  a.endpoints = {"tcp://h:1"};
  a.machine = "node-0.rack:1";
  transport::PeerInfo b;
  b.rank = 1;
  b.role = ProcessRole::kServer;
  b.endpoints = {"tcp://h:2"};
  const transport::JobLayout layout = transport::MakeLayout({a, b});
  auto back = transport::DecodeWelcome(transport::EncodeWelcome(layout), 2, 1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->peers[0].machine, "node-0.rack:1");
  EXPECT_EQ(back->peers[1].machine, "");
  auto hello = transport::DecodeHello(transport::EncodeHello(b, 2, 7), 1);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->peer.machine, "");
  EXPECT_FALSE(transport::ValidMachineName(""));
  EXPECT_FALSE(transport::ValidMachineName("a b"));
  EXPECT_FALSE(transport::ValidMachineName("-"));  // "none" on the wire
  EXPECT_FALSE(transport::ValidMachineName(std::string(256, 'a')));
  EXPECT_TRUE(transport::ValidMachineName(std::string(255, 'a')));
}

struct RunCounts {
  int64_t updates_applied = 0;
  int64_t pushes_sent = 0;
  int64_t frames_dropped = 0;
  std::vector<int64_t> pushes_installed;
  RelayStats relays;         // summed over the machines' relays (machine: how many)
  ShardStats shards_at_end;  // summed, read after the shutdown
};

// The exact-sum workload (every read checked exactly) on `c`.
RunCounts RunExactSums(const Config& c, int iterations) {
  RunCounts out;
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return out;
  EXPECT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    return testing::RunWorker(ps, c, 0, iterations, std::chrono::milliseconds(0));
  }));
  for (int s = 0; s < c.num_shards; ++s) {
    const ShardStats st = (*cluster)->GetShardStats(s);
    out.updates_applied += st.updates_applied;
    out.pushes_sent += st.pushes_sent;
    out.frames_dropped += st.frames_dropped;
  }
  for (int w = 0; w < c.num_workers; ++w)
    out.pushes_installed.push_back((*cluster)->worker(w)->GetStats().pushes_installed);
  EXPECT_OK((*cluster)->Shutdown());
  // After the shutdown, when every relay and shard has stopped: a relay
  // passes on what its members sent before it stops, and the partitions
  // stop after the relays.
  for (int s = 0; s < c.num_shards; ++s) out.shards_at_end.Add((*cluster)->GetShardStats(s));
  out.relays.machine = 0;
  for (int m = 0; m <= c.num_workers; ++m) {
    const RelayStats r = (*cluster)->GetRelayStats(m);
    if (r.machine < 0) break;
    EXPECT_EQ(r.machine, m);
    ++out.relays.machine;
    out.relays.updates_up += r.updates_up;
    out.relays.pushes_shared += r.pushes_shared;
    out.relays.frames_dropped += r.frames_dropped;
  }
  return out;
}

// 4 workers in 2 machines: the shards apply half the updates and send half
// the pushes of the same job without aggregation, and every worker still
// installs every push it did (the relay shares each with its members).
TEST(MachineAggregationTest, ShardsSeeOneParticipantPerMachine) {
  Config plain = testing::MakeConfig({4, 2, 2});
  const RunCounts p = RunExactSums(plain, 5);
  const RunCounts a = RunExactSums(Aggregated(4, 2), 5);
  EXPECT_EQ(p.frames_dropped, 0);
  EXPECT_EQ(a.frames_dropped, 0);
  ASSERT_GT(p.updates_applied, 0);
  EXPECT_EQ(a.updates_applied * 2, p.updates_applied);
  EXPECT_EQ(a.pushes_sent * 2, p.pushes_sent);
  EXPECT_EQ(a.pushes_installed, p.pushes_installed);
  // The relays' counters (RelayStats): every update the shards applied
  // came summed from a relay, and every push they sent was shared.
  EXPECT_EQ(p.relays.machine, 0);  // no relay without aggregation
  EXPECT_EQ(a.relays.machine, 2);
  EXPECT_EQ(a.relays.updates_up, a.shards_at_end.updates_applied);
  // A push sent after its relay stopped is not shared.
  EXPECT_LE(a.relays.pushes_shared, a.shards_at_end.pushes_sent);
  EXPECT_GE(a.relays.pushes_shared, a.pushes_installed[0] + a.pushes_installed[2]);
  EXPECT_EQ(a.relays.frames_dropped, 0);
  // One machine of all four: a quarter.
  const RunCounts one = RunExactSums(Aggregated(4, 0), 5);
  EXPECT_EQ(one.updates_applied * 4, p.updates_applied);
  EXPECT_EQ(one.relays.machine, 1);
}

// The same over processes: 4 worker-and-shard processes named into 2
// machines over TCP, whose relays talk to the shards of other processes.
TEST(MachineAggregationTest, ProcessJobsSendOneUpdatePerMachine) {
  auto run = [](int per_machine) {
    testing::Workload w;
    w.shape = {4, 4, 1, per_machine};
    w.iterations = 5;
    const testing::ClusterResult r =
        testing::MakeCluster({testing::ClusterKind::kProcesses, "tcp"},
                             ::geeps::testing::Program(GEEPS_MULTIPROC_WORKER))
            ->Run(w);
    int64_t applied = 0;
    for (const testing::WorkerResult& wr : r.workers) {
      EXPECT_TRUE(wr.status.ok()) << wr.rank << ": " << wr.status << "\n" << r.logs;
      EXPECT_EQ(wr.iterations, 5) << r.logs;
    }
    for (const testing::ShardResult& s : r.shards) {
      EXPECT_EQ(s.frames_dropped, 0) << r.logs;
      applied += s.updates_applied;
    }
    EXPECT_TRUE(r.ipc_leftovers.empty()) << r.ipc_leftovers.size() << " relay files left";
    return applied;
  };
  const int64_t plain = run(-1);
  const int64_t aggregated = run(2);
  ASSERT_GT(plain, 0);
  EXPECT_EQ(aggregated * 2, plain);
}

// A worker of a machine that stops clocking holds its machine's sum back:
// the other workers' Reads time out naming the partition, and the relay's
// warning names the worker.
TEST(MachineAggregationTest, AStalledWorkerInsideAMachineIsNamed) {
  Config c = Aggregated(2, 2);
  c.num_shards = 1;
  c.num_channels = 1;
  c.timeout = std::chrono::milliseconds(4000);
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ::testing::internal::CaptureStderr();
  Status worker0;
  std::atomic<bool> worker0_done{false};
  const Status all = (*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(testing::Recorded rec, testing::Record(ps, c, 0));
    if (ps.rank() == 1) {
      // Stalls: never clocks again, and its function does not return
      // before worker 0's has (a return would end it, which the others
      // are told at once: misuse_test).
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!worker0_done.load() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return Status::OK();
    }
    for (int i = 0; i < 3; ++i) {
      for (TableId t = 0; t < c.tables.size(); ++t) {
        auto read = ps.Read(rec.reads[t]);
        if (!read.ok()) {
          worker0 = read.status();
          worker0_done.store(true);
          return read.status();
        }
        GEEPS_RETURN_IF_ERROR(ps.PostRead(rec.reads[t]));
      }
      for (TableId t = c.tables.size(); t-- > 0;) {  // as Record recorded them
        GEEPS_RETURN_IF_ERROR(ps.PreUpdate(rec.updates[t]).status());
        GEEPS_RETURN_IF_ERROR(ps.Update(rec.updates[t]));
      }
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    worker0_done.store(true);
    return Status::OK();
  });
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(all.ok());
  EXPECT_EQ(worker0.code(), StatusCode::kDeadlineExceeded) << worker0;
  EXPECT_NE(log.find("waits for the update of worker 1"), std::string::npos) << log;
}

}  // namespace
}  // namespace geeps
