// The checked mode (Config::checked, GEEPS_CHECKED=1; client/checked_mode.h):
// its checks on host memory case by case, then each misuse of issue 51's
// table that it names at its call, on two workers of an embedded cluster,
// and a job without misuse that it leaves exact.
#include "client/checked_mode.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "geeps/embedded_cluster.h"
#include "test_util.h"

namespace geeps {
namespace {

using client::BufferChecksum;
using client::FirstNonFinite;
using client::FirstUnpoisoned;
using client::kPoisonBits;
using client::PoisonFloats;
using std::chrono::milliseconds;
using testing::ReadUpdateHandles;
using testing::RecordReadUpdateClock;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

TEST(CheckedModeChecksTest, FirstNonFinite) {
  struct Case {
    std::vector<float> values;
    int64_t first;
  };
  const Case cases[] = {
      {{}, -1},
      {{0.0f, -1.5f, 3e38f}, -1},
      {{kNan}, 0},
      {{1.0f, 2.0f, kInf}, 2},
      {{1.0f, -kInf, kNan}, 1},
      {{-0.0f, std::numeric_limits<float>::denorm_min(), kNan}, 2},
  };
  for (const Case& c : cases)
    EXPECT_EQ(FirstNonFinite(c.values.data(), c.values.size()), c.first)
        << ::testing::PrintToString(c.values);
}

TEST(CheckedModeChecksTest, PoisonIsANanOfItsOwnBits) {
  std::vector<float> v(5, 1.0f);
  PoisonFloats(v.data(), v.size());
  EXPECT_EQ(FirstUnpoisoned(v.data(), v.size()), -1);
  EXPECT_TRUE(std::isnan(v[3]));
  uint32_t bits;
  std::memcpy(&bits, &v[3], sizeof(bits));
  EXPECT_EQ(bits, kPoisonBits);
  // Any other NaN is not the poison.
  v[2] = kNan;
  EXPECT_EQ(FirstUnpoisoned(v.data(), v.size()), 2);
  PoisonFloats(v.data(), v.size());
  v[4] = 0.0f;
  EXPECT_EQ(FirstUnpoisoned(v.data(), v.size()), 4);
}

TEST(CheckedModeChecksTest, ChecksumSeesEveryBit) {
  std::vector<float> v = {1.0f, 2.0f, 3.0f, 4.0f};
  const uint64_t sum = BufferChecksum(v.data(), v.size());
  EXPECT_EQ(BufferChecksum(v.data(), v.size()), sum);
  for (size_t i = 0; i < v.size(); ++i) {
    for (uint32_t bit : {0u, 17u, 31u}) {
      std::vector<float> w = v;
      uint32_t bits;
      std::memcpy(&bits, &w[i], sizeof(bits));
      bits ^= 1u << bit;
      std::memcpy(&w[i], &bits, sizeof(bits));
      EXPECT_NE(BufferChecksum(w.data(), w.size()), sum) << "float " << i << " bit " << bit;
    }
  }
  // -0 and +0 differ too (a write of -0 over 0 is a write).
  const float zero = 0.0f, minus_zero = -0.0f;
  EXPECT_NE(BufferChecksum(&zero, 1), BufferChecksum(&minus_zero, 1));
}

// ---- The misuse, named at its call (two workers, one table of 4 x 8).

Config Checked(int workers = 2) {
  Config c;
  c.num_workers = workers;
  c.tables = {{"w", 4, 8}};
  c.timeout = milliseconds(10000);
  c.checked = true;
  return c;
}

const std::vector<RowIndex> kRows = RowRange(0, 4);
constexpr size_t kFloats = 4 * 8;

// Runs `iteration(ps, h, i)` for 3 iterations on both workers, each
// iteration between Read and Clock; worker `culprit` misbehaves inside it.
// Returns RunWorkers' status.
using Body = std::function<Status(GeePS&, const ReadUpdateHandles&, int)>;
Status RunChecked(const Config& c, const Body& iteration, int iterations = 3) {
  auto cluster = EmbeddedCluster::Start(c);
  if (!cluster.ok()) return cluster.status();
  return (*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ReadUpdateHandles h, RecordReadUpdateClock(ps, 0, kRows));
    for (int i = 0; i < iterations; ++i) GEEPS_RETURN_IF_ERROR(iteration(ps, h, i));
    return ps.Sync();
  });
}

