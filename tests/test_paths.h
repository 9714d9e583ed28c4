// Where tests find the programs they start and the source files they read.
// tests/CMakeLists.txt compiles in where they are in the build and source
// folders (absolute paths: GEEPS_MULTIPROC_WORKER, GEEPS_LAUNCH, ...; and
// GEEPS_SOURCE_DIR). A copy of the test binaries run on another machine (the
// GPU bundle, scripts/gpu-bundle.sh) moves both through the environment:
//   GEEPS_TEST_BIN_DIR     a folder holding every program by its file name
//   GEEPS_TEST_SOURCE_DIR  a folder holding the source files read, under
//                          their paths in the source tree
// A test that reads any other path of the build or source folder fails in
// the bundle's dry run (scripts/gpu-dry-run.sh), which hides the source
// folder, build/ with it, behind an empty one where it can make a mount
// namespace (CI can; it says so where it cannot).
#ifndef GEEPS_TESTS_TEST_PATHS_H_
#define GEEPS_TESTS_TEST_PATHS_H_

#include <cstdlib>
#include <string>

namespace geeps::testing {

// The program built at `built` (an absolute path compiled in), or the one of
// the same file name in $GEEPS_TEST_BIN_DIR.
inline std::string Program(const std::string& built) {
  const char* dir = std::getenv("GEEPS_TEST_BIN_DIR");
  if (dir == nullptr || dir[0] == '\0') return built;
  const size_t slash = built.rfind('/');
  return std::string(dir) + "/" + (slash == std::string::npos ? built : built.substr(slash + 1));
}

// `relative` (a path in the source tree, e.g. "docs/api.md") under
// $GEEPS_TEST_SOURCE_DIR, else under the source folder compiled in
// (GEEPS_SOURCE_DIR; tests/CMakeLists.txt defines it for the tests that
// read sources).
#ifdef GEEPS_SOURCE_DIR
inline std::string SourceFile(const std::string& relative) {
  const char* dir = std::getenv("GEEPS_TEST_SOURCE_DIR");
  return std::string(dir != nullptr && dir[0] != '\0' ? dir : GEEPS_SOURCE_DIR) + "/" + relative;
}
#endif

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_TEST_PATHS_H_
