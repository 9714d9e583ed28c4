// Folders a test binary makes under /tmp (mkdtemp), each removed with what
// it holds when the binary exits, whether its tests passed or not, so that
// test runs leave nothing behind.
#ifndef GEEPS_TESTS_TEMP_DIRS_H_
#define GEEPS_TESTS_TEMP_DIRS_H_

#include <stdlib.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace geeps::testing {

class TempDirs {
 public:
  ~TempDirs() {
    for (const std::string& dir : made_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
  // A new folder "/tmp/<prefix>-XXXXXX"; "" when mkdtemp fails.
  std::string Make(const std::string& prefix) {
    std::string path = "/tmp/" + prefix + "-XXXXXX";
    if (mkdtemp(path.data()) == nullptr) return "";
    std::lock_guard<std::mutex> lock(mu_);
    made_.push_back(path);
    return path;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> made_;
};

// The binary's folders (destroyed at exit).
inline std::string MakeTempDir(const std::string& prefix) {
  static TempDirs dirs;
  return dirs.Make(prefix);
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_TEMP_DIRS_H_
