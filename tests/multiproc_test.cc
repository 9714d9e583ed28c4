// Multi-process jobs on loopback: bootstrap from each launcher's
// environment, geeps_launch and mpirun, server-only and worker-only roles,
// a rank that never starts, conflicting ranks or configs, a port in use,
// and foreign frames on a shard's port. The exact-sum, SSP, async and
// killed-rank suites over ipc:// and tcp:// run through the one test
// cluster in cluster_test.cc. Each process reports its result in a file of
// its own (multiproc_worker --result-dir, test_cluster.h), which is what
// these tests check; the logs are only shown when one fails.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "process_util.h"
#include "test_cluster.h"
#include "test_paths.h"

namespace {

using namespace geeps::testing;  // NOLINT: process helpers
using std::chrono::milliseconds;
using std::chrono::steady_clock;

Env BaseEnv(int port) {
  return {{"GEEPS_COORDINATOR", "127.0.0.1:" + std::to_string(port)},
          {"GEEPS_TIMEOUT_MS", "20000"},
          {"GEEPS_HEARTBEAT_TIMEOUT_MS", "2000"}};
}

// A folder for the processes' result files, removed with it.
struct ResultDir {
  ResultDir() : path(TempDir("results")) {}
  ~ResultDir() { RemoveDir(path); }
  std::string path;
};

// Every one of the `n` processes reported success in `dir`, and the
// workers among them are exactly 0..workers-1.
void ExpectAllExact(const std::string& dir, int n, int workers, const std::string& logs) {
  std::vector<int> seen(workers, 0);
  for (int r = 0; r < n; ++r) {
    const ProcessReport rep = ReadProcessReport(dir, r);
    ASSERT_TRUE(rep.complete) << "rank " << r << " reported nothing\n" << logs;
    EXPECT_OK(rep.status);
    if (rep.worker < 0) continue;
    ASSERT_LT(rep.worker, workers) << logs;
    ++seen[rep.worker];
    EXPECT_EQ(rep.iterations, 8) << "rank " << r;  // multiproc_worker's default
  }
  for (int w = 0; w < workers; ++w) EXPECT_EQ(seen[w], 1) << "worker " << w << "\n" << logs;
}

void ExpectAllExact(const std::vector<Child>& children, const std::string& dir, int workers) {
  for (const Child& c : children) EXPECT_EQ(c.status, 0) << Logs(children);
  ExpectAllExact(dir, static_cast<int>(children.size()), workers, Logs(children));
}

// Whether something accepts TCP connections on 127.0.0.1:`port` within
// `limit` (polled every millisecond; a connection that is closed at once
// is nothing to a ZeroMQ socket).
bool WaitForListener(int port, milliseconds limit) {
  const auto deadline = steady_clock::now() + limit;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    const bool up = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    if (fd >= 0) close(fd);
    if (up) return true;
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
}

// Runs `n` ranks with GEEPS_RANK/GEEPS_WORLD_SIZE and `extra` variables.
std::vector<Child> RunRanks(int n, const Env& extra, const std::vector<std::string>& args = {},
                            milliseconds limit = milliseconds(60000), int world = -1) {
  const int port = FreePort();
  std::vector<Child> children;
  for (int r = 0; r < n; ++r) {
    Env env = BaseEnv(port);
    env["GEEPS_RANK"] = std::to_string(r);
    env["GEEPS_WORLD_SIZE"] = std::to_string(world > 0 ? world : n);
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {::geeps::testing::Program(GEEPS_MULTIPROC_WORKER)};
    argv.insert(argv.end(), args.begin(), args.end());
    children.push_back(Spawn(argv, env));
  }
  EXPECT_TRUE(WaitAll(children, limit)) << Logs(children);
  return children;
}

// Rank 0 server only, rank 1 worker only, rank 2 both: 2 workers, 2 shards.
TEST(MultiProcessTest, ServerOnlyAndWorkerOnlyRoles) {
  const int port = FreePort();
  const char* roles[] = {"server", "worker", "both"};
  ResultDir results;
  std::vector<Child> children;
  for (int r = 0; r < 3; ++r) {
    Env env = BaseEnv(port);
    env["GEEPS_RANK"] = std::to_string(r);
    env["GEEPS_WORLD_SIZE"] = "3";
    env["GEEPS_ROLE"] = roles[r];
    children.push_back(Spawn(
        {::geeps::testing::Program(GEEPS_MULTIPROC_WORKER), "--result-dir", results.path}, env));
  }
  ASSERT_TRUE(WaitAll(children, milliseconds(60000))) << Logs(children);
  ExpectAllExact(children, results.path, 2);
  // Each process's shard statistics name its own shard: the two shards are
  // 0 and 1, and the worker-only rank has none; the server-only rank has
  // no worker.
  const ProcessReport server = ReadProcessReport(results.path, 0);
  const ProcessReport worker = ReadProcessReport(results.path, 1);
  const ProcessReport both = ReadProcessReport(results.path, 2);
  EXPECT_EQ(server.worker, -1);
  EXPECT_GE(worker.worker, 0);
  EXPECT_GE(both.worker, 0);
  EXPECT_EQ(worker.shard, -1);
  EXPECT_TRUE((server.shard == 0 && both.shard == 1) || (server.shard == 1 && both.shard == 0))
      << "shards " << server.shard << " and " << both.shard << "\n"
      << Logs(children);
}

TEST(BootstrapTest, OpenMpiVariables) {
  const int port = FreePort();
  ResultDir results;
  std::vector<Child> children;
  for (int r = 0; r < 2; ++r) {
    Env env = BaseEnv(port);
    env["OMPI_COMM_WORLD_RANK"] = std::to_string(r);
    env["OMPI_COMM_WORLD_SIZE"] = "2";
    env["OMPI_COMM_WORLD_LOCAL_RANK"] = std::to_string(r);
    children.push_back(Spawn(
        {::geeps::testing::Program(GEEPS_MULTIPROC_WORKER), "--result-dir", results.path}, env));
  }
  ASSERT_TRUE(WaitAll(children, milliseconds(60000))) << Logs(children);
  ExpectAllExact(children, results.path, 2);
}

TEST(BootstrapTest, SlurmVariables) {
  const int port = FreePort();
  ResultDir results;
  std::vector<Child> children;
  for (int r = 0; r < 2; ++r) {
    Env env = BaseEnv(port);
    env["SLURM_PROCID"] = std::to_string(r);
    env["SLURM_NTASKS"] = "2";
    env["SLURM_LOCALID"] = std::to_string(r);
    children.push_back(Spawn(
        {::geeps::testing::Program(GEEPS_MULTIPROC_WORKER), "--result-dir", results.path}, env));
  }
  ASSERT_TRUE(WaitAll(children, milliseconds(60000))) << Logs(children);
  ExpectAllExact(children, results.path, 2);
}

#ifdef GEEPS_LAUNCH
TEST(BootstrapTest, GeepsLaunch) {
  Env env = {{"GEEPS_TIMEOUT_MS", "20000"}};
  ResultDir results;
  std::vector<Child> children = {Spawn({::geeps::testing::Program(GEEPS_LAUNCH), "-n", "3",
                                        ::geeps::testing::Program(GEEPS_MULTIPROC_WORKER),
                                        "--channels", "2", "--result-dir", results.path},
                                       env)};
  ASSERT_TRUE(WaitAll(children, milliseconds(60000))) << Logs(children);
  EXPECT_EQ(children[0].status, 0) << Logs(children);
  ExpectAllExact(results.path, 3, 3, Logs(children));
}
#endif

TEST(BootstrapTest, MpirunThreeProcesses) {
  if (access("/usr/bin/mpirun", X_OK) != 0)
    GTEST_SKIP() << "mpirun not found (scripts/setup.sh installs openmpi-bin)";
  const int port = FreePort();
  Env env = {{"GEEPS_COORDINATOR", "127.0.0.1:" + std::to_string(port)},
             {"GEEPS_TIMEOUT_MS", "20000"}};
  ResultDir results;
  std::vector<Child> children = {
      Spawn({"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3", "--mca",
             "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo", "-x",
             "GEEPS_COORDINATOR", "-x", "GEEPS_TIMEOUT_MS",
             ::geeps::testing::Program(GEEPS_MULTIPROC_WORKER), "--result-dir", results.path},
            env)};
  ASSERT_TRUE(WaitAll(children, milliseconds(90000))) << Logs(children);
  EXPECT_EQ(children[0].status, 0) << Logs(children);
  ExpectAllExact(results.path, 3, 3, Logs(children));
}

TEST(FailureTest, MissingRankAtStartTimesOutNamingIt) {
  const auto start = steady_clock::now();
  std::vector<Child> children =
      RunRanks(2, {{"GEEPS_TIMEOUT_MS", "1500"}}, {}, milliseconds(30000), /*world=*/3);
  const std::string logs = Logs(children);
  EXPECT_EQ(children[0].status, 1) << logs;  // kDeadlineExceeded on rank 0
  // kUnavailable (rank 0's ABORT), or kDeadlineExceeded when rank 1's own
  // timeout ends first (it started first): both name the missing rank.
  EXPECT_TRUE(children[1].status == 3 || children[1].status == 1) << logs;
  for (const Child& c : children)
    EXPECT_NE(ReadFile(c.log).find("rank 2 did not join"), std::string::npos) << logs;
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(15)) << logs;
}

