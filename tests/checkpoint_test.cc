// Checkpoints and resume: the file format and every kind of bad file, the
// atomic write, config checks, and embedded clusters that stop and resume
// (periodic and requested checkpoints) with parameters bitwise equal to an
// uninterrupted run. The SIGKILL test of a whole multi-process job is in
// tests/checkpoint_process_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint_workload.h"
#include "geeps/embedded_cluster.h"
#include "hostile_files.h"
#include "process_util.h"
#include "server/checkpoint.h"
#include "temp_dirs.h"
#include "test_util.h"

namespace geeps {
namespace {

using server::CheckpointData;
using server::CheckpointTable;
using server::DecodeCheckpoint;
using server::EncodeCheckpoint;
using testing::TrainConfig;
using testing::TrainOptions;

// A new folder (removed when the binary exits), or `tag` inside one.
std::string MakeDir(const std::string& tag) {
  const std::string path = testing::MakeTempDir("ckpt");
  EXPECT_FALSE(path.empty());
  return path + (tag.empty() ? "" : "/" + tag);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

CheckpointData Sample() {
  CheckpointData d;
  d.fingerprint = 0x1234567890abcdefull;
  d.partition = 3;
  d.num_partitions = 4;
  d.clock = 12;
  for (TableId t : {0u, 2u}) {
    CheckpointTable e;
    e.table = t;
    e.width = 3 + t;
    e.first_row = 10 * t;
    e.row_count = 5;
    for (size_t k = 0; k < e.row_count * e.width; ++k) e.data.push_back(0.5f * k - t);
    d.tables.push_back(e);
  }
  return d;
}

bool Same(const CheckpointData& a, const CheckpointData& b) {
  if (a.fingerprint != b.fingerprint || a.partition != b.partition ||
      a.num_partitions != b.num_partitions || a.clock != b.clock ||
      a.tables.size() != b.tables.size())
    return false;
  for (size_t i = 0; i < a.tables.size(); ++i) {
    const CheckpointTable &x = a.tables[i], &y = b.tables[i];
    if (x.table != y.table || x.width != y.width || x.first_row != y.first_row ||
        x.row_count != y.row_count || x.data.size() != y.data.size() ||
        std::memcmp(x.data.data(), y.data.data(), x.data.size() * 4) != 0)
      return false;
  }
  return true;
}

// Decodes `bytes` as the sample's file and expects `code` with `text`.
void ExpectRejected(const std::string& bytes, StatusCode code, const std::string& text,
                    uint64_t fingerprint = Sample().fingerprint) {
  auto r = DecodeCheckpoint(bytes, "F", fingerprint, 3, 12);
  ASSERT_FALSE(r.ok()) << "accepted: " << text;
  EXPECT_EQ(r.status().code(), code) << r.status();
  EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("checkpoint F"), std::string::npos) << r.status();
}

TEST(CheckpointFormatTest, Crc32KnownValue) {
  EXPECT_EQ(server::Crc32("123456789", 9), 0xCBF43926u);  // the standard check value
  EXPECT_EQ(server::Crc32("", 0), 0u);
  EXPECT_EQ(server::Crc32("6789", 4, server::Crc32("12345", 5)), 0xCBF43926u);
}

TEST(CheckpointFormatTest, RoundTrip) {
  const CheckpointData d = Sample();
  auto back = DecodeCheckpoint(EncodeCheckpoint(d), "F", d.fingerprint, 3, 12);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(Same(d, *back));
  // Through a file, atomically written.
  const std::string dir = MakeDir("");
  ASSERT_OK(server::WriteCheckpointFile(dir, d));
  std::vector<std::pair<uint64_t, uint32_t>> shape;
  for (const auto& t : d.tables) shape.emplace_back(t.row_count, t.width);
  auto read =
      server::ReadCheckpointFile(dir, d.fingerprint, 3, 12, server::CheckpointFileBytes(shape));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(Same(d, *read));
  EXPECT_EQ(server::ListCheckpoints(dir)[3], (std::set<int64_t>{12}));
}

TEST(CheckpointFormatTest, EveryCorruptionIsRejectedWithAClearError) {
  const std::string good = EncodeCheckpoint(Sample());
  auto flip = [&](size_t at) {
    std::string b = good;
    b[at] = static_cast<char>(b[at] ^ 0x5a);
    return b;
  };
  ExpectRejected("", StatusCode::kDataLoss, "the file is empty");
  ExpectRejected(flip(0), StatusCode::kDataLoss, "bad magic");
  ExpectRejected(flip(40), StatusCode::kDataLoss, "checksum mismatch");  // the clock
  ExpectRejected(flip(24), StatusCode::kDataLoss, "checksum mismatch");  // the fingerprint
  ExpectRejected(flip(good.size() / 2), StatusCode::kDataLoss, "checksum mismatch");  // rows
  ExpectRejected(flip(good.size() - 2), StatusCode::kDataLoss, "checksum mismatch");  // crc
  ExpectRejected(flip(16), StatusCode::kDataLoss, "bytes");  // the size field
  // Wrong version (the checksum comes later).
  std::string v2 = good;
  v2[8] = 2;
  ExpectRejected(v2, StatusCode::kDataLoss, "format version 2");
  // Truncated at several points.
  for (size_t n : {size_t{1}, size_t{10}, size_t{63}, size_t{64}, size_t{67}, size_t{100},
                   good.size() / 2, good.size() - 4, good.size() - 1})
    ExpectRejected(good.substr(0, n), StatusCode::kDataLoss, "truncated");
  // Trailing bytes.
  ExpectRejected(good + "x", StatusCode::kDataLoss, "trailing");
  // Another job's file, and a renamed one.
  ExpectRejected(good, StatusCode::kFailedPrecondition, "belongs to another job", 99);
  auto renamed = DecodeCheckpoint(good, "F", Sample().fingerprint, 2, 12);
  ASSERT_FALSE(renamed.ok());
  EXPECT_EQ(renamed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(renamed.status().message().find("renamed"), std::string::npos);
  // Missing file.
  auto missing = server::ReadCheckpointFile(MakeDir(""), 1, 0, 4, 1 << 20);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("partition-0-clock-4.ckpt"), std::string::npos);
}

// A checkpoint replaced by a FIFO, a symlink to /dev/zero, a directory or a
// file larger than the partition's checkpoint can be: kDataLoss naming it,
// at once (before: open() blocked forever on the FIFO, and /dev/zero ended
// in std::bad_alloc).
TEST(CheckpointFormatTest, FilesThatAreNotACheckpointAreRefusedWithoutReadingThem) {
  const CheckpointData d = Sample();
  std::vector<std::pair<uint64_t, uint32_t>> shape;
  for (const auto& t : d.tables) shape.emplace_back(t.row_count, t.width);
  const uint64_t bytes = server::CheckpointFileBytes(shape);
  EXPECT_EQ(bytes, EncodeCheckpoint(d).size());
  const std::string dir = MakeDir("");
  const std::string path = server::CheckpointPath(dir, 3, 12);
  const auto kinds = testing::HostileKinds();
  for (size_t k = 0; k < kinds.size(); ++k) {
    ASSERT_TRUE(testing::MakeHostileFile(path, k, bytes + 1)) << kinds[k].kind;
    auto read = server::ReadCheckpointFile(dir, d.fingerprint, 3, 12, bytes);
    ASSERT_FALSE(read.ok()) << kinds[k].kind;
    EXPECT_EQ(read.status().code(), StatusCode::kDataLoss) << kinds[k].kind;
    EXPECT_NE(read.status().message().find(path), std::string::npos) << read.status();
    EXPECT_NE(read.status().message().find(kinds[k].expected), std::string::npos) << read.status();
  }
}

// With the job's CURVE key, a checkpoint carries a MAC: an edit with the
// CRC recomputed (which the CRC alone cannot catch: the keyless read
// accepts it) is refused, as is a file without a MAC or with another key's.
TEST(CheckpointFormatTest, KeyedCheckpointsRefuseADeliberateEdit) {
  const CheckpointData d = Sample();
  const server::CheckpointKey key =
      server::CheckpointKeyFromSecret("xF0w?k5a+1!x<gkXc-PYZkK0Y8yK=gVEwPvU6a9u");
  const server::CheckpointKey other =
      server::CheckpointKeyFromSecret("yF0w?k5a+1!x<gkXc-PYZkK0Y8yK=gVEwPvU6a9u");
  EXPECT_NE(key, other);
  const std::string keyed = EncodeCheckpoint(d, &key);
  std::vector<std::pair<uint64_t, uint32_t>> shape;
  for (const auto& t : d.tables) shape.emplace_back(t.row_count, t.width);
  EXPECT_EQ(keyed.size(), server::CheckpointFileBytes(shape, /*mac=*/true));
  auto back = DecodeCheckpoint(keyed, "F", d.fingerprint, 3, 12, &key);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(Same(d, *back));
  // Read without the key (a job without CURVE): the CRC alone.
  EXPECT_TRUE(DecodeCheckpoint(keyed, "F", d.fingerprint, 3, 12).ok());
  // A row value changed, and the CRC recomputed to match.
  std::string edited = keyed;
  edited[server::kCheckpointHeaderBytes + 24 + 5] ^= 0x40;
  const uint32_t crc = server::Crc32(edited.data(), edited.size() - 4);
  std::memcpy(&edited[edited.size() - 4], &crc, 4);
  EXPECT_TRUE(DecodeCheckpoint(edited, "F", d.fingerprint, 3, 12).ok())
      << "without a key the edit passes: the CRC is not a MAC";
  auto refused = DecodeCheckpoint(edited, "F", d.fingerprint, 3, 12, &key);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find("MAC mismatch"), std::string::npos) << refused.status();
  // Another job's key, and a file without a MAC.
  auto foreign = DecodeCheckpoint(keyed, "F", d.fingerprint, 3, 12, &other);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("MAC mismatch"), std::string::npos);
  auto unkeyed = DecodeCheckpoint(EncodeCheckpoint(d), "F", d.fingerprint, 3, 12, &key);
  ASSERT_FALSE(unkeyed.ok());
  EXPECT_EQ(unkeyed.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(unkeyed.status().message().find("no MAC"), std::string::npos) << unkeyed.status();
  // Through a file.
  const std::string dir = MakeDir("");
  ASSERT_OK(server::WriteCheckpointFile(dir, d, 2, &key));
  auto read = server::ReadCheckpointFile(dir, d.fingerprint, 3, 12,
                                         server::CheckpointFileBytes(shape, true), &key);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(Same(d, *read));
}

TEST(CheckpointFormatTest, TemporaryFilesAreIgnoredAndOnlyTheLastTwoAreKept) {
  const std::string dir = MakeDir("");
  CheckpointData d = Sample();
  for (int64_t k : {4, 8, 12, 16}) {
    d.clock = k;
    ASSERT_OK(server::WriteCheckpointFile(dir, d));
  }
  // A crash mid-write leaves a temporary file; junk names are ignored too.
  WriteBytes(dir + "/.partition-3-clock-20.ckpt.tmp-1-1", "half a file");
  WriteBytes(dir + "/partition-3-clock-x.ckpt", "junk");
  WriteBytes(dir + "/partition--1-clock-24.ckpt", "junk");
  const auto listed = server::ListCheckpoints(dir);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed.at(3), (std::set<int64_t>{12, 16}));
  // Completeness: the newest clock every partition has.
  std::map<int, std::set<int64_t>> avail = {{0, {8, 12}}, {1, {12, 16}}, {2, {4, 8}}};
  EXPECT_EQ(server::NewestCompleteClock(avail, {0, 1}), 12);
  EXPECT_EQ(server::NewestCompleteClock(avail, {0, 2}), 8);
  EXPECT_EQ(server::NewestCompleteClock(avail, {1, 2}), 0);
  EXPECT_EQ(server::NewestCompleteClock(avail, {0, 3}), 0);
}

