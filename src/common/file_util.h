// Reading files that someone may have replaced: a FIFO, a device, a
// directory or a file far larger than it can legally be must give an error
// that names it, never a hang in open(), an abort or unbounded memory.
#ifndef GEEPS_COMMON_FILE_UTIL_H_
#define GEEPS_COMMON_FILE_UTIL_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "geeps/status.h"

namespace geeps::common {

// Opens `path` read-only without blocking (a FIFO opens at once instead of
// waiting for a writer), checks with fstat that it is a regular file of at
// most `max_bytes`, and returns the descriptor in blocking mode (the caller
// closes it); `*st` (if given) gets fstat's answer. Errors name `what` (for
// example "checkpoint /data/ckpt/partition-0-clock-4.ckpt"): kNotFound when
// it does not exist, kInvalidArgument when it is not a regular file or is
// too large, kUnavailable when it cannot be opened.
StatusOr<int> OpenRegularFile(const std::string& path, const std::string& what, uint64_t max_bytes,
                              struct stat* st = nullptr);

// OpenRegularFile, then reads the whole file (never more than `max_bytes`,
// even if it grows meanwhile). kUnavailable on a read error.
StatusOr<std::string> ReadRegularFile(const std::string& path, const std::string& what,
                                      uint64_t max_bytes, struct stat* st = nullptr);

}  // namespace geeps::common

#endif  // GEEPS_COMMON_FILE_UTIL_H_