// Two processes started as rank 1 of a 3-rank job, two as rank 0, or a
// process whose rank is outside rank 0's world size: every process is told
// why at once (the
// coordinator tells routing ids "r<rank>.<nonce>" apart). Before, ZeroMQ
// dropped the second process's messages and it waited 15 s for "no answer
// from the coordinator", the others until the start timeout.
TEST(FailureTest, ConflictingRanksAreToldAtOnce) {
  struct Case {
    std::vector<std::pair<int, int>> ranks;  // (GEEPS_RANK, GEEPS_WORLD_SIZE)
    std::string why;
  };
  // Two rank 0s: the second cannot bind the coordinator port, asks who holds
  // it, and both are told (the first once waited out its whole timeout).
  const Case cases[] = {{{{0, 3}, {1, 3}, {1, 3}}, "two processes started as rank 1"},
                        {{{0, 2}, {2, 3}}, "rank 2"},
                        {{{0, 2}, {0, 2}}, "two processes started as rank 0"}};
  for (const Case& k : cases) {
    const int port = FreePort();
    const auto start = steady_clock::now();
    std::vector<Child> children;
    for (const auto& [rank, world] : k.ranks) {
      Env env = BaseEnv(port);  // a 20 s start timeout
      env["GEEPS_RANK"] = std::to_string(rank);
      env["GEEPS_WORLD_SIZE"] = std::to_string(world);
      children.push_back(Spawn({::geeps::testing::Program(GEEPS_MULTIPROC_WORKER)}, env));
      // Rank 0 first: the others start once its coordinator listens (an
      // event, not a sleep).
      if (rank == 0) ASSERT_TRUE(WaitForListener(port, milliseconds(10000))) << Logs(children);
    }
    ASSERT_TRUE(WaitAll(children, milliseconds(30000))) << Logs(children);
    const std::string logs = Logs(children);
    for (const Child& c : children) {
      EXPECT_NE(c.status, 0) << logs;
      EXPECT_NE(ReadFile(c.log).find(k.why), std::string::npos) << logs;
    }
    EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(10)) << logs;
  }
}

