// The CUDA kernels' launch shape (src/device/cuda/grid_stride.h), run on the
// host: the grid cap, the blocks of a launch, and when a loop counter may be
// 32 bits. The row kernels' loops built on it are checked thread by thread in
// row_groups_test.cc.
#include "device/cuda/grid_stride.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace geeps::device::cuda {
namespace {

constexpr uint64_t k2To32 = uint64_t{1} << 32;

// Multiprocessor counts: an H200 (and H100 SXM), an A100, and one
// multiprocessor.
constexpr int kH200 = 132;
constexpr int kA100 = 108;

// The grid stride (threads) of a full grid on an H200: 132 x 8 x 256.
constexpr uint64_t kH200Stride = static_cast<uint64_t>(MaxBlocks(kH200)) * kThreadsPerBlock;
static_assert(kH200Stride == 270336);

TEST(GridStrideTest, LaunchShape) {
  EXPECT_EQ(MaxBlocks(kH200), 1056);
  EXPECT_EQ(MaxBlocks(kA100), 864);
  EXPECT_EQ(MaxBlocks(1), kBlocksPerMultiprocessor);
  EXPECT_EQ(MaxBlocks(0), kBlocksPerMultiprocessor);  // never an empty grid
  EXPECT_EQ(GridBlocks(0, 1056), 1);
  EXPECT_EQ(GridBlocks(1, 1056), 1);
  EXPECT_EQ(GridBlocks(256, 1056), 1);
  EXPECT_EQ(GridBlocks(257, 1056), 2);
  EXPECT_EQ(GridBlocks(kH200Stride, 1056), 1056);
  EXPECT_EQ(GridBlocks(kH200Stride + 1, 1056), 1056);
  EXPECT_EQ(GridBlocks(SIZE_MAX, 1056), 1056);
  EXPECT_EQ(GridBlocks(SIZE_MAX, 0), 1);
}

// The 32-bit counter is chosen exactly when (total - 1) + stride, the
// largest value a counter takes, fits in 32 bits.
TEST(GridStrideTest, NarrowCounterOnlyWhereItCannotWrap) {
  const uint64_t s = kH200Stride;
  EXPECT_TRUE(FitsNarrowIndex(1, s));
  EXPECT_TRUE(FitsNarrowIndex(k2To32 - s, s));
  EXPECT_FALSE(FitsNarrowIndex(k2To32 - s + 1, s));
  EXPECT_FALSE(FitsNarrowIndex(k2To32 - 1, s));
  EXPECT_FALSE(FitsNarrowIndex(k2To32, s));
  EXPECT_FALSE(FitsNarrowIndex(1, k2To32 + 1));
  for (uint64_t total : {uint64_t{1}, uint64_t{1} << 20, k2To32 - s - 1, k2To32 - s, k2To32 - s + 1,
                         k2To32 - 1, k2To32, k2To32 + 1, uint64_t{1} << 40}) {
    const uint64_t stride = uint64_t(GridBlocks(total, MaxBlocks(kH200))) * kThreadsPerBlock;
    EXPECT_EQ(FitsNarrowIndex(total, stride), total - 1 + stride <= uint64_t{UINT32_MAX})
        << "total " << total;
  }
}

}  // namespace
}  // namespace geeps::device::cuda
