// A partition's checkpoint writer alone (src/server/checkpoint_writer.h):
// which clocks it saves, that only complete checkpoints reach the files, and
// that a file read back is checked against the partition's tables.
#include "server/checkpoint_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "server/checkpoint.h"
#include "temp_dirs.h"
#include "test_util.h"

namespace geeps {
namespace {

using server::CheckpointData;
using server::CheckpointShape;
using server::CheckpointWriter;

constexpr uint64_t kFingerprint = 0xfeedull;

// A new folder (removed when the binary exits).
std::string TempDir() {
  const std::string path = testing::MakeTempDir("ckpt-writer");
  EXPECT_FALSE(path.empty());
  return path;
}

// Partition 1 of 2 owns rows [4, 8) of table 0 (width 2) and [10, 13) of
// table 2 (width 1); table 1 is local.
std::vector<CheckpointShape> Shapes() {
  std::vector<CheckpointShape> s(3);
  s[0] = {"a", true, 2, {4, 8}};
  s[1] = {"local", false, 0, {}};
  s[2] = {"b", true, 1, {10, 13}};
  return s;
}

std::vector<float> Values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

// Both tables' rows at `clock`, table 2 first (the file sorts them).
void AddBoth(CheckpointWriter& w, int64_t clock) {
  w.AddTable(2, 1, {10, 13}, Values(3, 100.0f * static_cast<float>(clock)), clock);
  w.AddTable(0, 2, {4, 8}, Values(8, 10.0f * static_cast<float>(clock)), clock);
}

TEST(CheckpointWriterTest, WritesCompleteCheckpointsOfPeriodicAndRequestedClocksOnly) {
  const std::string dir = TempDir();
  CheckpointWriter w(dir, /*every=*/2, kFingerprint, 1, 2, /*num_tables=*/2);
  w.Start();
  AddBoth(w, 1);  // not a checkpoint clock
  AddBoth(w, 2);  // periodic
  w.Request(3);
  AddBoth(w, 3);                                 // requested
  AddBoth(w, 5);                                 // neither
  w.AddTable(0, 2, {4, 8}, Values(8, 0.0f), 6);  // periodic, but only one table: dropped
  w.Stop();
  EXPECT_EQ(w.written(), 2);
  EXPECT_EQ(w.last_clock(), 3);
  const auto listed = server::ListCheckpoints(dir);
  ASSERT_EQ(listed.count(1), 1u);
  EXPECT_EQ(listed.at(1), (std::set<int64_t>{2, 3}));
  EXPECT_EQ(listed.size(), 1u);
  for (int64_t clock : {2, 3}) {
    StatusOr<CheckpointData> d = w.Read(clock, Shapes());
    ASSERT_OK(d.status());
    EXPECT_EQ(d->clock, clock);
    EXPECT_EQ(d->partition, 1u);
    EXPECT_EQ(d->num_partitions, 2u);
    ASSERT_EQ(d->tables.size(), 2u);
    EXPECT_EQ(d->tables[0].table, 0u);
    EXPECT_EQ(d->tables[0].first_row, 4u);
    EXPECT_EQ(d->tables[0].data, Values(8, 10.0f * static_cast<float>(clock)));
    EXPECT_EQ(d->tables[1].table, 2u);
    EXPECT_EQ(d->tables[1].data, Values(3, 100.0f * static_cast<float>(clock)));
  }
}

TEST(CheckpointWriterTest, AFileReadBackIsCheckedAgainstThePartitionsTables) {
  const std::string dir = TempDir();
  CheckpointWriter w(dir, 0, kFingerprint, 1, 2, 2);
  w.Start();
  w.Request(4);
  AddBoth(w, 4);
  w.Stop();
  ASSERT_OK(w.Read(4, Shapes()).status());
  struct Case {
    const char* name;
    std::vector<CheckpointShape> shapes;
    StatusCode code;
    const char* says;
  };
  std::vector<Case> cases;
  cases.push_back({"no such clock", Shapes(), StatusCode::kNotFound, "clock-5"});
  auto wider = Shapes();
  wider[2].width = 2;  // also a larger file than the partition's
  cases.push_back({"other width", wider, StatusCode::kDataLoss, ""});
  auto moved = Shapes();
  moved[0].span = {3, 7};
  cases.push_back({"other rows", moved, StatusCode::kDataLoss, "the partition owns [3, 7)"});
  auto fewer = Shapes();
  fewer[2].saved = false;
  cases.push_back({"an entry not saved here", fewer, StatusCode::kDataLoss, ""});
  auto more = Shapes();
  more[1] = {"c", true, 1, {0, 1}};
  cases.push_back({"a table missing", more, StatusCode::kDataLoss, ""});
  for (const Case& c : cases) {
    const Status st = w.Read(c.name == std::string("no such clock") ? 5 : 4, c.shapes).status();
    EXPECT_EQ(st.code(), c.code) << c.name << ": " << st.message();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.name << ": " << st.message();
  }
  // With a key, a file written without one is refused.
  CheckpointWriter keyed(dir, 0, kFingerprint, 1, 2, 2);
  keyed.SetKey(server::CheckpointKeyFromSecret("secret"));
  EXPECT_EQ(keyed.Read(4, Shapes()).status().code(), StatusCode::kDataLoss);
}

TEST(CheckpointWriterTest, WithoutAFolderNothingIsWritten) {
  CheckpointWriter w("", 1, kFingerprint, 0, 1, 1);
  w.Start();
  w.Request(1);
  w.AddTable(0, 1, {0, 1}, {1.0f}, 1);
  w.Stop();
  w.Stop();  // idempotent
  EXPECT_EQ(w.written(), 0);
  EXPECT_EQ(w.last_clock(), 0);
}

}  // namespace
}  // namespace geeps
