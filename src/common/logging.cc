#include "common/logging.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "common/mutex.h"

namespace geeps::common {
namespace {

LogLevel ThresholdFromEnv() {
  const char* v = std::getenv("GEEPS_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kWarning;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  if (std::strcmp(v, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  // The calls that read the environment return this as an error
  // (CheckLogLevelEnvironment); a process that makes none still hears it.
  if (v[0] != '\0' && std::strcmp(v, "warning") != 0)
    std::cerr << "[geeps W logging.cc] GEEPS_LOG_LEVEL='" << v
              << "' is not one of error|warning|info|debug: logging at warning" << std::endl;
  return LogLevel::kWarning;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "E";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kDebug:
      return "D";
  }
  return "?";
}

Mutex& LogMutex() {
  static Mutex mu;
  return mu;
}

}  // namespace

bool LogEnabled(LogLevel level) {
  static const LogLevel kThreshold = ThresholdFromEnv();
  return static_cast<int>(level) <= static_cast<int>(kThreshold);
}

void LogLine(LogLevel level, const char* file, int line, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  MutexLock lock(&LogMutex());
  std::cerr << "[geeps " << LevelName(level) << " " << (base ? base + 1 : file) << ":" << line
            << "] " << msg << std::endl;
}

}  // namespace geeps::common
