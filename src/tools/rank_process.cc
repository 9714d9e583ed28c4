#include "tools/rank_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace geeps::tools {
namespace {

// In the child: never returns.
[[noreturn]] void ExecRank(pid_t parent, int out_fd, int err_fd, char** argv, char** envp) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(128 + SIGKILL);  // the launcher died before prctl
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);  // dup2 clears O_CLOEXEC on the copy
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  execvpe(argv[0], argv, envp);
  const int error = errno;
  const char* parts[] = {"geeps_launch: cannot run '", argv[0], "': ", std::strerror(error), "\n"};
  for (const char* p : parts) {
    if (write(STDERR_FILENO, p, std::strlen(p)) < 0) break;
  }
  _exit(error == ENOENT ? 127 : 126);
}

}  // namespace

int PickFreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::optional<std::vector<std::string>> RankBaseEnvironment(int world_size, char** parent_env,
                                                            std::string* error) {
  std::vector<std::string> env;
  bool has_coordinator = false;
  for (char** e = parent_env; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (name == "GEEPS_RANK" || name == "GEEPS_WORLD_SIZE" || name == "GEEPS_LOCAL_RANK") continue;
    has_coordinator = has_coordinator || name == "GEEPS_COORDINATOR";
    env.push_back(entry);
  }
  env.push_back("GEEPS_WORLD_SIZE=" + std::to_string(world_size));
  if (!has_coordinator) {
    const int port = PickFreeLoopbackPort();
    if (port == 0) {
      *error = std::string("cannot find a free port on 127.0.0.1: ") + std::strerror(errno);
      return std::nullopt;
    }
    env.push_back("GEEPS_COORDINATOR=127.0.0.1:" + std::to_string(port));
  }
  return env;
}

std::optional<RankProcess> StartRankProcess(int rank, const std::vector<std::string>& base_env,
                                            const std::vector<std::string>& command, bool capture,
                                            std::string* error) {
  std::vector<std::string> env = base_env;
  env.push_back("GEEPS_RANK=" + std::to_string(rank));
  env.push_back("GEEPS_LOCAL_RANK=" + std::to_string(rank));
  std::vector<std::string> args = command;
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  auto close_all = [&pipes] {
    for (auto& p : pipes) {
      for (int& fd : p) {
        if (fd >= 0) close(fd);
      }
    }
  };
  for (int k = 0; capture && k < 2; ++k) {
    if (pipe2(pipes[k], O_CLOEXEC) != 0) {
      *error = "pipe for rank " + std::to_string(rank) + ": " + std::strerror(errno) +
               " (raise ulimit -n, or use --no-prefix)";
      close_all();
      return std::nullopt;
    }
    fcntl(pipes[k][0], F_SETFL, fcntl(pipes[k][0], F_GETFL) | O_NONBLOCK);
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    *error = "fork for rank " + std::to_string(rank) + ": " + std::strerror(errno);
    close_all();
    return std::nullopt;
  }
  if (pid == 0) ExecRank(parent, pipes[0][1], pipes[1][1], argv.data(), envp.data());
  setpgid(pid, pid);  // the child does it too: whichever runs first
  for (auto& p : pipes) {
    if (p[1] >= 0) close(p[1]);
  }
  return RankProcess{pid, pipes[0][0], pipes[1][0]};
}

}  // namespace geeps::tools
