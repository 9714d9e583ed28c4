#include "common/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace geeps::common {
namespace {

std::string Kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

StatusOr<int> OpenRegularFile(const std::string& path, const std::string& what, uint64_t max_bytes,
                              struct stat* st_out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) return NotFoundError(what + " does not exist");
    return UnavailableError("cannot open " + what + ": " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return UnavailableError("cannot stat " + what + ": " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(what + " is " + Kind(st.st_mode) + ", not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return InvalidArgumentError(what + " has " + std::to_string(st.st_size) +
                                " bytes, more than the " + std::to_string(max_bytes) +
                                " it can hold");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int e = errno;
    ::close(fd);
    return UnavailableError("cannot read " + what + ": " + std::strerror(e));
  }
  if (st_out != nullptr) *st_out = st;
  return fd;
}

StatusOr<std::string> ReadRegularFile(const std::string& path, const std::string& what,
                                      uint64_t max_bytes, struct stat* st_out) {
  struct stat st {};
  GEEPS_ASSIGN_OR_RETURN(int fd, OpenRegularFile(path, what, max_bytes, &st));
  if (st_out != nullptr) *st_out = st;
  std::string bytes;
  bytes.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return UnavailableError("cannot read " + what + ": " + std::strerror(e));
    }
    if (n == 0) break;
    if (bytes.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return InvalidArgumentError(what + " grew past the " + std::to_string(max_bytes) +
                                  " bytes it can hold while it was read");
    }
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

}  // namespace geeps::common
