// Helpers of the benchmarks that start processes: collecting "RESULT"
// lines from children, the path of this executable.
#ifndef GEEPS_BENCHMARKS_BENCH_UTIL_H_
#define GEEPS_BENCHMARKS_BENCH_UTIL_H_

#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "../tests/process_util.h"

namespace geeps::bench {

using geeps::testing::Child;

// Seconds per iteration from each child's "RESULT" line (the mean over the
// children that print one); < 0 on a failure (the logs go to stderr).
// `lines`, when given, receives the children's other report lines (those
// starting with PASSES, CLOCKBYTES, SHARDBYTES, WIREBYTES, TIMELINE, CPUTIME or
// MACHINECPU, MACHINEPHASES), before the logs go.
inline double Collect(std::vector<Child>& children, const char* what,
                      std::vector<std::string>* lines = nullptr) {
  const bool ok = geeps::testing::WaitAll(children, std::chrono::minutes(3));
  double sum = 0;
  int n = 0;
  bool failed = !ok;
  for (const Child& c : children) {
    if (c.status != 0) failed = true;
    std::istringstream in(geeps::testing::ReadFile(c.log));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("RESULT ", 0) == 0) {
        sum += std::stod(line.substr(7));
        ++n;
      } else if (lines != nullptr &&
                 (line.rfind("PASSES ", 0) == 0 || line.rfind("CLOCKBYTES ", 0) == 0 ||
                  line.rfind("SHARDBYTES ", 0) == 0 || line.rfind("WIREBYTES ", 0) == 0 ||
                  line.rfind("TIMELINE ", 0) == 0 || line.rfind("CPUTIME ", 0) == 0 ||
                  line.rfind("MACHINECPU ", 0) == 0 || line.rfind("MACHINEPHASES ", 0) == 0)) {
        lines->push_back(line);
      }
    }
  }
  if (failed || n == 0) {
    std::fprintf(stderr, "%s failed:\n%s\n", what, geeps::testing::Logs(children).c_str());
    return -1;
  }
  for (const Child& c : children) std::remove(c.log.c_str());
  return sum / n;
}

inline std::string Self() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
}

}  // namespace geeps::bench

#endif  // GEEPS_BENCHMARKS_BENCH_UTIL_H_
