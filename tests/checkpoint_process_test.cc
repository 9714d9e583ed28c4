// A whole multi-process job (deterministic BSP, checkpoints every 5 clocks)
// killed with SIGKILL once a checkpoint is complete, restarted with
// GEEPS_RESUME=required, finishes with parameters bitwise equal to an
// uninterrupted run; a truncated checkpoint makes the restart fail naming it.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint_workload.h"
#include "process_util.h"
#include "server/checkpoint.h"
#include "temp_dirs.h"
#include "test_paths.h"
#include "transport/security.h"

namespace geeps {
namespace {

using testing::TrainConfig;

// `tag` inside a new folder (removed when the binary exits).
std::string MakeDir(const std::string& tag) {
  const std::string path = testing::MakeTempDir("ckpt");
  EXPECT_FALSE(path.empty());
  return path + "/" + tag;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// ---- A whole multi-process job killed with SIGKILL ------------------------------

std::vector<testing::Child> StartJob(int n, const testing::Env& extra, int iterations,
                                     int delay_ms) {
  const int port = testing::FreePort();
  std::vector<testing::Child> children;
  for (int r = 0; r < n; ++r) {
    testing::Env env = {{"GEEPS_COORDINATOR", "127.0.0.1:" + std::to_string(port)},
                        {"GEEPS_TIMEOUT_MS", "20000"},
                        {"GEEPS_HEARTBEAT_TIMEOUT_MS", "2000"},
                        {"GEEPS_RANK", std::to_string(r)},
                        {"GEEPS_WORLD_SIZE", std::to_string(n)}};
    for (const auto& [k, v] : extra) env[k] = v;
    children.push_back(testing::Spawn(
        {::geeps::testing::Program(GEEPS_MULTIPROC_WORKER), "--train", "1", "--iterations",
         std::to_string(iterations), "--delay-ms", std::to_string(delay_ms), "--channels", "2"},
        env));
  }
  return children;
}

// The line "params <hex>" of a child's log.
std::string Params(const testing::Child& c) {
  const std::string log = testing::ReadFile(c.log);
  const size_t at = log.find("params ");
  if (at == std::string::npos) return "";
  return log.substr(at + 7, log.find('\n', at) - at - 7);
}

TEST(CheckpointProcessTest, SigkillWholeJobThenResumeIsBitwiseEqual) {
  constexpr int kIters = 40;
  // Uninterrupted.
  auto ref = StartJob(2, {}, kIters, 0);
  ASSERT_TRUE(testing::WaitAll(ref, std::chrono::milliseconds(30000))) << testing::Logs(ref);
  for (const auto& c : ref) ASSERT_EQ(c.status, 0) << testing::Logs(ref);
  const std::string expected = Params(ref[0]);
  ASSERT_FALSE(expected.empty()) << testing::Logs(ref);
  EXPECT_EQ(Params(ref[1]), expected);

  // With checkpoints every 5 clocks, killed (all ranks, SIGKILL) once one is
  // complete.
  const std::string dir = MakeDir("ckpt");
  const testing::Env ckpt = {{"GEEPS_CHECKPOINT_DIR", dir}, {"GEEPS_CHECKPOINT_EVERY", "5"}};
  auto job = StartJob(2, ckpt, kIters, 25);
  Config shape = TrainConfig(2, 2, 2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int64_t complete = 0;
  while (complete < 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    complete = server::NewestCompleteClock(server::ListCheckpoints(dir),
                                           server::CheckpointingPartitions(shape));
  }
  for (auto& c : job) kill(c.pid, SIGKILL);
  testing::WaitAll(job, std::chrono::milliseconds(10000));
  ASSERT_GE(complete, 10) << testing::Logs(job);
  for (const auto& c : job) EXPECT_EQ(c.status, 128 + SIGKILL) << testing::Logs(job);

  // Restart every rank with resume.
  testing::Env resume = ckpt;
  resume["GEEPS_RESUME"] = "required";
  auto again = StartJob(2, resume, kIters, 0);
  ASSERT_TRUE(testing::WaitAll(again, std::chrono::milliseconds(30000))) << testing::Logs(again);
  for (const auto& c : again) ASSERT_EQ(c.status, 0) << testing::Logs(again);
  const std::string logs = testing::Logs(again);
  EXPECT_EQ(logs.find("resumed at clock 0"), std::string::npos) << logs;
  EXPECT_NE(logs.find("resumed at clock"), std::string::npos) << logs;
  EXPECT_EQ(Params(again[0]), expected) << logs;
  EXPECT_EQ(Params(again[1]), expected) << logs;

  // A corrupt newest file: every rank fails at the start, naming it.
  const auto files = server::ListCheckpoints(dir);
  const int64_t newest = *files.at(0).rbegin();
  const std::string victim = server::CheckpointPath(dir, 0, newest);
  std::string bytes = ReadBytes(victim);
  bytes.resize(bytes.size() / 2);
  WriteBytes(victim, bytes);
  auto broken = StartJob(2, resume, kIters, 0);
  ASSERT_TRUE(testing::WaitAll(broken, std::chrono::milliseconds(30000))) << testing::Logs(broken);
  EXPECT_NE(broken[0].status, 0);
  EXPECT_NE(testing::ReadFile(broken[0].log).find("truncated"), std::string::npos)
      << testing::Logs(broken);
}

// A job with CURVE keys MACs its checkpoints: it resumes from its own, and
// refuses one whose rows were edited with the CRC made right again.
TEST(CheckpointProcessTest, WithCurveKeysAnEditedCheckpointIsRefused) {
  constexpr int kIters = 20;
  const std::string dir = MakeDir("ckpt");
  const std::string key_file = dir + ".key";
  auto keys = transport::NewCurveKeys();
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_TRUE(transport::WriteCurveKeyFile(key_file, *keys, false).ok());
  testing::Env env = {{"GEEPS_CHECKPOINT_DIR", dir},
                      {"GEEPS_CHECKPOINT_EVERY", "5"},
                      {"GEEPS_CURVE_KEYS", key_file}};
  auto first = StartJob(2, env, kIters, 0);
  ASSERT_TRUE(testing::WaitAll(first, std::chrono::milliseconds(30000))) << testing::Logs(first);
  for (const auto& c : first) ASSERT_EQ(c.status, 0) << testing::Logs(first);
  env["GEEPS_RESUME"] = "required";
  auto again = StartJob(2, env, kIters, 0);
  ASSERT_TRUE(testing::WaitAll(again, std::chrono::milliseconds(30000))) << testing::Logs(again);
  for (const auto& c : again) ASSERT_EQ(c.status, 0) << testing::Logs(again);
  EXPECT_NE(testing::Logs(again).find("resumed at clock"), std::string::npos);
  // Edit a row value of the newest checkpoint of partition 0, CRC repaired.
  const auto files = server::ListCheckpoints(dir);
  const int64_t newest = *files.at(0).rbegin();
  const std::string victim = server::CheckpointPath(dir, 0, newest);
  std::string bytes = ReadBytes(victim);
  ASSERT_GT(bytes.size(), server::kCheckpointHeaderBytes + 64);
  bytes[server::kCheckpointHeaderBytes + 24 + 2] ^= 0x10;
  const uint32_t crc = server::Crc32(bytes.data(), bytes.size() - 4);
  std::memcpy(&bytes[bytes.size() - 4], &crc, 4);
  WriteBytes(victim, bytes);
  auto broken = StartJob(2, env, kIters, 0);
  ASSERT_TRUE(testing::WaitAll(broken, std::chrono::milliseconds(40000))) << testing::Logs(broken);
  EXPECT_NE(broken[0].status, 0) << testing::Logs(broken);
  EXPECT_NE(testing::Logs(broken).find("MAC mismatch"), std::string::npos) << testing::Logs(broken);
}

}  // namespace
}  // namespace geeps
