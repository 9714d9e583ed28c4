// Files a reader must refuse quickly, naming the file, instead of hanging in
// open() (a FIFO), reading forever (/dev/zero), or allocating without bound
// (a huge file): common/file_util.h and its users.
#ifndef GEEPS_TESTS_HOSTILE_FILES_H_
#define GEEPS_TESTS_HOSTILE_FILES_H_

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace geeps::testing {

struct HostileFile {
  const char* kind;      // for messages: "fifo", "/dev/zero", ...
  const char* expected;  // what the error must say
};

// The kinds, in the order MakeHostileFile takes them.
inline std::vector<HostileFile> HostileKinds() {
  return {{"fifo", "a FIFO"},
          {"/dev/zero symlink", "a character device"},
          {"directory", "a directory"},
          {"oversized", "more than"}};
}

// Replaces `path` by hostile file number `k` of HostileKinds(); the oversized
// one is a sparse regular file of `oversized_bytes`. Returns false if it
// could not be made.
inline bool MakeHostileFile(const std::string& path, size_t k, uint64_t oversized_bytes) {
  ::unlink(path.c_str());
  ::rmdir(path.c_str());
  switch (k) {
    case 0:
      return ::mkfifo(path.c_str(), 0600) == 0;
    case 1:
      return ::symlink("/dev/zero", path.c_str()) == 0;
    case 2:
      return ::mkdir(path.c_str(), 0700) == 0;
    default: {
      FILE* f = std::fopen(path.c_str(), "w");
      if (f == nullptr) return false;
      std::fclose(f);
      if (::chmod(path.c_str(), 0600) != 0) return false;
      return ::truncate(path.c_str(), static_cast<off_t>(oversized_bytes)) == 0;
    }
  }
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_HOSTILE_FILES_H_