// Read, PostRead, an update of ones, Clock; `between` runs after Read.
Status PlainIteration(GeePS& ps, const ReadUpdateHandles& h,
                      const std::function<Status(const float*)>& between = nullptr) {
  GEEPS_ASSIGN_OR_RETURN(const float* r, ps.Read(h.read));
  if (between) GEEPS_RETURN_IF_ERROR(between(r));
  GEEPS_RETURN_IF_ERROR(ps.PostRead(h.read));
  GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.update));
  const std::vector<float> ones(kFloats, 1.0f);
  GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, ones.data(), kFloats));
  GEEPS_RETURN_IF_ERROR(ps.Update(h.update));
  return ps.Clock();
}

void ExpectNamed(const Status& st, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(st.code(), code) << st;
  for (const std::string& p : parts)
    EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' not in: " << st;
}

TEST(CheckedModeTest, AJobWithoutMisuseIsExactAndReportsNothing) {
  auto cluster = EmbeddedCluster::Start(Checked());
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ReadUpdateHandles h, RecordReadUpdateClock(ps, 0, kRows));
    std::vector<float> seen(kFloats);
    for (int i = 0; i < 6; ++i) {
      GEEPS_RETURN_IF_ERROR(PlainIteration(ps, h, [&](const float* r) {
        GEEPS_RETURN_IF_ERROR(ps.CopyToHost(seen.data(), r, kFloats));
        W_CHECK(seen[0] == 2.0f * i && seen[kFloats - 1] == 2.0f * i,
                "iteration " + std::to_string(i) + " read " + std::to_string(seen[0]));
        return Status::OK();
      }));
    }
    GEEPS_RETURN_IF_ERROR(ps.Sync());
    GEEPS_RETURN_IF_ERROR(ps.CopyRows(0, kRows, seen.data()));
    W_CHECK(seen[5] == 12.0f, "final " + std::to_string(seen[5]));
    // Every read was gathered into a buffer of its own.
    W_CHECK(ps.GetStats().reads_in_place == 0, "a read in place in the checked mode");
    return Status::OK();
  }));
}

// A write into a Read buffer (read-only) before PostRead: PostRead fails,
// naming the read, the table and the worker. (Before, the write went
// unnoticed and, read in place, changed what this worker read later.)
TEST(CheckedModeTest, AWriteIntoAReadBufferIsNamedAtPostRead) {
  const Status st = RunChecked(Checked(), [](GeePS& ps, const ReadUpdateHandles& h, int i) {
    return PlainIteration(ps, h, [&](const float* r) -> Status {
      if (ps.rank() != 1 || i != 1) return Status::OK();
      const float junk = 7.0f;
      return ps.CopyFromHost(const_cast<float*>(r) + 3, &junk, 1);
    });
  });
  ExpectNamed(st, StatusCode::kFailedPrecondition,
              {"PostRead(read#0) of table 0 ('w') on worker 1", "written before this PostRead",
               "read-only"});
}

// A pointer kept after PostRead reads the poison (NaN), whatever the run;
// (before: 5 or 10 depending on the run); a write through it makes the next
// Read fail, naming it.
TEST(CheckedModeTest, AReadBufferUsedAfterPostReadIsPoisonedAndAWriteNamed) {
  const Status st = RunChecked(Checked(), [](GeePS& ps, const ReadUpdateHandles& h, int i) {
    GEEPS_ASSIGN_OR_RETURN(const float* r, ps.Read(h.read));
    GEEPS_RETURN_IF_ERROR(ps.PostRead(h.read));
    float after = 0.0f;
    GEEPS_RETURN_IF_ERROR(ps.CopyToHost(&after, r + 2, 1));
    uint32_t bits;
    std::memcpy(&bits, &after, sizeof(bits));
    W_CHECK(bits == kPoisonBits, "read after PostRead: " + std::to_string(after));
    if (ps.rank() == 0 && i == 1) {
      const float junk = 1.0f;
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(const_cast<float*>(r) + 5, &junk, 1));
    }
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.update));
    (void)d;
    GEEPS_RETURN_IF_ERROR(ps.Update(h.update));
    return ps.Clock();
  });
  ExpectNamed(st, StatusCode::kFailedPrecondition,
              {"Read(read#0) of table 0 ('w') on worker 0",
               "its buffer was written after its last PostRead", "float 5 of 32"});
}

