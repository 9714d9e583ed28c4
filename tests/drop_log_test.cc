// transport::DropLog: every drop counted, the first of each kind logged with
// the receiver and the reason, later ones of that kind only counted.
#include "transport/drop_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>

namespace geeps::transport {
namespace {

// Occurrences of `needle` in `text`.
int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(DropLogTest, CountsEveryDropAndLogsTheFirstOfEachKind) {
  std::atomic<int64_t> dropped{0};
  DropLog log("shard partition 3", &dropped);
  ::testing::internal::CaptureStderr();
  // Kind 0 three times, kind 2 twice, kind 0 again.
  EXPECT_FALSE(log.Drop("no routing id or header"));
  EXPECT_FALSE(log.Drop("no routing id or header"));
  EXPECT_FALSE(log.Drop("unknown sender", 2));
  EXPECT_FALSE(log.Drop("unknown sender, again", 2));
  EXPECT_FALSE(log.Drop("header too short"));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(dropped.load(), 5);
  EXPECT_EQ(Count(err, "shard partition 3: dropped a frame"), 2) << err;
  EXPECT_EQ(Count(err, "(no routing id or header)"), 1) << err;
  EXPECT_EQ(Count(err, "(unknown sender)"), 1) << err;
  EXPECT_EQ(Count(err, "again"), 0) << err;
  EXPECT_EQ(Count(err, "header too short"), 0) << err;
  EXPECT_TRUE(log.logged(0));
  EXPECT_FALSE(log.logged(1));
  EXPECT_TRUE(log.logged(2));
}

TEST(DropLogTest, KindsPastTheLastCountAsTheLast) {
  std::atomic<int64_t> dropped{0};
  DropLog log("worker 1 channel 0", &dropped);
  ::testing::internal::CaptureStderr();
  log.Drop("a", DropLog::kKinds - 1);
  log.Drop("b", DropLog::kKinds);
  log.Drop("c", 1000);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(dropped.load(), 3);
  EXPECT_EQ(Count(err, "dropped a frame"), 1) << err;
  EXPECT_TRUE(log.logged(DropLog::kKinds + 5));
}

TEST(DropLogTest, TwoLogsShareOneCounter) {
  // A worker's channels count into the worker's one counter.
  std::atomic<int64_t> dropped{0};
  DropLog a("worker 0 channel 0", &dropped), b("worker 0 channel 1", &dropped);
  ::testing::internal::CaptureStderr();
  a.Drop("x");
  b.Drop("x");
  b.Drop("x");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(dropped.load(), 3);
  EXPECT_EQ(Count(err, "channel 0: dropped"), 1) << err;
  EXPECT_EQ(Count(err, "channel 1: dropped"), 1) << err;
}

}  // namespace
}  // namespace geeps::transport
