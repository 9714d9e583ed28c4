// geeps_launch: its option parser and line prefixer, then the built binary run
// against small shell commands (exit codes, rank variables, output prefixes,
// stopping the other ranks, timeouts, signals, and that no process is left).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_paths.h"
#include "tools/launch_options.h"
#include "tools/line_prefixer.h"
#include "tools/rank_process.h"

extern char** environ;

namespace geeps::tools {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(ParseLaunchArgsTest, Accepted) {
  std::string error;
  auto o = ParseLaunchArgs(
      {"-n", "4", "--timeout-s", "2.5", "--grace-s=0", "--", "prog", "-n", "x"}, &error);
  ASSERT_TRUE(o) << error;
  EXPECT_EQ(o->ranks, 4);
  EXPECT_DOUBLE_EQ(o->timeout_s.value_or(-1), 2.5);
  EXPECT_DOUBLE_EQ(o->grace_s, 0);
  EXPECT_TRUE(o->prefix);
  EXPECT_EQ(o->command, (std::vector<std::string>{"prog", "-n", "x"}));

  o = ParseLaunchArgs({"-n2", "--no-prefix", "--timeout-s=1", "sh", "-c", "true"}, &error);
  ASSERT_TRUE(o) << error;
  EXPECT_EQ(o->ranks, 2);
  EXPECT_FALSE(o->prefix);
  EXPECT_DOUBLE_EQ(o->grace_s, 5.0);
  EXPECT_EQ(o->command, (std::vector<std::string>{"sh", "-c", "true"}));

  o = ParseLaunchArgs({"--help"}, &error);
  ASSERT_TRUE(o) << error;
  EXPECT_TRUE(o->help);

  using EnvHelp = LaunchOptions::EnvHelp;
  for (const auto& [arg, want] : std::vector<std::pair<std::string, EnvHelp>>{
           {"--help-env", EnvHelp::kText},
           {"--help-env=markdown", EnvHelp::kMarkdown},
           {"--help-env=config-markdown", EnvHelp::kConfigMarkdown}}) {
    o = ParseLaunchArgs({arg}, &error);
    ASSERT_TRUE(o) << arg << ": " << error;
    EXPECT_EQ(o->help_env, want) << arg;
  }
}

TEST(ParseLaunchArgsTest, Rejected) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "-n N is required"},
      {{"prog"}, "-n N is required"},
      {{"-n"}, "-n needs a value"},
      {{"-n", "2"}, "no program"},
      {{"-n", "2", "--"}, "no program"},
      {{"-n", "0", "prog"}, "-n '0'"},
      {{"-n", "1025", "prog"}, "-n '1025'"},
      {{"-n", "two", "prog"}, "-n 'two'"},
      {{"-n", "2x", "prog"}, "-n '2x'"},
      {{"-n", "2", "--timeout-s", "0", "prog"}, "--timeout-s '0'"},
      {{"-n", "2", "--timeout-s", "-1", "prog"}, "--timeout-s '-1'"},
      {{"-n", "2", "--timeout-s", "nan", "prog"}, "--timeout-s 'nan'"},
      {{"-n", "2", "--grace-s=soon", "prog"}, "--grace-s 'soon'"},
      {{"-n", "2", "--timeout-s"}, "--timeout-s needs a value"},
      {{"-n", "2", "--bogus", "prog"}, "unknown option '--bogus'"},
      {{"-x", "-n", "2", "prog"}, "unknown option '-x'"},
  };
  for (const auto& [args, why] : cases) {
    std::string error;
    EXPECT_FALSE(ParseLaunchArgs(args, &error)) << why;
    EXPECT_NE(error.find(why), std::string::npos) << "'" << why << "' not in '" << error << "'";
  }
}

TEST(LinePrefixerTest, PrefixesCompleteLinesAndFinishesTheLastOne) {
  LinePrefixer p("[rank 1] ");
  EXPECT_EQ(p.Add("ab", 2), "");
  EXPECT_EQ(p.Add("c\nd\n\ne", 6), "[rank 1] abc\n[rank 1] d\n[rank 1] \n");
  EXPECT_EQ(p.Finish(), "[rank 1] e\n");
  EXPECT_EQ(p.Finish(), "");
}

TEST(LinePrefixerTest, CutsLongLines) {
  LinePrefixer p("> ", 3);
  EXPECT_EQ(p.Add("abc", 3), "");  // may still end here
  EXPECT_EQ(p.Add("\n", 1), "> abc\n");
  EXPECT_EQ(p.Add("abcdefg", 7), "> abc\n> def\n");
  EXPECT_EQ(p.Add("hi\n", 3), "> ghi\n");
  EXPECT_EQ(p.Finish(), "");
}

