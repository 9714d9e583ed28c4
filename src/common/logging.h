// Minimal logging and invariant checks. GEEPS_LOG writes one line to stderr;
// the level threshold comes from GEEPS_LOG_LEVEL (error, warning, info,
// debug; default warning). GEEPS_CHECK is for broken invariants only (bugs in
// libgeeps), never for anything a user or the network can cause.
#ifndef GEEPS_COMMON_LOGGING_H_
#define GEEPS_COMMON_LOGGING_H_

#include <sstream>
#include <string>

namespace geeps::common {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const char* file, int line, const std::string& msg);
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond,
                              const std::string& msg);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line)
      : level_(level), file_(file), line_(line) {}
  ~LogMessage() { LogLine(level_, file_, line_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

}  // namespace geeps::common

#define GEEPS_LOG(level)                                                    \
  if (!::geeps::common::LogEnabled(::geeps::common::LogLevel::k##level)) {  \
  } else                                                                    \
    ::geeps::common::LogMessage(::geeps::common::LogLevel::k##level,        \
                                __FILE__, __LINE__)                         \
        .stream()

#define GEEPS_CHECK(cond)                                                      \
  do {                                                                         \
    if (!(cond)) ::geeps::common::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#endif  // GEEPS_COMMON_LOGGING_H_