TEST(CheckpointConfigTest, FieldsAndEnvironmentAreValidated) {
  Config c = TrainConfig(1, 1, 1);
  c.checkpoint_every = 5;
  Status st = ValidateConfig(c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("checkpoint_dir is empty"), std::string::npos) << st;
  c.checkpoint_every = -1;
  c.checkpoint_dir = "/tmp/x";
  EXPECT_NE(ValidateConfig(c).message().find("checkpoint_every"), std::string::npos);
  c.checkpoint_every = 0;
  c.checkpoint_dir.clear();
  c.resume = ResumeMode::kRequired;
  EXPECT_EQ(ValidateConfig(c).code(), StatusCode::kInvalidArgument);
  c.checkpoint_dir = "/tmp/x";
  EXPECT_OK(ValidateConfig(c));

  setenv("GEEPS_CHECKPOINT_DIR", "/tmp/y", 1);
  setenv("GEEPS_CHECKPOINT_EVERY", "7", 1);
  setenv("GEEPS_RESUME", "if-present", 1);
  ASSERT_OK(ApplyEnvironment(&c));
  EXPECT_EQ(c.checkpoint_dir, "/tmp/y");
  EXPECT_EQ(c.checkpoint_every, 7);
  EXPECT_EQ(c.resume, ResumeMode::kIfPresent);
  setenv("GEEPS_RESUME", "yes", 1);
  st = ApplyEnvironment(&c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("GEEPS_RESUME"), std::string::npos);
  setenv("GEEPS_RESUME", "off", 1);
  setenv("GEEPS_CHECKPOINT_EVERY", "-3", 1);
  EXPECT_NE(ApplyEnvironment(&c).message().find("GEEPS_CHECKPOINT_EVERY"), std::string::npos);
  unsetenv("GEEPS_CHECKPOINT_DIR");
  unsetenv("GEEPS_CHECKPOINT_EVERY");
  unsetenv("GEEPS_RESUME");
}

