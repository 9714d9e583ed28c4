// Minimal logging. GEEPS_LOG writes one line to stderr; the level threshold
// comes from GEEPS_LOG_LEVEL (error, warning, info, debug; default warning).
// A broken internal invariant is returned as kInternal, not checked by an
// abort (docs/architecture.md, "Errors").
#ifndef GEEPS_COMMON_LOGGING_H_
#define GEEPS_COMMON_LOGGING_H_

#include <sstream>
#include <string>

namespace geeps::common {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const char* file, int line, const std::string& msg);

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

#define GEEPS_LOG(level)                                                   \
  if (!::geeps::common::LogEnabled(::geeps::common::LogLevel::k##level)) { \
  } else                                                                   \
    ::geeps::common::LogMessage(::geeps::common::LogLevel::k##level, __FILE__, __LINE__).stream()

#endif  // GEEPS_COMMON_LOGGING_H_
