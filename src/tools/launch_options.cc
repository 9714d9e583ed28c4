#include "tools/launch_options.h"

#include <cerrno>
#include <cstdlib>

namespace geeps::tools {
namespace {

// Seconds in [0, 1e7], or nullopt.
std::optional<double> ParseSeconds(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !(value >= 0) || value > 1e7) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

const char kLaunchUsage[] =
    "usage: geeps_launch -n N [--timeout-s S] [--grace-s G] [--no-prefix] [--] program "
    "[args...]\n"
    "  -n N           number of processes (ranks) to start, 1..1024\n"
    "  --timeout-s S  stop every rank after S seconds and exit with 124\n"
    "  --grace-s G    seconds from SIGTERM to SIGKILL when stopping ranks (default 5)\n"
    "  --no-prefix    leave the ranks' stdout/stderr as they are (no \"[rank i] \")\n"
    "  --help-env     print the GEEPS_* environment variables libgeeps reads\n"
    "  -h, --help     print this help\n";

std::optional<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args,
                                             std::string* error) {
  LaunchOptions o;
  auto fail = [error](const std::string& why) -> std::optional<LaunchOptions> {
    *error = why;
    return std::nullopt;
  };
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program ("-" alone too)
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg == "--help-env" || arg == "--help-env=markdown" ||
        arg == "--help-env=config-markdown") {
      o.help_env = arg == "--help-env"            ? LaunchOptions::EnvHelp::kText
                   : arg == "--help-env=markdown" ? LaunchOptions::EnvHelp::kMarkdown
                                                  : LaunchOptions::EnvHelp::kConfigMarkdown;
      return o;
    }
    if (arg == "--no-prefix") {
      o.prefix = false;
      continue;
    }
    std::string name = arg;
    std::optional<std::string> value;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      name = arg.substr(0, arg.find('='));
      value = arg.substr(arg.find('=') + 1);
    } else if (arg.rfind("-n", 0) == 0 && arg.size() > 2 && arg[1] != '-') {
      name = "-n";
      value = arg.substr(2);
    }
    if (name != "-n" && name != "--timeout-s" && name != "--grace-s") {
      return fail("unknown option '" + arg + "'");
    }
    if (!value) {
      if (i + 1 >= args.size()) return fail(name + " needs a value");
      value = args[++i];
    }
    if (name == "-n") {
      char* end = nullptr;
      errno = 0;
      const long n = std::strtol(value->c_str(), &end, 10);
      if (value->empty() || *end != '\0' || errno != 0 || n < 1 || n > kMaxLaunchRanks) {
        return fail("-n '" + *value + "' is not a number of processes in 1.." +
                    std::to_string(kMaxLaunchRanks));
      }
      o.ranks = static_cast<int>(n);
    } else if (name == "--timeout-s") {
      const std::optional<double> seconds = ParseSeconds(*value);
      if (!seconds || *seconds <= 0) return fail("--timeout-s '" + *value + "' is not > 0 seconds");
      o.timeout_s = seconds;
    } else {
      const std::optional<double> seconds = ParseSeconds(*value);
      if (!seconds) return fail("--grace-s '" + *value + "' is not >= 0 seconds");
      o.grace_s = *seconds;
    }
  }
  if (o.ranks == 0) return fail("-n N is required");
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.command.empty()) return fail("no program to run");
  return o;
}

}  // namespace geeps::tools