// Without a coordinator a rank waits at most GEEPS_TIMEOUT_MS (the longest
// any call waits for a peer), then names the coordinator it waited for. It
// once waited the timeout plus 5 s.
TEST(FailureTest, NoCoordinatorFailsWithinTheTimeout) {
  Env env = BaseEnv(FreePort());
  env["GEEPS_TIMEOUT_MS"] = "1500";
  env["GEEPS_RANK"] = "1";
  env["GEEPS_WORLD_SIZE"] = "2";
  const auto start = steady_clock::now();
  std::vector<Child> children = {Spawn({::geeps::testing::Program(GEEPS_MULTIPROC_WORKER)}, env)};
  ASSERT_TRUE(WaitAll(children, milliseconds(30000))) << Logs(children);
  const auto took = steady_clock::now() - start;
  const std::string log = ReadFile(children[0].log);
  EXPECT_EQ(children[0].status, 1) << log;  // kDeadlineExceeded
  EXPECT_NE(log.find("no answer from the coordinator (rank 0)"), std::string::npos) << log;
  EXPECT_NE(log.find("within 1500 ms"), std::string::npos) << log;
  EXPECT_LT(took, milliseconds(5000)) << log;  // 1.5 s and the start; 6.5 s before
}

TEST(FailureTest, DifferentConfigsAreRefused) {
  const int port = FreePort();
  std::vector<Child> children;
  for (int r = 0; r < 2; ++r) {
    Env env = BaseEnv(port);
    env["GEEPS_RANK"] = std::to_string(r);
    env["GEEPS_WORLD_SIZE"] = "2";
    children.push_back(
        Spawn({::geeps::testing::Program(GEEPS_MULTIPROC_WORKER), "--channels", r == 0 ? "1" : "2"},
              env));
  }
  ASSERT_TRUE(WaitAll(children, milliseconds(30000))) << Logs(children);
  EXPECT_EQ(children[0].status, 1) << Logs(children);  // kInvalidArgument on rank 0
  EXPECT_EQ(children[1].status, 3) << Logs(children);  // kUnavailable (rank 0's ABORT)
  for (const Child& c : children) {
    EXPECT_NE(ReadFile(c.log).find("config differs from rank 0's: tables, channels"),
              std::string::npos)
        << Logs(children);
  }
}

