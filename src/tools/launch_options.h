// The command line of geeps_launch (see geeps_launch.cc for what it does).
#ifndef GEEPS_TOOLS_LAUNCH_OPTIONS_H_
#define GEEPS_TOOLS_LAUNCH_OPTIONS_H_

#include <optional>
#include <string>
#include <vector>

namespace geeps::tools {

inline constexpr int kMaxLaunchRanks = 1024;

// What `geeps_launch --help` prints and what follows a usage error.
extern const char kLaunchUsage[];

struct LaunchOptions {
  bool help = false;  // -h / --help: print kLaunchUsage, run nothing
  // --help-env: print the GEEPS_* variables (common/tunables.h), run
  // nothing; --help-env=markdown: docs/operations.md's table of them;
  // --help-env=config-markdown: docs/api.md's table of the Config ones.
  enum class EnvHelp { kNone, kText, kMarkdown, kConfigMarkdown } help_env = EnvHelp::kNone;
  int ranks = 0;                     // -n N, 1..kMaxLaunchRanks
  std::optional<double> timeout_s;   // --timeout-s S, > 0
  double grace_s = 5.0;              // --grace-s G, >= 0: SIGTERM to SIGKILL
  bool prefix = true;                // false with --no-prefix
  std::vector<std::string> command;  // program and its arguments, not empty
};

// Parses the arguments after the program name. Options come first; the
// program starts at "--" or at the first argument not starting with '-'.
// Values follow as the next argument or, for long options, after '='
// ("--timeout-s=3"); -n also takes "-n4". Returns nullopt with `*error` set
// (one line, no usage text) on a usage error.
std::optional<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args,
                                             std::string* error);

}  // namespace geeps::tools

#endif  // GEEPS_TOOLS_LAUNCH_OPTIONS_H_