TEST(RankBaseEnvironmentTest, DropsStaleRankVariablesAndPicksACoordinator) {
  std::vector<std::string> parent{"PATH=/bin", "GEEPS_RANK=7", "GEEPS_WORLD_SIZE=9",
                                  "GEEPS_LOCAL_RANK=7", "GEEPS_RANKS_X=kept"};
  std::vector<char*> parent_p;
  for (std::string& e : parent) parent_p.push_back(e.data());
  parent_p.push_back(nullptr);
  std::string error;
  auto env = RankBaseEnvironment(3, parent_p.data(), &error);
  ASSERT_TRUE(env) << error;
  ASSERT_EQ(env->size(), 4u);
  EXPECT_EQ((*env)[0], "PATH=/bin");
  EXPECT_EQ((*env)[1], "GEEPS_RANKS_X=kept");
  EXPECT_EQ((*env)[2], "GEEPS_WORLD_SIZE=3");
  const std::regex coordinator(R"(GEEPS_COORDINATOR=127\.0\.0\.1:[1-9][0-9]*)");
  EXPECT_TRUE(std::regex_match((*env)[3], coordinator)) << (*env)[3];

  parent_p.insert(parent_p.begin(), const_cast<char*>("GEEPS_COORDINATOR=head:1"));
  env = RankBaseEnvironment(3, parent_p.data(), &error);
  ASSERT_TRUE(env) << error;
  EXPECT_EQ(env->front(), "GEEPS_COORDINATOR=head:1");
  EXPECT_EQ(env->back(), "GEEPS_WORLD_SIZE=3");
}

// ---------------------------------------------------------------------------
// The binary.

struct Result {
  int code = -1;  // exit status, 128+signal when killed, -1 when it had to be killed
  double seconds = 0;
  std::string out, err;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Alive and not a zombie (an orphan's zombie may linger where PID 1 never reaps).
bool IsAlive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

bool WaitFor(const std::function<bool()>& done, milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "launcher_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (pid_ > 0) {  // a failed test must not leave a launcher behind
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Starts geeps_launch with `args`; stdout and stderr go to files. The
  // environment is this process's without GEEPS_* variables, plus `extra_env`.
  void Start(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "GEEPS_", 6) != 0) env.emplace_back(*e);
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<std::string> argv{::geeps::testing::Program(GEEPS_LAUNCH_PATH)};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> argv_p, env_p;
    for (std::string& a : argv) argv_p.push_back(a.data());
    for (std::string& e : env) env_p.push_back(e.data());
    argv_p.push_back(nullptr);
    env_p.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, (dir_ + "/stdout").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, (dir_ + "/stderr").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    started_ = Clock::now();
    const int rc = posix_spawn(&pid_, argv_p[0], &actions, nullptr, argv_p.data(), env_p.data());
    posix_spawn_file_actions_destroy(&actions);
    ASSERT_EQ(rc, 0) << std::strerror(rc);
  }

  // Waits for the launcher started by Start (killing it after `limit`).
  Result Wait(milliseconds limit = milliseconds(30000)) {
    Result r;
    int status = 0;
    const bool exited = WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, limit);
    if (!exited) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    } else if (WIFEXITED(status)) {
      r.code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      r.code = 128 + WTERMSIG(status);
    }
    pid_ = -1;
    r.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    r.out = ReadAll(dir_ + "/stdout");
    r.err = ReadAll(dir_ + "/stderr");
    return r;
  }

  Result Run(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
    Start(args, extra_env);
    return Wait();
  }

  // The pids a test's ranks wrote to files named `prefix`0, `prefix`1, ...
  std::vector<pid_t> Pids(const std::string& prefix, int ranks) {
    std::vector<pid_t> pids;
    for (int i = 0; i < ranks; ++i) {
      std::istringstream in(ReadAll(dir_ + "/" + prefix + std::to_string(i)));
      for (pid_t p; in >> p;) pids.push_back(p);
    }
    return pids;
  }

  void ExpectAllGone(const std::vector<pid_t>& pids) {
    for (pid_t p : pids) {
      EXPECT_TRUE(WaitFor([p] { return !IsAlive(p); }, milliseconds(5000))) << "pid " << p;
    }
  }

  // A shell line that writes "$$ <words>" to $dir_/<name>$GEEPS_RANK atomically.
  std::string WritePids(const std::string& name, const std::string& words = "") {
    const std::string file = dir_ + "/" + name + "$GEEPS_RANK";
    return "echo $$ " + words + " > " + file + ".tmp && mv " + file + ".tmp " + file;
  }

  std::string dir_;
  pid_t pid_ = -1;
  Clock::time_point started_;
};