TEST(FailureTest, CoordinatorPortInUseIsAClearError) {
  const int port = FreePort();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  // As FreePort's probe: a connection of an earlier test may have left the
  // port in TIME_WAIT, which only SO_REUSEADDR binds past. The listener
  // still holds the port against the coordinator's bind.
  const int one = 1;
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  Env env = BaseEnv(port);
  env["GEEPS_RANK"] = "0";
  env["GEEPS_WORLD_SIZE"] = "2";
  std::vector<Child> children = {Spawn({::geeps::testing::Program(GEEPS_MULTIPROC_WORKER)}, env)};
  ASSERT_TRUE(WaitAll(children, milliseconds(20000))) << Logs(children);
  close(fd);
  const std::string log = ReadFile(children[0].log);
  EXPECT_EQ(children[0].status, 3) << log;
  EXPECT_NE(log.find("cannot bind the coordinator"), std::string::npos) << log;
  EXPECT_NE(log.find("Address already in use"), std::string::npos) << log;
}

// Random bytes and truncated frames sent to a live shard's TCP port from a
// foreign socket never reach the shard: without the job token its
// handshake is refused (and counted); the sums stay exact. (Frames that do
// reach a shard malformed are dropped and counted: malformed_frame_test.)
TEST(FailureTest, ForeignFramesOnAShardPortAreRefused) {
  const int base = FreePortRange(4);
  ResultDir results;
  std::vector<Child> children;
  std::thread injector;
  {
    const int port = FreePort();
    for (int r = 0; r < 2; ++r) {
      Env env = BaseEnv(port);
      env["GEEPS_RANK"] = std::to_string(r);
      env["GEEPS_WORLD_SIZE"] = "2";
      env["GEEPS_BASE_PORT"] = std::to_string(base);
      children.push_back(Spawn({::geeps::testing::Program(GEEPS_MULTIPROC_WORKER), "--iterations",
                                "40", "--delay-ms", "10", "--result-dir", results.path},
                               env));
    }
  }
  // Nothing the injector does may block: a refused handshake can leave a
  // socket without a peer to send to, and ZeroMQ then waits in send or, for
  // what is queued, in the context's termination (this test once hung
  // there under a loaded machine). Sends time out, the context does not
  // wait for linger.
  injector = std::thread([&] {
    zmq::context_t ctx;
    ctx.set(zmq::ctxopt::blocky, false);
    std::mt19937 rng(3);
    for (int i = 0; i < 200; ++i) {
      zmq::socket_t s(ctx, i % 2 ? zmq::socket_type::dealer : zmq::socket_type::req);
      s.set(zmq::sockopt::linger, 100);
      s.set(zmq::sockopt::sndtimeo, 200);
      if (i % 3 == 0) s.set(zmq::sockopt::routing_id, "w7");  // no such worker
      s.connect("tcp://127.0.0.1:" + std::to_string(base + (i % 2)));
      const int n = 1 + rng() % 3;
      for (int f = 0; f < n; ++f) {
        zmq::message_t m(rng() % 80);
        for (size_t b = 0; b < m.size(); ++b) static_cast<unsigned char*>(m.data())[b] = rng();
        if (!s.send(m, f + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none)) break;
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
  });
  const bool finished = WaitAll(children, milliseconds(60000));
  injector.join();
  ASSERT_TRUE(finished) << Logs(children);
  for (const Child& c : children) EXPECT_EQ(c.status, 0) << Logs(children);
  // Rank 0 (shard 0) counted the frames it dropped; the sums stayed exact.
  for (int r = 0; r < 2; ++r) {
    const ProcessReport rep = ReadProcessReport(results.path, r);
    ASSERT_TRUE(rep.complete) << "rank " << r << "\n" << Logs(children);
    EXPECT_OK(rep.status);
    EXPECT_EQ(rep.iterations, 40) << "rank " << r;
    EXPECT_EQ(rep.frames_dropped, 0) << "a foreign frame got past the handshake\n"
                                     << Logs(children);
  }
  const std::string log0 = ReadFile(children[0].log);
  EXPECT_NE(log0.find("job token: rejected a connection"), std::string::npos) << log0;
  EXPECT_EQ(log0.find("rank 0 rejected_connections: 0\n"), std::string::npos) << log0;
}

// A process stopped (SIGSTOP) for longer than the timeout while a worker
// waits for pushes, then continued: the wait's deadline leaves the frozen
// time out, so the job goes on and ends exact (before, the waiting Read
// returned kDeadlineExceeded once the process ran again). Worker 1 is slow,
// so worker 0 is nearly always waiting when the process is stopped; each
// of three stops outlasts the 1.5 s timeout, and the log must show that a
// wait spanned one. The stops begin once both workers have their devices
// (their "device" lines): a GPU's driver, or the CUDA-like mode's stand-in
// for it, may take most of a second to start.
TEST(FrozenProcessTest, StoppedLongerThanTheTimeoutTheJobGoesOn) {
  Env env;
  env["GEEPS_TIMEOUT_MS"] = "1500";
  env["GEEPS_LOG_LEVEL"] = "info";
  Child c = Spawn({::geeps::testing::Program(GEEPS_MULTIPROC_WORKER), "--embedded", "2",
                   "--iterations", "150", "--slow-rank", "1", "--delay-ms", "40"},
                  env);
  std::vector<Child> children = {c};
  const auto started_by = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto started = [&] {
    const std::string log = ReadFile(c.log);
    return log.find("worker 0: device") != std::string::npos &&
           log.find("worker 1: device") != std::string::npos;
  };
  while (!started() && std::chrono::steady_clock::now() < started_by)
    std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(started()) << Logs(children);
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(milliseconds(700));
    ASSERT_EQ(kill(c.pid, SIGSTOP), 0);
    std::this_thread::sleep_for(milliseconds(2200));
    ASSERT_EQ(kill(c.pid, SIGCONT), 0);
  }
  EXPECT_TRUE(WaitAll(children, milliseconds(60000))) << Logs(children);
  const std::string log = Logs(children);
  EXPECT_EQ(children[0].status, 0) << log;
  EXPECT_NE(log.find("embedded: 2 workers, 150 iterations exact"), std::string::npos) << log;
  EXPECT_NE(log.find("does not count against the timeout"), std::string::npos) << log;
}

}  // namespace
