// Shared helpers for the cluster tests.
#ifndef GEEPS_TESTS_TEST_UTIL_H_
#define GEEPS_TESTS_TEST_UTIL_H_

#include <cstdlib>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "geeps/config.h"
#include "geeps/geeps.h"
#include "geeps/status.h"

namespace geeps {
// Names a DeviceKind in test output and CTest's test names (GoogleTest finds
// it by argument-dependent lookup).
inline void PrintTo(DeviceKind kind, std::ostream* os) {
  switch (kind) {
    case DeviceKind::kAuto:
      *os << "kAuto";
      return;
    case DeviceKind::kHost:
      *os << "kHost";
      return;
    case DeviceKind::kCuda:
      *os << "kCuda";
      return;
  }
  *os << "DeviceKind(" << static_cast<int>(kind) << ")";
}
}  // namespace geeps

namespace geeps::testing {

// Sets an environment variable (unsets it for a null value) for its own
// lifetime, then restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    Set(value);
  }
  ~ScopedEnv() { Set(saved_ ? saved_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void Set(const char* value) {
    if (value) {
      setenv(name_.c_str(), value, 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// The number after `key` (e.g. "Threads:", "VmRSS:" in KiB) in
// /proc/self/status (-1 if unavailable).
inline long ProcStatusField(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(key.size()));
  }
  return -1;
}

// Whether this build runs under ThreadSanitizer.
inline bool BuiltWithThreadSanitizer() {
#if defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

// How many times longer than a plain build's this build's timing-bound
// waits must be: ThreadSanitizer slows a process of many threads about 5
// times, AddressSanitizer about 2. Tests that race a deadline of their own
// (a heartbeat timeout, say) against the work of several processes on 2
// cores scale that deadline by it, never the bound they assert.
inline int SanitizerSlowdown() {
#if defined(__SANITIZE_THREAD__)
  return 5;
#elif defined(__SANITIZE_ADDRESS__)
  return 2;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return 5;
#elif __has_feature(address_sanitizer)
  return 2;
#else
  return 1;
#endif
#else
  return 1;
#endif
}

// Threads of this process (-1 if unavailable).
inline int ThreadCount() { return static_cast<int>(ProcStatusField("Threads:")); }

// The one-table iteration many tests run: Read then PostRead of `rows` of
// table `table`, PreUpdate then Update of the same rows, Clock; then
// FinishVirtualIteration and StartIterations.
struct ReadUpdateHandles {
  ReadHandle read;
  UpdateHandle update;
};
// zeroed=false: the update's buffer is not zeroed by PreUpdate.
inline StatusOr<ReadUpdateHandles> RecordReadUpdateClock(GeePS& ps, TableId table,
                                                         const std::vector<RowIndex>& rows,
                                                         bool zeroed = true) {
  ReadUpdateHandles h;
  GEEPS_ASSIGN_OR_RETURN(h.read, ps.VirtualRead(table, rows));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(h.read));
  GEEPS_ASSIGN_OR_RETURN(h.update, ps.VirtualPreUpdate(table, rows, zeroed));
  GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h.update));
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  GEEPS_RETURN_IF_ERROR(ps.StartIterations());
  return h;
}

}  // namespace geeps::testing

#define ASSERT_OK(expr)                                  \
  do {                                                   \
    const ::geeps::Status geeps_st_ = (expr);            \
    ASSERT_TRUE(geeps_st_.ok()) << geeps_st_.ToString(); \
  } while (0)
#define EXPECT_OK(expr)                                  \
  do {                                                   \
    const ::geeps::Status geeps_st_ = (expr);            \
    EXPECT_TRUE(geeps_st_.ok()) << geeps_st_.ToString(); \
  } while (0)
// Inside a worker function returning Status.
#define W_CHECK(cond, msg)                                                                 \
  do {                                                                                     \
    if (!(cond))                                                                           \
      return ::geeps::InternalError(std::string("check failed: ") + #cond + ": " + (msg)); \
  } while (0)

#endif  // GEEPS_TESTS_TEST_UTIL_H_
