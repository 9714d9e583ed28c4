// geeps_launch: starts N processes of one program on this machine, without MPI.
//
//   geeps_launch -n N [--timeout-s S] [--grace-s G] [--no-prefix] [--] program [args...]
//
// Rank i gets GEEPS_RANK=i, GEEPS_WORLD_SIZE=N, GEEPS_LOCAL_RANK=i and, unless
// GEEPS_COORDINATOR is already set, GEEPS_COORDINATOR=127.0.0.1:<port>, a port
// that was free when the launcher bound it (a small race with other programs,
// as with every "pick a free port" scheme). Its stdin is /dev/null; each line of
// its stdout and stderr is written to the launcher's with "[rank i] " in front
// (--no-prefix: the streams are inherited as they are).
//
// Each rank runs in a process group of its own, so that a terminal's Ctrl-C
// reaches the launcher only, and a signal to the group reaches whatever the
// rank started too. SIGINT, SIGTERM and SIGHUP are forwarded to every rank's
// group; a second one sends SIGKILL. When a rank exits non-zero or is killed,
// the launcher says so, sends SIGTERM to the others and SIGKILL after the grace
// period (default 5 s). When all ranks are gone, what is left in their groups is
// killed too, so that nothing outlives the launcher. If the launcher itself is
// killed, the ranks get SIGKILL (PR_SET_PDEATHSIG).
//
// Exit status: 0 when every rank exits 0; otherwise the first non-zero status
// of a rank (128+signal for a rank killed by a signal; 127 when the program
// cannot be run); 128+signal when the launcher was interrupted and every rank
// exited 0; 124 after --timeout-s; 2 for bad usage; 1 when the launcher fails.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "common/config_doc.h"
#include "common/tunables.h"
#include "tools/launch_options.h"
#include "tools/line_prefixer.h"
#include "tools/rank_process.h"

extern char** environ;

namespace geeps::tools {
namespace {

using Clock = std::chrono::steady_clock;

// How long output is still read after the last rank exited and its group was
// killed (a process that left the group may keep a pipe open).
constexpr std::chrono::milliseconds kDrainTime{2000};

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // e.g. EPIPE: the reader is gone; nothing better to do
    done += static_cast<size_t>(n);
  }
}

void Say(const std::string& message) { WriteAll(STDERR_FILENO, "geeps_launch: " + message + "\n"); }

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

Clock::duration ToDuration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// One of a rank's output pipes and the part of a line read so far.
struct Stream {
  int fd = -1;
  int out_fd = -1;  // where its lines go: the launcher's stdout or stderr
  std::optional<LinePrefixer> lines;
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  Stream streams[2];  // stdout, stderr
};

// Starts the ranks and supervises them until every one is gone (see the top of
// this file). Single-threaded: one poll loop over a signalfd and the ranks' pipes.
class Launcher {
 public:
  explicit Launcher(LaunchOptions options) : o_(std::move(options)) {}
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;
  ~Launcher() {
    for (Rank& r : ranks_) {
      for (Stream& s : r.streams) {
        if (s.fd >= 0) close(s.fd);
      }
    }
    if (signal_fd_ >= 0) close(signal_fd_);
  }

