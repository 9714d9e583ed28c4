// Emulated machines on one host, for the benchmarks that start processes:
// one network namespace per "machine", each joined by a veth pair to a
// bridge in a namespace of its own (the switch), and each link limited by
// `tc tbf` in both directions (on the machine's end: what it sends; on the
// switch's end: what it receives), as a machine with a NIC of that rate on a
// non-blocking switch. One more namespace on the bridge, unlimited, holds
// mpirun (control traffic only).
//
// Everything is created with names unique to this process
// (geeps-sb-<pid>-...; the interfaces live inside them) and removed by the
// destructor, and by a SIGINT/SIGTERM/SIGHUP handler (which also ends the
// processes left inside the namespaces: only this run's). Namespaces named
// after a process that no longer exists (a run killed with SIGKILL) are
// unnamed at the next start; what still runs inside them is left alone.
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2 (`ip`, `tc`).
// Also here, run by scale_bench as internal modes inside the namespaces:
// the link-rate probe and mpirun's rsh agent.
#ifndef GEEPS_BENCHMARKS_NETNS_H_
#define GEEPS_BENCHMARKS_NETNS_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace geeps::bench {

// The first of `names` that is an executable file, or "".
inline std::string FindTool(const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (access(n.c_str(), X_OK) == 0) return n;
  return "";
}

// Runs a shell command; its output (stdout and stderr) in *out; the exit
// status.
inline int Shell(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) {
    if (out) *out = std::strerror(errno);
    return -1;
  }
  std::string text;
  char buf[512];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) text.append(buf, n);
  const int st = pclose(p);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// A rate as tc writes it: a number and bit, kbit, mbit, gbit or tbit
// (decimal: 1gbit = 1e9 bit/s); bits per second, or < 0 if malformed.
inline double ParseRate(const std::string& text) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return -1;
  }
  std::string unit = text.substr(used);
  std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
  const std::pair<const char*, double> units[] = {
      {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12}};
  for (const auto& [name, scale] : units)
    if (unit == name && v > 0) return v * scale;
  return -1;
}

namespace netns_detail {
// The command that removes this process's namespaces, for the signal
// handler (which may only use what is async-signal-safe: fork, execv).
inline char g_cleanup[16384];

inline void RunCleanup() {
  if (g_cleanup[0] == '\0') return;
  const pid_t p = fork();
  if (p == 0) {
    execl("/bin/sh", "sh", "-c", g_cleanup, static_cast<char*>(nullptr));
    _exit(127);
  }
  if (p > 0) waitpid(p, nullptr, 0);
  g_cleanup[0] = '\0';
}

inline void OnSignal(int sig) {
  RunCleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace netns_detail

constexpr int kProbePort = 5201;

// The link-rate probe, one end in each of two machines: `role` "recv"
// accepts one TCP stream on kProbePort and prints "RESULT <bytes per
// second>" (from its first byte to the end); "send" sends `bytes` to
// `host`.
inline int RunLinkProbe(const std::string& role, const std::string& host, uint64_t bytes) {
  using Clock = std::chrono::steady_clock;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    std::perror("probe: socket");
    return 1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(kProbePort);
  std::vector<char> buf(1 << 20, 'x');
  if (role == "recv") {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 1) != 0) {
      std::perror("probe: bind");
      return 1;
    }
    alarm(120);
    const int c = accept(fd, nullptr, nullptr);
    uint64_t total = 0, first = 0;
    Clock::time_point t0, t1;
    for (ssize_t n; (n = read(c, buf.data(), buf.size())) > 0;) {
      if (total == 0) {
        t0 = Clock::now();
        first = static_cast<uint64_t>(n);
      }
      total += static_cast<uint64_t>(n);
      t1 = Clock::now();
    }
    const double s = std::chrono::duration<double>(t1 - t0).count();
    if (total <= first || s <= 0) return 1;
    std::printf("RESULT %.3f\n", static_cast<double>(total - first) / s);
    close(c);
    close(fd);
    return 0;
  }
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  bool connected = false;
  for (int i = 0; i < 200 && !connected; ++i) {
    connected = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    if (!connected) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (!connected) {
    std::perror("probe: connect");
    return 1;
  }
  for (uint64_t left = bytes; left > 0;) {
    const ssize_t n = write(fd, buf.data(), std::min<uint64_t>(left, buf.size()));
    if (n <= 0) return 1;
    left -= static_cast<uint64_t>(n);
  }
  close(fd);
  return 0;
}

// mpirun's rsh agent in --netns mode: `AGENT host command...` runs the
// command (a remote shell's command line) in network namespace `host`, with
// `host` as its host name (a UTS namespace of its own: OpenMPI's daemons on
// one host name would share their session folder in /tmp and collide).
inline int RunRshAgent(int argc, char** argv) {
  if (argc < 4) return 2;
  std::string cmd;
  for (int i = 3; i < argc; ++i) cmd += std::string(i > 3 ? " " : "") + argv[i];
  const std::string host = argv[2], path = "/run/netns/" + host;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0 || unshare(CLONE_NEWUTS) != 0 ||
      sethostname(host.data(), host.size()) != 0) {
    std::perror(("scale_bench --rsh-agent: enter " + path).c_str());
    return 127;
  }
  close(fd);
  execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
  std::perror("scale_bench --rsh-agent: exec /bin/sh");
  return 127;
}