// ---- Embedded clusters --------------------------------------------------------

struct RunResult {
  Status status;
  std::vector<std::vector<float>> params;  // per worker (full runs)
  std::vector<int64_t> resumed;            // per worker
  int64_t written = 0;
};

RunResult RunCluster(const Config& c, const TrainOptions& o) {
  RunResult r;
  auto cluster = EmbeddedCluster::Start(c);
  if (!cluster.ok()) {
    r.status = cluster.status();
    return r;
  }
  r.params.resize(c.num_workers);
  r.resumed.resize(c.num_workers);
  r.status = (*cluster)->RunWorkers([&](GeePS& ps) {
    r.resumed[ps.rank()] = ps.resumed_clock();
    return testing::Train(ps, c, o, &r.params[ps.rank()]);
  });
  EXPECT_OK((*cluster)->Shutdown());
  r.written = (*cluster)->checkpoints_written();
  return r;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return !a.empty() && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

constexpr int kTotal = 14;

const std::vector<float>& Reference() {
  static const std::vector<float> kRef = [] {
    TrainOptions o;
    o.total = kTotal;
    RunResult r = RunCluster(TrainConfig(3, 1, 1), o);
    EXPECT_OK(r.status);
    for (int w = 1; w < 3; ++w) EXPECT_TRUE(SameBits(r.params[0], r.params[w]));
    return r.params[0];
  }();
  return kRef;
}

TEST(CheckpointClusterTest, PeriodicCheckpointsResumeBitwiseEqual) {
  const std::string dir = MakeDir("ckpt");
  Config c = TrainConfig(3, 2, 2);
  c.checkpoint_dir = dir;
  c.checkpoint_every = 4;
  TrainOptions o;
  o.total = kTotal;
  o.stop_after = 10;  // clocks 1..11 done: checkpoints of clocks 4 and 8
  RunResult first = RunCluster(c, o);
  ASSERT_OK(first.status);
  EXPECT_EQ(first.written, 2 * 4);  // 2 checkpoints x 4 partitions
  const auto files = server::ListCheckpoints(dir);
  ASSERT_EQ(files.size(), 4u);
  for (const auto& [p, clocks] : files) EXPECT_EQ(clocks, (std::set<int64_t>{4, 8})) << p;

  c.resume = ResumeMode::kRequired;
  RunResult second = RunCluster(c, o = TrainOptions{kTotal, -1, nullptr});
  ASSERT_OK(second.status);
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(second.resumed[w], 8);
    EXPECT_TRUE(SameBits(second.params[w], Reference())) << "worker " << w;
  }
  // Checkpoints of clock 12 were written, 4 deleted.
  for (const auto& [p, clocks] : server::ListCheckpoints(dir))
    EXPECT_EQ(clocks, (std::set<int64_t>{8, 12})) << p;
}