// A write into an update buffer after Update: the next PreUpdate fails,
// naming it (the write itself reached nobody).
TEST(CheckedModeTest, AWriteIntoAnUpdateBufferAfterUpdateIsNamedAtTheNextPreUpdate) {
  const Status st = RunChecked(Checked(), [](GeePS& ps, const ReadUpdateHandles& h, int i) {
    GEEPS_ASSIGN_OR_RETURN(const float* r, ps.Read(h.read));
    (void)r;
    GEEPS_RETURN_IF_ERROR(ps.PostRead(h.read));
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.update));
    GEEPS_RETURN_IF_ERROR(ps.Update(h.update));
    if (ps.rank() == 1 && i == 0) {
      const float junk = 100.0f;
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d + 9, &junk, 1));
    }
    return ps.Clock();
  });
  ExpectNamed(st, StatusCode::kFailedPrecondition,
              {"PreUpdate(update#0) of table 0 ('w') on worker 1",
               "its buffer was written after its last Update", "float 9 of 32", "lost"});
}

// A non-finite delta: Update fails naming the worker, the table and the
// first row (before: every worker read NaN, nothing said where it came
// from); nothing of it reached the servers: the other worker fails because
// this one did, not because it read NaN.
TEST(CheckedModeTest, ANonFiniteDeltaIsNamedAtUpdateWithItsRow) {
  const Status st = RunChecked(Checked(), [](GeePS& ps, const ReadUpdateHandles& h, int i) {
    GEEPS_ASSIGN_OR_RETURN(const float* r, ps.Read(h.read));
    std::vector<float> seen(kFloats);
    GEEPS_RETURN_IF_ERROR(ps.CopyToHost(seen.data(), r, kFloats));
    for (float v : seen) W_CHECK(std::isfinite(v), "read a non-finite value");
    GEEPS_RETURN_IF_ERROR(ps.PostRead(h.read));
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.update));
    std::vector<float> delta(kFloats, 1.0f);
    if (ps.rank() == 0 && i == 1) delta[2 * 8 + 5] = kNan;  // row 2, column 5
    GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, delta.data(), kFloats));
    GEEPS_RETURN_IF_ERROR(ps.Update(h.update));
    return ps.Clock();
  });
  ExpectNamed(st, StatusCode::kInvalidArgument,
              {"Update(update#0) of table 0 ('w') on worker 0", "non-finite delta (nan)",
               "row 2, column 5", "nothing of this update was sent"});
}

// GEEPS_CHECKED=1 turns it on for a Config that did not ask; a bad value
// is an error naming the variable.
TEST(CheckedModeTest, TheVariableTurnsItOnForEveryWorker) {
  Config c = Checked();
  c.checked = false;
  {
    testing::ScopedEnv on("GEEPS_CHECKED", "1");
    auto cluster = EmbeddedCluster::Start(c);
    ASSERT_OK(cluster.status());
    EXPECT_TRUE((*cluster)->worker(0)->config().checked);
  }
  {
    testing::ScopedEnv bad("GEEPS_CHECKED", "yes");
    Config d = c;
    const Status applied = ApplyEnvironment(&d);
    EXPECT_EQ(applied.code(), StatusCode::kInvalidArgument) << applied;
    EXPECT_NE(applied.message().find("GEEPS_CHECKED='yes'"), std::string::npos) << applied;
    auto cluster = EmbeddedCluster::Start(c);
    ASSERT_OK(cluster.status());
    GeePS& ps = *(*cluster)->worker(0);
    ASSERT_OK(ps.VirtualClock());
    const Status finish = ps.FinishVirtualIteration();
    EXPECT_EQ(finish.code(), StatusCode::kInvalidArgument) << finish;
    EXPECT_NE(finish.message().find("GEEPS_CHECKED"), std::string::npos) << finish;
  }
}

}  // namespace
}  // namespace geeps