TEST_F(LauncherTest, AllSucceedEachRankSeesItsVariables) {
  const std::string script =
      "echo \"$GEEPS_RANK $GEEPS_WORLD_SIZE $GEEPS_LOCAL_RANK "
      "$GEEPS_COORDINATOR\" > " +
      dir_ +
      "/env.$GEEPS_RANK; "
      "echo hello from $GEEPS_RANK; echo warn $GEEPS_RANK >&2; "
      "printf 'no newline'";
  const Result r = Run({"-n", "4", "--", "sh", "-c", script});
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> coordinators;
  for (int i = 0; i < 4; ++i) {
    std::istringstream in(ReadAll(dir_ + "/env." + std::to_string(i)));
    int rank = -1, size = -1, local = -1;
    std::string coordinator;
    in >> rank >> size >> local >> coordinator;
    EXPECT_EQ(rank, i);
    EXPECT_EQ(size, 4);
    EXPECT_EQ(local, i);
    EXPECT_TRUE(std::regex_match(coordinator, std::regex(R"(127\.0\.0\.1:[1-9][0-9]*)")))
        << coordinator;
    coordinators.insert(coordinator);
    const std::string p = "[rank " + std::to_string(i) + "] ";
    EXPECT_NE(r.out.find(p + "hello from " + std::to_string(i) + "\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "no newline\n"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(p + "warn " + std::to_string(i) + "\n"), std::string::npos) << r.err;
  }
  EXPECT_EQ(coordinators.size(), 1u);
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) EXPECT_EQ(line.rfind("[rank ", 0), 0u) << line;
}

TEST_F(LauncherTest, KeepsAPresetCoordinatorAndOverridesStaleRanks) {
  const Result r =
      Run({"-n", "2", "sh", "-c", "echo $GEEPS_RANK/$GEEPS_WORLD_SIZE@$GEEPS_COORDINATOR"},
          {"GEEPS_COORDINATOR=10.1.2.3:4567", "GEEPS_RANK=9", "GEEPS_WORLD_SIZE=99"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0] 0/2@10.1.2.3:4567\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] 1/2@10.1.2.3:4567\n"), std::string::npos) << r.out;
}

TEST_F(LauncherTest, NoPrefixLeavesTheStreamsAlone) {
  const Result r = Run({"--no-prefix", "-n", "2", "sh", "-c", "echo plain"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "plain\nplain\n");
}

TEST_F(LauncherTest, AFailingRankStopsTheOthersAndItsCodeIsReturned) {
  // Every rank starts a background sleep; rank 1 waits until all have written
  // their pids, then exits 3 while the others wait for their sleeps.
  const std::string script = "sleep 30 & " + WritePids("pid.", "$!") + "; " +
                             "if [ $GEEPS_RANK = 1 ]; then for i in 0 2; do while [ ! -s " + dir_ +
                             "/pid.$i ]; do sleep 0.05; done; done; exit 3; fi; wait";
  const Result r = Run({"-n", "3", "sh", "-c", script});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.err.find("geeps_launch: rank 1 exited with code 3"), std::string::npos) << r.err;
  const std::vector<pid_t> pids = Pids("pid.", 3);
  EXPECT_EQ(pids.size(), 6u);
  ExpectAllGone(pids);
}

TEST_F(LauncherTest, ARankKilledBySignalGives128PlusTheSignal) {
  const Result r =
      Run({"-n", "2", "sh", "-c", "if [ $GEEPS_RANK = 0 ]; then kill -9 $$; fi; exec sleep 30"});
  EXPECT_EQ(r.code, 137) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.err.find("geeps_launch: rank 0 killed by signal 9"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, ARankIgnoringSigtermGetsSigkillAfterTheGracePeriod) {
  const std::string script = "trap '' TERM; " + WritePids("pid.") +
                             "; if [ $GEEPS_RANK = 0 ]; then while [ ! -s " + dir_ +
                             "/pid.1 ]; do sleep 0.05; done; exit 2; fi; exec sleep 30";
  const Result r = Run({"-n", "2", "--grace-s", "0.5", "sh", "-c", script});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.err.find("grace period over"), std::string::npos) << r.err;
  ExpectAllGone(Pids("pid.", 2));
}

TEST_F(LauncherTest, TimeoutStopsEverythingWith124) {
  const Result r =
      Run({"-n", "2", "--timeout-s", "1", "--", "sh", "-c", WritePids("pid.") + "; exec sleep 30"});
  EXPECT_EQ(r.code, 124) << r.err;
  EXPECT_GE(r.seconds, 0.9);
  EXPECT_LT(r.seconds, 6.0);
  EXPECT_NE(r.err.find("timed out after 1 s"), std::string::npos) << r.err;
  ExpectAllGone(Pids("pid.", 2));
}

TEST_F(LauncherTest, BadUsageExitsWith2) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{},
                                             {"true"},
                                             {"-n", "2"},
                                             {"-n", "0", "true"},
                                             {"-n", "x", "true"},
                                             {"--frobnicate", "-n", "1", "true"},
                                             {"-n", "1", "--timeout-s", "0", "true"}}) {
    const Result r = Run(args);
    EXPECT_EQ(r.code, 2) << (args.empty() ? "(no arguments)" : args[0]);
    EXPECT_NE(r.err.find("usage: geeps_launch -n N"), std::string::npos) << r.err;
  }
  const Result help = Run({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("usage: geeps_launch -n N"), std::string::npos) << help.out;
  const Result config = Run({"--help-env=config-markdown"});
  EXPECT_EQ(config.code, 0);
  EXPECT_EQ(config.out.rfind("| field | variable | values | default | meaning |\n", 0), 0u)
      << config.out;
}