TEST(CheckpointClusterTest, RequestedCheckpointResumesBitwiseEqual) {
  const std::string dir = MakeDir("ckpt");
  Config c = TrainConfig(3, 1, 2);
  c.checkpoint_dir = dir;
  TrainOptions o;
  o.total = kTotal;
  o.stop_after = 9;
  int64_t asked = -1;
  o.before_clock = [&](GeePS& ps, int64_t i) {
    // Mid-iteration 5 (clock 6): the checkpoint is the end of clock 7.
    if (ps.rank() == 1 && i == 5) {
      auto k = ps.RequestCheckpoint();
      EXPECT_TRUE(k.ok()) << k.status();
      asked = k.ok() ? *k : -1;
    }
  };
  RunResult first = RunCluster(c, o);
  ASSERT_OK(first.status);
  EXPECT_EQ(asked, 8);
  EXPECT_EQ(first.written, 2);
  c.resume = ResumeMode::kRequired;
  RunResult second = RunCluster(c, TrainOptions{kTotal, -1, nullptr});
  ASSERT_OK(second.status);
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(second.resumed[w], 8);
    EXPECT_TRUE(SameBits(second.params[w], Reference())) << "worker " << w;
  }
}

TEST(CheckpointClusterTest, RequestWithoutFolderIsAnError) {
  auto cluster = EmbeddedCluster::Start(TrainConfig(1, 1, 1));
  ASSERT_TRUE(cluster.ok());
  auto k = (*cluster)->worker(0)->RequestCheckpoint();
  EXPECT_EQ(k.status().code(), StatusCode::kFailedPrecondition);
}

