// How geeps_launch starts one rank: its environment and the fork/exec.
#ifndef GEEPS_TOOLS_RANK_PROCESS_H_
#define GEEPS_TOOLS_RANK_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace geeps::tools {

// A port of 127.0.0.1 that was free when this call bound it (port 0) and
// closed it again; 0 on failure. Another program may take it in between: the
// usual race of every "pick a free port" scheme.
int PickFreeLoopbackPort();

// The environment shared by the ranks of a job of `world_size`: `parent_env`
// (a null-terminated "NAME=value" array, e.g. environ) without GEEPS_RANK,
// GEEPS_WORLD_SIZE and GEEPS_LOCAL_RANK, plus GEEPS_WORLD_SIZE=world_size and,
// when `parent_env` has no GEEPS_COORDINATOR,
// GEEPS_COORDINATOR=127.0.0.1:<PickFreeLoopbackPort()>.
// Returns nullopt with `*error` set when no port can be found.
std::optional<std::vector<std::string>> RankBaseEnvironment(int world_size, char** parent_env,
                                                            std::string* error);

struct RankProcess {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends of the rank's stdout and stderr pipes (close-on-exec,
  int stderr_fd = -1;  // non-blocking; the caller closes them); -1 without capture
};

// Starts `command` (looked up in PATH) as rank `rank` with `base_env` plus
// GEEPS_RANK and GEEPS_LOCAL_RANK = rank. The child runs in a new process
// group whose id is its pid, gets SIGKILL when the calling thread exits
// (PR_SET_PDEATHSIG), an empty signal mask, SIGPIPE at its default, stdin from
// /dev/null, and, with `capture`, its stdout and stderr on pipes. When the
// program cannot be run, the child says so on its stderr and exits 127 (not
// found) or 126. REQUIRES: the calling process is single-threaded (in the
// child, execvpe's PATH search is not async-signal-safe).
// Returns nullopt with `*error` set when a pipe or the fork fails.
std::optional<RankProcess> StartRankProcess(int rank, const std::vector<std::string>& base_env,
                                            const std::vector<std::string>& command, bool capture,
                                            std::string* error);

}  // namespace geeps::tools

#endif  // GEEPS_TOOLS_RANK_PROCESS_H_