class NetnsCluster {
 public:
  // `machines` namespaces limited to `rate_bps` bits/s each way. Null with
  // *why set (one line) where they cannot be made; what was made is removed.
  static std::unique_ptr<NetnsCluster> Create(int machines, double rate_bps, std::string* why) {
    if (geteuid() != 0) {
      *why =
          "not root (network namespaces, veth pairs and tc need CAP_NET_ADMIN and "
          "CAP_SYS_ADMIN)";
      return nullptr;
    }
    std::unique_ptr<NetnsCluster> c(new NetnsCluster());
    c->ip_ = FindTool({"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"});
    c->tc_ = FindTool({"/usr/sbin/tc", "/sbin/tc", "/usr/bin/tc", "/bin/tc"});
    if (c->ip_.empty() || c->tc_.empty()) {
      *why = "no `ip` or `tc` (Debian package iproute2)";
      return nullptr;
    }
    c->prefix_ = "geeps-sb-" + std::to_string(getpid());
    c->SweepStale();
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, netns_detail::OnSignal);
    // tbf: a burst of 2 ms at the rate (at least 64 KiB, a GSO segment);
    // packets wait in the queue up to 50 ms before they are dropped.
    const double bytes_ps = rate_bps / 8;
    const long burst = std::max<long>(65536, static_cast<long>(bytes_ps / 500));
    std::ostringstream limit;
    limit << "tbf rate " << static_cast<long long>(rate_bps) << "bit burst " << burst
          << " latency 50ms";
    c->tbf_ = limit.str();
    const std::string sw = c->prefix_ + "-sw";
    if (!c->AddNamespace(sw, why) || !c->Run("-n " + sw + " link set lo up", why) ||
        !c->Run("-n " + sw + " link add br0 type bridge", why) ||
        !c->Run("-n " + sw + " link set br0 up", why))
      return nullptr;
    for (int r = 0; r < machines; ++r) {
      if (!c->AddMachine("m" + std::to_string(r), c->Address(r), true, why)) return nullptr;
    }
    if (!c->AddMachine("mpi", c->MpiAddress(), false, why)) return nullptr;
    c->machines_ = machines;
    return c;
  }

  ~NetnsCluster() {
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    netns_detail::RunCleanup();
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, nullptr);
  }

  int machines() const { return machines_; }
  const std::string& tbf() const { return tbf_; }
  std::string Namespace(int r) const { return prefix_ + "-m" + std::to_string(r); }
  std::string MpiNamespace() const { return prefix_ + "-mpi"; }
  static std::string Address(int r) { return "10.213.77." + std::to_string(r + 1); }
  static std::string MpiAddress() { return "10.213.77.254"; }
  // argv run inside namespace `ns` (`ip netns exec` execs it: same pid).
  std::vector<std::string> Wrap(const std::string& ns, const std::vector<std::string>& argv) const {
    std::vector<std::string> out = {ip_, "netns", "exec", ns};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }
  const std::string& ip() const { return ip_; }

 private:
  NetnsCluster() = default;

  bool Run(const std::string& args, std::string* why) {
    std::string out;
    if (Shell(ip_ + " " + args, &out) == 0) return true;
    *why = "`ip " + args + "` failed: " + out;
    std::replace(why->begin(), why->end(), '\n', ' ');
    return false;
  }

  bool AddNamespace(const std::string& ns, std::string* why) {
    if (!Run("netns add " + ns, why)) return false;
    namespaces_.push_back(ns);
    UpdateCleanup();
    return true;
  }

  // Namespace <prefix>-<name>, its eth0 at `address` on the bridge, limited
  // both ways when `limited`.
  bool AddMachine(const std::string& name, const std::string& address, bool limited,
                  std::string* why) {
    const std::string ns = prefix_ + "-" + name, sw = prefix_ + "-sw", port = "p" + name;
    if (!AddNamespace(ns, why)) return false;
    if (!Run("-n " + sw + " link add " + port + " type veth peer name eth0 netns " + ns, why) ||
        !Run("-n " + sw + " link set " + port + " master br0 up", why) ||
        !Run("-n " + ns + " addr add " + address + "/24 dev eth0", why) ||
        !Run("-n " + ns + " link set eth0 up", why) || !Run("-n " + ns + " link set lo up", why))
      return false;
    const std::string qdisc = " qdisc add dev ";
    if (limited && (!Run("netns exec " + ns + " " + tc_ + qdisc + "eth0 root " + tbf_, why) ||
                    !Run("netns exec " + sw + " " + tc_ + qdisc + port + " root " + tbf_, why)))
      return false;
    return true;
  }

  // Ends what still runs in this run's namespaces, then unnames them (the
  // veth pairs and the bridge go with the last process inside).
  void UpdateCleanup() {
    std::string list;
    for (const std::string& ns : namespaces_) list += " " + ns;
    const std::string cmd = "for n in" + list + "; do p=$(" + ip_ +
                            " netns pids $n 2>/dev/null); [ -n \"$p\" ] && kill -9 $p; done; "
                            "for n in" +
                            list + "; do " + ip_ + " netns del $n 2>/dev/null; done; true";
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    std::snprintf(netns_detail::g_cleanup, sizeof(netns_detail::g_cleanup), "%s", cmd.c_str());
    sigprocmask(SIG_SETMASK, &old, nullptr);
  }

  // Unnames geeps-sb-<pid>-* namespaces whose process is gone.
  void SweepStale() {
    std::string out;
    if (Shell(ip_ + " netns list", &out) != 0) return;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      const std::string name = line.substr(0, line.find(' '));
      if (name.rfind("geeps-sb-", 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + 9, nullptr, 10);
      if (pid <= 0 || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
      std::fprintf(stderr, "scale_bench: removing namespace %s of a run that ended (pid %ld)\n",
                   name.c_str(), pid);
      Shell(ip_ + " netns del " + name);
    }
  }

  std::string ip_, tc_, prefix_, tbf_;
  std::vector<std::string> namespaces_;
  int machines_ = 0;
};

}  // namespace geeps::bench

#endif  // GEEPS_BENCHMARKS_NETNS_H_