// Bad files make the start fail with an error naming the file; nothing is
// loaded. Deleting the bad newest checkpoint falls back to the older one.
TEST(CheckpointClusterTest, BadCheckpointsAreRejectedAtStart) {
  const std::string dir = MakeDir("ckpt");
  Config c = TrainConfig(2, 1, 2);
  c.checkpoint_dir = dir;
  c.checkpoint_every = 3;
  ASSERT_OK(RunCluster(c, TrainOptions{kTotal, 7, nullptr}).status);  // clocks 3, 6
  c.resume = ResumeMode::kRequired;
  const std::string victim = dir + "/partition-1-clock-6.ckpt";
  const std::string good = ReadBytes(victim);
  ASSERT_GT(good.size(), 100u);
  auto expect_start_fails = [&](StatusCode code, const std::string& text) {
    auto cluster = EmbeddedCluster::Start(c);
    ASSERT_FALSE(cluster.ok()) << text;
    EXPECT_EQ(cluster.status().code(), code) << cluster.status();
    EXPECT_NE(cluster.status().message().find(text), std::string::npos) << cluster.status();
    EXPECT_NE(cluster.status().message().find("partition-1-clock-6.ckpt"), std::string::npos)
        << cluster.status();
  };
  std::string bad = good;
  bad[good.size() / 2] ^= 1;
  WriteBytes(victim, bad);
  expect_start_fails(StatusCode::kDataLoss, "checksum mismatch");
  WriteBytes(victim, good.substr(0, good.size() - 9));
  expect_start_fails(StatusCode::kDataLoss, "truncated");
  WriteBytes(victim, "");
  expect_start_fails(StatusCode::kDataLoss, "empty");
  // A checkpoint of another job (other table sizes) under the same names.
  Config other = c;
  other.tables[0].num_rows = 41;
  expect_start_fails(StatusCode::kDataLoss, "empty");  // still the empty file
  WriteBytes(victim, good);
  auto foreign = EmbeddedCluster::Start(other);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), StatusCode::kFailedPrecondition) << foreign.status();
  EXPECT_NE(foreign.status().message().find("another job"), std::string::npos);
  // Without the bad newest file, the job resumes from clock 3.
  unlink(victim.c_str());
  RunResult r = RunCluster(c, TrainOptions{kTotal, -1, nullptr});
  ASSERT_OK(r.status);
  EXPECT_EQ(r.resumed[0], 3);
}

TEST(CheckpointClusterTest, ResumeModesWithAnEmptyFolder) {
  Config c = TrainConfig(3, 1, 1);
  c.checkpoint_dir = MakeDir("new/sub");  // created on start
  c.resume = ResumeMode::kRequired;
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), StatusCode::kNotFound);
  EXPECT_NE(cluster.status().message().find("no complete checkpoint"), std::string::npos)
      << cluster.status();
  c.resume = ResumeMode::kIfPresent;
  RunResult r = RunCluster(c, TrainOptions{kTotal, -1, nullptr});
  ASSERT_OK(r.status);
  EXPECT_EQ(r.resumed[0], 0);
  EXPECT_TRUE(SameBits(r.params[0], Reference()));
  // A checkpoint_dir that is a file.
  c.checkpoint_dir = testing::TempFile("notadir");
  WriteBytes(c.checkpoint_dir, "x");
  auto bad = EmbeddedCluster::Start(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
}

}  // namespace
}  // namespace geeps
