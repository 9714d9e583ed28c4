// Helpers for tests that start processes: free ports, spawning with a clean
// launcher environment, waiting with a deadline, collecting logs.
#ifndef GEEPS_TESTS_PROCESS_UTIL_H_
#define GEEPS_TESTS_PROCESS_UTIL_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace geeps::testing {

using Env = std::map<std::string, std::string>;

// The first of `n` consecutive TCP ports on 127.0.0.1 that were all free a
// moment ago, below Linux's ephemeral range (32768 and up: ports other
// tests' connections take at random), probed from a per-process start.
inline int FreePortRange(int n) {
  auto bindable = [](int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    return ok;
  };
  // Slots of kSlot ports: test processes running at the same time (their
  // pids differ by less than the slot count) start in different slots.
  constexpr int kLow = 12000, kHigh = 32000, kSlot = 16;
  constexpr int kSlots = (kHigh - kLow) / kSlot;
  const int slots_needed = (n + kSlot - 1) / kSlot;
  // Each call of this process starts elsewhere too: a port handed out
  // earlier may not be bound yet.
  static std::atomic<int> calls{0};
  int slot = static_cast<int>((getpid() + 7919L * calls.fetch_add(1)) % kSlots);
  for (int tries = 0; tries < 200; ++tries) {
    if (slot + slots_needed > kSlots) slot = 0;
    const int base = kLow + slot * kSlot;
    bool all = true;
    for (int k = 0; k < n && all; ++k) all = bindable(base + k);
    if (all) return base;
    slot = (slot + 997) % kSlots;  // far from neighbouring pids' slots
  }
  return kLow + slot * kSlot;
}

// A TCP port on 127.0.0.1 that was free a moment ago, outside the kernel's
// ephemeral range: a port the kernel picks (bind to port 0) is one that other
// tests' outgoing connections also take at random, and a coordinator lost
// the race for one ("Address already in use").
inline int FreePort() { return FreePortRange(1); }

// A new, empty file /tmp/geeps-test-XXXXXX-<tag>, made here (so the name is
// this test's alone); the test removes it or leaves it to /tmp's cleaning.
// Child logs are left on purpose: scripts/sanitize.sh searches those made
// during its stage for sanitizer reports of children whose exit a test
// ignores. (Folders of checkpoints are removed: temp_dirs.h.)
inline std::string TempFile(const std::string& tag) {
  std::string path = "/tmp/geeps-test-XXXXXX-" + tag;
  const int fd = mkstemps(path.data(), static_cast<int>(tag.size() + 1));
  if (fd < 0) {  // (also used by benchmarks, without GoogleTest)
    std::fprintf(stderr, "cannot create a temporary file %s: %s\n", path.c_str(),
                 std::strerror(errno));
    std::abort();
  }
  close(fd);
  return path;  // created (empty) by mkstemps: unique, and nobody else's
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Child {
  pid_t pid = -1;
  std::string log;  // stdout + stderr
  int status = -1;  // exit code, 128+signal, -2 if killed at the deadline
};

// Whether variable `name` picks a mode for a whole test suite (the device
// backend, the host backend's test modes, the checked mode, the device
// trace), which the processes a test starts must run in too.
inline bool IsSuiteModeVariable(const std::string& name) {
  return name == "GEEPS_DEVICE" || name == "GEEPS_HOST_OPAQUE_POINTERS" ||
         name == "GEEPS_ASYNC_HOST_STREAMS" || name == "GEEPS_HOST_NO_ALIAS" ||
         name == "GEEPS_HOST_AS_CUDA" || name == "GEEPS_CHECKED" || name == "GEEPS_DEVICE_TRACE";
}

// This process's GEEPS_* variables: a benchmark passes its caller's
// settings (GEEPS_SEND_UPDATES_IN_PLACE=1, GEEPS_RESEND_AFTER_CONNECTION_LOSS=0
// ...) on to its children, which Spawn would otherwise start without them.
inline Env GeepsVariables() {
  Env out;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr && std::strncmp(*e, "GEEPS_", 6) == 0)
      out[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  return out;
}

// Starts argv with the variables of `env` added (GEEPS_*, OMPI_* and SLURM_*
// of this process removed first, except the suite's modes), output to `log`
// (a temporary file if empty).
inline Child Spawn(const std::vector<std::string>& argv, const Env& env,
                   const std::string& log = "") {
  Child c;
  c.log = log.empty() ? TempFile("log") : log;
  c.pid = fork();
  if (c.pid == 0) {
    for (const char* prefix : {"GEEPS_", "OMPI_", "SLURM_"}) {
      for (char** e = environ; *e;) {
        const std::string name(*e, std::strcspn(*e, "="));
        if (std::strncmp(*e, prefix, std::strlen(prefix)) == 0 && !IsSuiteModeVariable(name)) {
          unsetenv(name.c_str());
        } else {
          ++e;
        }
      }
    }
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    const int fd = open(c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return c;
}

// Waits for every child until `limit`; kills the rest then. False if any
// had to be killed.
inline bool WaitAll(std::vector<Child>& children, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool all = true;
  for (Child& c : children) {
    for (;;) {
      int st = 0;
      if (waitpid(c.pid, &st, WNOHANG) == c.pid) {
        c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &st, 0);
        c.status = -2;
        all = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return all;
}

inline std::string Logs(const std::vector<Child>& children) {
  std::string all;
  for (size_t i = 0; i < children.size(); ++i)
    all += "---- child " + std::to_string(i) + " (status " + std::to_string(children[i].status) +
           ")\n" + ReadFile(children[i].log);
  return all;
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_PROCESS_UTIL_H_