  int Run() {
    // A signal the launcher was told to ignore (nohup, a background job of a
    // script) stays ignored, for the ranks too: it is neither caught nor forwarded.
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction current {};
      if (sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
      sigaddset(&mask, sig);
    }
    if (sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) return Fail(Errno("sigprocmask"));
    signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd_ < 0) return Fail(Errno("signalfd"));
    signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher
    if (!StartAll()) {
      BeginStop(SIGKILL);
    } else if (o_.timeout_s) {
      timeout_at_ = Clock::now() + ToDuration(*o_.timeout_s);
    }
    Loop();
    if (launch_failed_) return 1;
    if (timed_out_) return 124;
    if (first_failure_) return *first_failure_;
    if (interrupted_by_) return 128 + interrupted_by_;
    return 0;
  }

 private:
  int Fail(const std::string& message) {
    Say(message);
    return 1;
  }

  bool StartAll() {
    std::string error;
    std::optional<std::vector<std::string>> env = RankBaseEnvironment(o_.ranks, environ, &error);
    ranks_.resize(env ? static_cast<size_t>(o_.ranks) : 0);
    for (int i = 0; env && i < o_.ranks; ++i) {
      std::optional<RankProcess> p = StartRankProcess(i, *env, o_.command, o_.prefix, &error);
      if (!p) break;
      Rank& rank = ranks_[static_cast<size_t>(i)];
      rank.pid = p->pid;
      rank.running = true;
      ++running_;
      const int fds[2] = {p->stdout_fd, p->stderr_fd};
      for (int k = 0; k < 2 && fds[k] >= 0; ++k) {
        rank.streams[k].fd = fds[k];
        rank.streams[k].out_fd = k == 0 ? STDOUT_FILENO : STDERR_FILENO;
        rank.streams[k].lines.emplace("[rank " + std::to_string(i) + "] ");
      }
    }
    if (error.empty()) return true;
    Say(error);
    launch_failed_ = true;
    return false;
  }

  // Sends `sig` to the process group of every rank (of running ones only unless
  // `all`); to a running rank itself when it left its group (setsid).
  void SignalGroups(int sig, bool all) {
    for (const Rank& r : ranks_) {
      if (r.pid <= 0 || !(r.running || all)) continue;
      if (kill(-r.pid, sig) != 0 && errno == ESRCH && r.running) kill(r.pid, sig);
    }
  }

  // Starts stopping the ranks: `sig` now, SIGKILL after the grace period.
  void BeginStop(int sig) {
    stopping_ = true;
    SignalGroups(sig, false);
    if (sig == SIGKILL) {
      kill_at_.reset();
    } else {
      kill_at_ = Clock::now() + ToDuration(o_.grace_s);
    }
  }

  void OnSignal(int sig) {
    if (sig == SIGCHLD) return;  // reaped after every poll
    const std::string name = std::to_string(sig) + " (" + strsignal(sig) + ")";
    if (interrupted_by_ == 0) interrupted_by_ = sig;
    if (stopping_) {
      Say("got signal " + name + " while stopping the ranks; killing them");
      BeginStop(SIGKILL);
      return;
    }
    Say("got signal " + name + "; forwarding it to all ranks");
    BeginStop(sig);
  }

  void OnExit(Rank& rank, int status) {
    rank.running = false;
    --running_;
    const int index = static_cast<int>(&rank - ranks_.data());
    int code = 0;
    std::string how;
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
      how = "exited with code " + std::to_string(code);
    } else if (WIFSIGNALED(status)) {
      code = 128 + WTERMSIG(status);
      how = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
            strsignal(WTERMSIG(status)) + ")";
    }
    if (code == 0) return;
    if (!first_failure_) first_failure_ = code;
    if (stopping_) return;  // stopped by us, or failing while stopping: already reported
    Say("rank " + std::to_string(index) + " " + how + "; stopping the other ranks");
    BeginStop(SIGTERM);
  }

  void Reap() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (Rank& r : ranks_) {
        if (r.pid == pid && r.running) OnExit(r, status);
      }
    }
  }

  // Reads what is there; at end of file, writes the last partial line and closes.
  void ReadStream(Stream& s) {
    char buf[16384];
    for (int reads = 0; reads < 8; ++reads) {  // then the other streams get a turn
      const ssize_t n = read(s.fd, buf, sizeof(buf));
      if (n > 0) {
        WriteAll(s.out_fd, s.lines->Add(buf, static_cast<size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      FlushStream(s);
      return;
    }
  }

  void FlushStream(Stream& s) {
    WriteAll(s.out_fd, s.lines->Finish());
    close(s.fd);
    s.fd = -1;
  }

  // The last resort when the loop itself fails.
  void KillAndWaitAll() {
    SignalGroups(SIGKILL, true);
    for (Rank& r : ranks_) {
      int status = 0;
      if (r.running && waitpid(r.pid, &status, 0) == r.pid) OnExit(r, status);
    }
  }

  static int MillisUntil(Clock::time_point t) {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - Clock::now()).count();
    return static_cast<int>(std::max<long long>(0, std::min<long long>(ms, 60000)));
  }

  void Loop() {
    std::optional<Clock::time_point> drain_until;
    for (;;) {
      Reap();
      if (running_ == 0 && !drain_until) {
        SignalGroups(SIGKILL, true);  // whatever a rank left behind in its group
        drain_until = Clock::now() + kDrainTime;
        kill_at_.reset();
      }
      std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
      std::vector<Stream*> streams;
      for (Rank& r : ranks_) {
        for (Stream& s : r.streams) {
          if (s.fd < 0) continue;
          fds.push_back({s.fd, POLLIN, 0});
          streams.push_back(&s);
        }
      }
      const Clock::time_point now = Clock::now();
      if (drain_until && (streams.empty() || now >= *drain_until)) {
        for (Stream* s : streams) FlushStream(*s);
        return;
      }
      if (timeout_at_ && !stopping_ && now >= *timeout_at_) {
        timed_out_ = true;
        Say("timed out after " + Seconds(*o_.timeout_s) + " s; stopping all ranks");
        BeginStop(SIGTERM);
      }
      if (kill_at_ && now >= *kill_at_) {  // reset once no rank runs
        Say("grace period over; killing the remaining ranks");
        BeginStop(SIGKILL);
      }
      int wait_ms = 60000;
      for (const auto& t : {stopping_ ? std::nullopt : timeout_at_, kill_at_, drain_until}) {
        if (t) wait_ms = std::min(wait_ms, MillisUntil(*t));
      }
      if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
        Say(Errno("poll"));
        launch_failed_ = true;
        KillAndWaitAll();
        return;
      }
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo info;
        while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
          OnSignal(static_cast<int>(info.ssi_signo));
        }
      }
      for (size_t k = 1; k < fds.size(); ++k) {
        if (fds[k].revents != 0) ReadStream(*streams[k - 1]);
      }
    }
  }

  LaunchOptions o_;
  std::vector<Rank> ranks_;
  int signal_fd_ = -1;
  int running_ = 0;
  bool stopping_ = false;
  bool timed_out_ = false;
  bool launch_failed_ = false;
  int interrupted_by_ = 0;
  std::optional<int> first_failure_;
  std::optional<Clock::time_point> timeout_at_;
  std::optional<Clock::time_point> kill_at_;
};

}  // namespace
}  // namespace geeps::tools

int main(int argc, char** argv) {
  using geeps::tools::Say;
  try {
    std::string error;
    const std::optional<geeps::tools::LaunchOptions> options =
        geeps::tools::ParseLaunchArgs(std::vector<std::string>(argv + 1, argv + argc), &error);
    if (!options) {
      Say(error);
      std::fputs(geeps::tools::kLaunchUsage, stderr);
      return 2;
    }
    if (options->help) {
      std::fputs(geeps::tools::kLaunchUsage, stdout);
      return 0;
    }
    using EnvHelp = geeps::tools::LaunchOptions::EnvHelp;
    if (options->help_env != EnvHelp::kNone) {
      const std::string text = options->help_env == EnvHelp::kText ? geeps::tunables::HelpText()
                               : options->help_env == EnvHelp::kMarkdown
                                   ? geeps::tunables::MarkdownTable()
                                   : geeps::tunables::ConfigMarkdownTable();
      std::fputs(text.c_str(), stdout);
      return 0;
    }
    return geeps::tools::Launcher(*options).Run();
  } catch (const std::exception& e) {  // e.g. std::bad_alloc: none may escape main
    Say(std::string("internal error: ") + e.what());
    return 1;
  }
}
