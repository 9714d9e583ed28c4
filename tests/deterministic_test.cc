// Deterministic BSP: servers add a clock's updates in worker rank order, so
// two runs of the same job give bitwise identical parameters whatever the
// channel count, arrival order or timing.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "geeps/embedded_cluster.h"
#include "host_view.h"
#include "test_util.h"

namespace geeps {
namespace {

constexpr uint64_t kRows = 40;
constexpr uint32_t kWidth = 7;

// Each iteration's deltas depend on the values read, with float arithmetic
// whose result depends on the order of additions.
Status Train(GeePS& ps, int iterations, uint32_t delay_seed, std::vector<float>* out) {
  const auto rows = RowRange(0, kRows);
  GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                         testing::RecordReadUpdateClock(ps, 0, rows));
  const ReadHandle r = h.read;
  const UpdateHandle u = h.update;
  std::mt19937 values(1234 + ps.rank());
  std::mt19937 delays(delay_seed + ps.rank());
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> w(kRows * kWidth);
  for (int i = 0; i < iterations; ++i) {
    GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(r));
    GEEPS_ASSIGN_OR_RETURN(w, testing::ReadBuffer(ps, v, w.size()));
    GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
    if (delay_seed) std::this_thread::sleep_for(std::chrono::microseconds(delays() % 3000));
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
    std::vector<float> deltas(w.size());
    for (size_t k = 0; k < w.size(); ++k)
      deltas[k] =
          dist(values) * 1e-3f + 0.1f * std::sin(w[k]) / (1.0f + std::fabs(w[(k + 1) % w.size()]));
    GEEPS_RETURN_IF_ERROR(testing::WriteBuffer(ps, d, deltas));
    GEEPS_RETURN_IF_ERROR(ps.Update(u));
    GEEPS_RETURN_IF_ERROR(ps.Clock());
  }
  GEEPS_RETURN_IF_ERROR(ps.Sync());
  out->resize(w.size());
  return ps.CopyRows(0, rows, out->data());
}

// per_machine >= 0: machine-level aggregation, machines of that many workers.
std::vector<std::vector<float>> RunJob(int channels, int shards, uint32_t delay_seed,
                                       int per_machine = -1) {
  Config c;
  c.num_workers = 4;
  c.num_shards = shards;
  c.num_channels = channels;
  c.deterministic_bsp = true;
  if (per_machine >= 0) {
    c.aggregate_per_machine = true;
    c.workers_per_machine = per_machine;
  }
  c.tables = {{"w", kRows, kWidth}};
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::vector<float>> params(4);
  EXPECT_OK((*cluster)->RunWorkers(
      [&](GeePS& ps) { return Train(ps, 12, delay_seed, &params[ps.rank()]); }));
  return params;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(DeterministicBspTest, RunsAreBitwiseIdenticalAcrossChannelsAndTiming) {
  const auto base = RunJob(1, 1, 0);
  for (int w = 1; w < 4; ++w) EXPECT_TRUE(SameBits(base[0], base[w])) << "worker " << w;
  const auto other = RunJob(3, 2, 77);  // other layout, random delays per worker
  for (int w = 0; w < 4; ++w) EXPECT_TRUE(SameBits(base[0], other[w])) << "worker " << w;
  const auto again = RunJob(2, 1, 5);
  for (int w = 0; w < 4; ++w) EXPECT_TRUE(SameBits(base[0], again[w])) << "worker " << w;
}

// With machine-level aggregation the order is: each machine's sum of its
// workers' deltas in rank order, added into the rows in machine order. Runs
// are bitwise identical whatever the layout or timing.
TEST(DeterministicBspTest, AggregatedRunsAreBitwiseIdenticalAcrossChannelsAndTiming) {
  const auto base = RunJob(1, 1, 0, 2);
  for (int w = 1; w < 4; ++w) EXPECT_TRUE(SameBits(base[0], base[w])) << "worker " << w;
  const auto other = RunJob(3, 2, 77, 2);
  for (int w = 0; w < 4; ++w) EXPECT_TRUE(SameBits(base[0], other[w])) << "worker " << w;
  const auto again = RunJob(2, 1, 5, 2);
  for (int w = 0; w < 4; ++w) EXPECT_TRUE(SameBits(base[0], again[w])) << "worker " << w;
  // Only the grouping of the additions differs from the job without
  // aggregation: the same values up to float rounding.
  const auto plain = RunJob(1, 1, 0);
  ASSERT_EQ(plain[0].size(), base[0].size());
  for (size_t k = 0; k < base[0].size(); ++k)
    EXPECT_NEAR(base[0][k], plain[0][k], 1e-4f * (1.0f + std::fabs(plain[0][k]))) << "value " << k;
}

// Machines of one worker add in the same order as no aggregation: the same
// bits.
TEST(DeterministicBspTest, MachinesOfOneWorkerGiveTheBitsOfNoAggregation) {
  const auto plain = RunJob(2, 2, 0);
  const auto single = RunJob(2, 2, 33, 1);
  for (int w = 0; w < 4; ++w) EXPECT_TRUE(SameBits(plain[0], single[w])) << "worker " << w;
}

}  // namespace
}  // namespace geeps
