// Folders tests make under /tmp: TempDir (the caller removes it), and
// MakeTempDir, removed with what it holds when the binary exits, whether
// its tests passed or not, so that test runs leave nothing behind.
#ifndef GEEPS_TESTS_TEMP_DIRS_H_
#define GEEPS_TESTS_TEMP_DIRS_H_

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace geeps::testing {

// A new, empty folder /tmp/geeps-<tag>-XXXXXX.
inline std::string TempDir(const std::string& tag) {
  std::string path = "/tmp/geeps-" + tag + "-XXXXXX";
  if (mkdtemp(path.data()) == nullptr) {
    std::perror("TempDir: mkdtemp");
    std::abort();
  }
  return path;
}

// The folders of MakeTempDir, removed when the binary exits.
class TempDirs {
 public:
  ~TempDirs() {
    for (const std::string& dir : made_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
  std::string Make(const std::string& tag) {
    std::string path = TempDir(tag);
    std::lock_guard<std::mutex> lock(mu_);
    made_.push_back(path);
    return path;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> made_;
};

// A new folder /tmp/geeps-<tag>-XXXXXX, removed when the binary exits.
inline std::string MakeTempDir(const std::string& tag) {
  static TempDirs dirs;
  return dirs.Make(tag);
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_TEMP_DIRS_H_
