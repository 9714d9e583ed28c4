// The CPU a job burns while strangers hold idle TCP connections on the
// coordinator's port (issue: 1100 such connections once kept rank 0 busy).
//
// One process runs a two-rank job (ranks 0 and 1 on threads, over TCP on
// loopback), lets it idle (heartbeats only) for --seconds and measures the
// process's CPU time (getrusage: both ranks and every library thread), then
// opens --connections plain TCP connections to the coordinator's port, says
// nothing on them, and measures again while they are held. The figure is
// CPU seconds per wall second (1.0 = one core busy) in each window.
//
// build/benchmarks/idle_bench [--connections 1000] [--seconds 3] [--out idle.json]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "../tests/process_util.h"
#include "flags.h"
#include "geeps/process.h"

namespace {

using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// CPU seconds per wall second over `seconds`.
double CpuFraction(double seconds) {
  const double c0 = CpuSeconds();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  return (CpuSeconds() - c0) / wall;
}

}  // namespace

int main(int argc, char** argv) {
  int connections = 1000;
  double seconds = 3;
  std::string out = "idle_bench.json";
  geeps::bench::Flags flags("idle_bench");
  flags.Add("--connections", &connections, "idle TCP connections to open (1..5000)")
      .Add("--seconds", &seconds, "how long to measure (0..60]")
      .Add("--out", &out, "JSON results");
  if (const int status = flags.Parse(argc, argv); status >= 0) return status;
  if (connections < 1 || connections > 5000) return flags.Fail("--connections must be 1..5000");
  if (seconds <= 0 || seconds > 60) return flags.Fail("--seconds must be in (0, 60]");
  // Each connection is two descriptors here (ours and the accepted one).
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  const rlim_t want = static_cast<rlim_t>(2 * connections + 512);
  if (lim.rlim_cur < want) {
    lim.rlim_cur = std::min(want, lim.rlim_max);
    setrlimit(RLIMIT_NOFILE, &lim);
  }

  const int port = geeps::testing::FreePort();
  geeps::Config c;
  c.tables = {{"params", 64, 16}};
  c.timeout = std::chrono::milliseconds(20000);
  auto join = [&](int rank) {
    geeps::ProcessOptions po;
    po.rank = rank;
    po.world_size = 2;
    po.coordinator = "127.0.0.1:" + std::to_string(port);
    return geeps::Process::Join(c, po);
  };
  auto second = std::async(std::launch::async, [&] { return join(1); });
  auto p0 = join(0);
  auto p1 = second.get();
  if (!p0.ok() || !p1.ok()) {
    std::fprintf(stderr, "idle_bench: join failed: %s / %s\n", p0.status().ToString().c_str(),
                 p1.status().ToString().c_str());
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double idle = CpuFraction(seconds);

  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < connections; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      break;
    }
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // accepts settle
  const double held = CpuFraction(seconds);
  for (int fd : fds) close(fd);

  // Both leave at once (each waits for the other to leave).
  auto leave1 = std::async(std::launch::async, [&] { return (*p1)->Shutdown(); });
  const geeps::Status s0 = (*p0)->Shutdown(), s1 = leave1.get();
  std::printf("connections held: %zu of %d\n", fds.size(), connections);
  std::printf("CPU (cores busy) idle: %.4f, with the connections held: %.4f\n", idle, held);
  std::ofstream json(out);
  json << "{\"connections_asked\":" << connections << ",\"connections_held\":" << fds.size()
       << ",\"seconds\":" << seconds << ",\"cpu_cores_idle\":" << idle
       << ",\"cpu_cores_with_connections\":" << held << "}\n";
  if (!s0.ok() || !s1.ok()) {
    std::fprintf(stderr, "idle_bench: shutdown: %s / %s\n", s0.ToString().c_str(),
                 s1.ToString().c_str());
    return 1;
  }
  return static_cast<int>(fds.size()) == connections ? 0 : 1;
}
