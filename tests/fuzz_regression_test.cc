// Replays the inputs of the fuzz targets in every build, without clang or
// libFuzzer: each file of tests/fuzz/regressions/<target>/ (inputs that once
// crashed a target) and of tests/fuzz/corpus/<target>/ (the seeds) goes
// through the target's own entry point, compiled in here from
// tests/fuzz/<target>.cc under another name. A crash or a failed property
// aborts the process: the test fails, and the last "replaying" line on stderr
// names the input. Files are listed when the test runs, so a new regression
// input needs no rebuild.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#define GEEPS_FUZZ_ENTRY GeepsFuzzWire
#include "fuzz/fuzz_wire.cc"
#include "test_paths.h"
#undef GEEPS_FUZZ_ENTRY
#define GEEPS_FUZZ_ENTRY GeepsFuzzConfig
#include "fuzz/fuzz_config.cc"
#undef GEEPS_FUZZ_ENTRY
#define GEEPS_FUZZ_ENTRY GeepsFuzzProcessEnv
#include "fuzz/fuzz_process_env.cc"
#undef GEEPS_FUZZ_ENTRY
#define GEEPS_FUZZ_ENTRY GeepsFuzzCheckpoint
#include "fuzz/fuzz_checkpoint.cc"
#undef GEEPS_FUZZ_ENTRY
#define GEEPS_FUZZ_ENTRY GeepsFuzzControl
#include "fuzz/fuzz_control.cc"
#undef GEEPS_FUZZ_ENTRY

#ifndef GEEPS_SOURCE_DIR
#error "GEEPS_SOURCE_DIR (the source folder) must be defined"
#endif

namespace geeps {
namespace {

namespace fs = std::filesystem;
using Entry = int (*)(const uint8_t*, size_t);

// The regular files of `dir`, sorted; none when it does not exist.
std::vector<fs::path> Inputs(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Runs every input of `dir` through `entry`; returns how many.
size_t Replay(const fs::path& dir, Entry entry) {
  size_t n = 0;
  for (const fs::path& file : Inputs(dir)) {
    std::ifstream in(file, std::ios::binary);
    EXPECT_TRUE(in.is_open()) << file;
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replaying %s (%zu bytes)\n", file.c_str(), bytes.size());
    std::fflush(stderr);
    // In a block of exactly its size, as libFuzzer passes it.
    std::unique_ptr<uint8_t[]> data(new uint8_t[bytes.size()]);
    std::copy(bytes.begin(), bytes.end(), data.get());
    EXPECT_EQ(entry(data.get(), bytes.size()), 0) << file;
    ++n;
  }
  return n;
}

const fs::path kFuzzDir = ::geeps::testing::SourceFile("tests/fuzz");

TEST(FuzzRegressionTest, FoldersExist) {
  EXPECT_TRUE(fs::is_directory(kFuzzDir / "regressions")) << kFuzzDir;
  for (const char* target :
       {"fuzz_wire", "fuzz_config", "fuzz_process_env", "fuzz_checkpoint", "fuzz_control"})
    EXPECT_FALSE(Inputs(kFuzzDir / "corpus" / target).empty()) << target;
}

TEST(FuzzRegressionTest, WireRegressions) {
  Replay(kFuzzDir / "regressions" / "fuzz_wire", GeepsFuzzWire);
}
TEST(FuzzRegressionTest, ConfigRegressions) {
  Replay(kFuzzDir / "regressions" / "fuzz_config", GeepsFuzzConfig);
}
TEST(FuzzRegressionTest, ProcessEnvRegressions) {
  Replay(kFuzzDir / "regressions" / "fuzz_process_env", GeepsFuzzProcessEnv);
}

TEST(FuzzRegressionTest, CheckpointRegressions) {
  Replay(kFuzzDir / "regressions" / "fuzz_checkpoint", GeepsFuzzCheckpoint);
}
TEST(FuzzRegressionTest, CheckpointCorpus) {
  EXPECT_GT(Replay(kFuzzDir / "corpus" / "fuzz_checkpoint", GeepsFuzzCheckpoint), 0u);
}

TEST(FuzzRegressionTest, ControlRegressions) {
  Replay(kFuzzDir / "regressions" / "fuzz_control", GeepsFuzzControl);
}
TEST(FuzzRegressionTest, ControlCorpus) {
  EXPECT_GT(Replay(kFuzzDir / "corpus" / "fuzz_control", GeepsFuzzControl), 0u);
}

TEST(FuzzRegressionTest, WireCorpus) {
  EXPECT_GT(Replay(kFuzzDir / "corpus" / "fuzz_wire", GeepsFuzzWire), 0u);
}
TEST(FuzzRegressionTest, ConfigCorpus) {
  EXPECT_GT(Replay(kFuzzDir / "corpus" / "fuzz_config", GeepsFuzzConfig), 0u);
}
TEST(FuzzRegressionTest, ProcessEnvCorpus) {
  EXPECT_GT(Replay(kFuzzDir / "corpus" / "fuzz_process_env", GeepsFuzzProcessEnv), 0u);
}

}  // namespace
}  // namespace geeps