TEST_F(LauncherTest, AProgramThatCannotRunGives127) {
  const Result r = Run({"-n", "2", dir_ + "/no-such-program"});
  EXPECT_EQ(r.code, 127) << r.err;
  EXPECT_NE(r.err.find("cannot run"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, SigtermToTheLauncherTerminatesTheRanks) {
  Start({"-n", "2", "sh", "-c", "sleep 30 & " + WritePids("pid.", "$!") + "; wait"});
  ASSERT_TRUE(WaitFor([&] { return Pids("pid.", 2).size() == 4; }, milliseconds(10000)));
  const auto signalled = Clock::now();
  ASSERT_EQ(kill(pid_, SIGTERM), 0);
  const Result r = Wait();
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_NE(r.code, -1) << "the launcher did not exit";
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - signalled).count(), 10.0);
  EXPECT_NE(r.err.find("got signal 15"), std::string::npos) << r.err;
  ExpectAllGone(Pids("pid.", 2));
}

TEST_F(LauncherTest, SigintIsForwardedOnceToEveryRank) {
  Start({"-n", "2", "sh", "-c",
         "trap 'echo got INT; exit 5' INT; sleep 30 & " + WritePids("pid.", "$!") + "; wait"});
  ASSERT_TRUE(WaitFor([&] { return Pids("pid.", 2).size() == 4; }, milliseconds(10000)));
  ASSERT_EQ(kill(pid_, SIGINT), 0);
  const Result r = Wait();
  EXPECT_EQ(r.code, 5) << r.err;
  EXPECT_EQ(r.out, r.out.find("[rank 0]") == 0 ? "[rank 0] got INT\n[rank 1] got INT\n"
                                               : "[rank 1] got INT\n[rank 0] got INT\n");
  ExpectAllGone(Pids("pid.", 2));  // the background sleeps ignore SIGINT: killed at the end
}

TEST_F(LauncherTest, RanksDieWithAKilledLauncher) {
  Start({"-n", "2", "sh", "-c", WritePids("pid.") + "; exec sleep 30"});
  ASSERT_TRUE(WaitFor([&] { return Pids("pid.", 2).size() == 2; }, milliseconds(10000)));
  ASSERT_EQ(kill(pid_, SIGKILL), 0);
  EXPECT_EQ(Wait().code, 128 + SIGKILL);
  ExpectAllGone(Pids("pid.", 2));
}

TEST_F(LauncherTest, WhatARankLeftBehindIsKilledAtTheEnd) {
  // The rank exits 0 at once; its background sleep keeps the output pipe open.
  const Result r =
      Run({"-n", "1", "sh", "-c", "sleep 30 & " + WritePids("pid.", "$!") + "; echo done"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.out.find("[rank 0] done\n"), std::string::npos) << r.out;
  ExpectAllGone(Pids("pid.", 1));
}

}  // namespace
}  // namespace geeps::tools
