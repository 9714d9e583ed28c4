// The big network of examples/fashion_mnist (big_net.h): a few iterations
// of big-mlp on synthetic data under a device memory budget 4x smaller than
// its parameters and local data, against the same run without a budget.
#include <gtest/gtest.h>

#include "big_net.h"

namespace fmnist {
namespace {

TEST(BigNetTest, FourTimesOversubscribedMatchesTheFreeRunBitwise) {
  BigNetOptions o;
  o.iterations = 6;
  o.batch_size = 128;
  o.oversubscription = 4;
  o.copy_gbs = 12;
  o.test_size = 256;
  BigNetResult r;
  geeps::Status s = RunBigNet(o, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_GE(r.oversubscription(), 4.0 - 1e-6);
  EXPECT_GT(r.budgeted.budget, 0u);
  EXPECT_EQ(r.unbudgeted.budget, 0u);
  // The memory manager worked and reported: local data and parameter rows
  // swapped through the pool, whose size is within the budget.
  EXPECT_GT(r.budgeted.bytes_host_to_device, 0);
  EXPECT_GT(r.budgeted.bytes_device_to_host, 0);
  EXPECT_GT(r.budgeted.pool_bytes, 0u);
  EXPECT_LE(r.budgeted.pool_bytes, r.budgeted.budget);
  EXPECT_GE(r.budgeted.stall_seconds, 0);
  EXPECT_LT(r.budgeted.stall_fraction(), 1.0);
  EXPECT_NE(r.budgeted.report.worker0_stats.memory_plan_json, "");
  EXPECT_EQ(r.unbudgeted.bytes_host_to_device, 0);
  EXPECT_GT(r.budgeted.samples_per_second, 0);
  EXPECT_GT(r.unbudgeted.samples_per_second, 0);
  // Same math.
  EXPECT_TRUE(r.weights_identical);
  ASSERT_EQ(r.budgeted.report.final_params.size(), r.unbudgeted.report.final_params.size());
  EXPECT_EQ(r.budgeted.report.final_params, r.unbudgeted.report.final_params);
  // And it learns: the synthetic test loss falls.
  EXPECT_LT(r.budgeted.loss_after, r.budgeted.loss_before)
      << r.budgeted.loss_before << " -> " << r.budgeted.loss_after;
}

TEST(BigNetTest, RejectsBadOptions) {
  BigNetOptions o;
  o.oversubscription = 0.5;
  BigNetResult r;
  EXPECT_EQ(RunBigNet(o, &r).code(), geeps::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fmnist
