// The CUDA kernels' grid-stride index arithmetic (src/device/cuda/
// grid_stride.h), run on the host: the launch shape kernels.cu computes for a
// GPU, the choice of a 32-bit or 64-bit counter, and each thread's sequence
// of elements, emulated in the counter type the kernel would use. Every
// element must be visited exactly once and every thread's loop must end, also
// at sizes around 2^32 elements where a 32-bit counter can wrap; a GPU is
// not needed to see that, and no test could run such sizes as kernels.
#include "device/cuda/grid_stride.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace geeps::device::cuda {
namespace {

constexpr uint64_t k2To32 = uint64_t{1} << 32;

// Multiprocessor counts: an H200 (and H100 SXM), an A100, and one
// multiprocessor (a small stride: many steps per thread).
constexpr int kH200 = 132;
constexpr int kA100 = 108;

// The grid stride (threads) of a full grid on an H200: 132 x 8 x 256.
constexpr uint64_t kH200Stride = static_cast<uint64_t>(MaxBlocks(kH200)) * kThreadsPerBlock;
static_assert(kH200Stride == 270336);

// Runs the loop of one thread, as the kernel does with counter type I, from
// its element number `skip` (0 = from the start), for at most
// `max_visits` visits; calls visit(e) for each element. Returns false when
// the loop had not ended after max_visits visits.
//
// Starting at element `skip` stands for running the first `skip` steps:
// those elements lie below `total`, so no step up to there can wrap, and the
// counter then holds first + skip * stride exactly.
template <typename I, typename Visit>
bool RunThread(const GridStride<I>& loop, unsigned block, unsigned thread, uint64_t skip,
               uint64_t max_visits, Visit visit) {
  I e = loop.First(block, kThreadsPerBlock, thread);
  if (skip > 0) {
    const uint64_t at = uint64_t{e} + skip * uint64_t{loop.stride};
    if (at >= uint64_t{loop.total}) {
      ADD_FAILURE() << "test bug: skip " << skip << " passes the end";
      return false;
    }
    e = static_cast<I>(at);
  }
  for (uint64_t visits = 0; loop.Within(e); e = loop.Next(e)) {
    if (visits++ == max_visits) return false;
    visit(uint64_t{e});
  }
  return true;
}

// Checks every thread of the launch kernels.cu makes for `total` elements on
// a device with `multiprocessors`, with the counter type the launch picks:
// each thread visits exactly first, first + stride, ... below total (so the
// threads together visit each element exactly once: an element e belongs to
// thread e % stride only) and then stops. Only the last few elements of each
// thread are run (see RunThread), which is where a counter can wrap.
template <typename I>
void CheckEveryThread(uint64_t total, int blocks) {
  const uint64_t stride = uint64_t(blocks) * kThreadsPerBlock;
  if (sizeof(I) == 4) {
    ASSERT_LE(total, uint64_t{UINT32_MAX}) << "n * width wraps in 32 bits";
    ASSERT_LT(stride, k2To32);
  }
  const GridStride<I> loop{static_cast<I>(total), static_cast<I>(stride)};
  int failed_threads = 0;
  for (unsigned block = 0; block < static_cast<unsigned>(blocks); ++block) {
    for (unsigned thread = 0; thread < kThreadsPerBlock; ++thread) {
      const uint64_t first = uint64_t{block} * kThreadsPerBlock + thread;
      // Elements this thread owns: first + k * stride < total.
      const uint64_t owned = first < total ? (total - first - 1) / stride + 1 : 0;
      const uint64_t skip = owned > 2 ? owned - 2 : 0;
      uint64_t k = skip;
      bool wrong = false;
      uint64_t bad = 0;
      const bool ended = RunThread(loop, block, thread, skip, owned - skip + 1, [&](uint64_t e) {
        if (!wrong && (k >= owned || e != first + k * stride)) {
          wrong = true;
          bad = e;
        }
        ++k;
      });
      if (ended && !wrong && k == owned) continue;
      if (++failed_threads <= 3) {
        std::string what;
        if (wrong) {
          what = "visited element " + std::to_string(bad) + " out of turn (the counter wrapped)";
        } else if (ended) {
          what = "visited " + std::to_string(k - skip) + " of its last " +
                 std::to_string(owned - skip) + " elements";
        }
        if (!ended) {
          what += std::string(what.empty() ? "" : " and ") + "its loop did not end";
        }
        ADD_FAILURE() << "total " << total << ", " << blocks << " blocks ("
                      << (sizeof(I) == 4 ? "32" : "64") << "-bit counter): thread " << first
                      << " owns " << owned << " elements but " << what;
      }
    }
  }
  EXPECT_EQ(failed_threads, 0) << "threads that went wrong, total " << total;
}

// The launch kernels.cu makes for `total` elements, checked thread by thread.
void CheckLaunch(uint64_t total, int multiprocessors) {
  SCOPED_TRACE("total " + std::to_string(total) + ", " + std::to_string(multiprocessors) +
               " multiprocessors");
  const GridStrideLaunch plan =
      PlanGridStride(static_cast<size_t>(total), MaxBlocks(multiprocessors));
  ASSERT_GE(plan.blocks, 1);
  ASSERT_LE(plan.blocks, MaxBlocks(multiprocessors));
  if (plan.narrow) {
    CheckEveryThread<uint32_t>(total, plan.blocks);
  } else {
    CheckEveryThread<size_t>(total, plan.blocks);
  }
}

TEST(GridStrideTest, LaunchShape) {
  EXPECT_EQ(MaxBlocks(kH200), 1056);
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
    const GridStrideLaunch plan = PlanGridStride(total, MaxBlocks(kH200));
    const uint64_t stride = uint64_t(plan.blocks) * kThreadsPerBlock;
    EXPECT_EQ(plan.narrow, total - 1 + stride <= uint64_t{UINT32_MAX}) << "total " << total;
  }
}

// Sizes around 2^32 elements on an H200, where the kernels' counter used to
// wrap (threads whose last element lies above 2^32 - stride).
TEST(GridStrideTest, EveryElementOnceAroundTwoToThe32OnAnH200) {
  const uint64_t s = kH200Stride;
  for (uint64_t total : {k2To32 - s - 1, k2To32 - s, k2To32 - s + 1, k2To32 - s / 2, k2To32 - 2,
                         k2To32 - 1, k2To32, k2To32 + 1, k2To32 + s + 3}) {
    CheckLaunch(total, kH200);
  }
}

TEST(GridStrideTest, EveryElementOnceAroundTwoToThe32OnOtherGrids) {
  for (int multiprocessors : {1, kA100}) {
    const uint64_t s = static_cast<uint64_t>(MaxBlocks(multiprocessors)) * kThreadsPerBlock;
    for (uint64_t total : {k2To32 - s, k2To32 - s + 1, k2To32 - 1, k2To32, k2To32 + 7}) {
      CheckLaunch(total, multiprocessors);
    }
  }
}

// Small sizes (partial grids, a grid and one more element, a few rounds):
// every element is counted directly, by running every thread from its start.
TEST(GridStrideTest, EveryElementOnceForSmallSizes) {
  const uint64_t s = kH200Stride;
  for (uint64_t total : {uint64_t{1}, uint64_t{3}, uint64_t{255}, uint64_t{256}, uint64_t{257},
                         s - 1, s, s + 1, 3 * s + 17}) {
    SCOPED_TRACE("total " + std::to_string(total));
    CheckLaunch(total, kH200);
    const GridStrideLaunch plan = PlanGridStride(total, MaxBlocks(kH200));
    ASSERT_TRUE(plan.narrow);
    const GridStride<uint32_t> loop{static_cast<uint32_t>(total),
                                    static_cast<uint32_t>(plan.blocks * kThreadsPerBlock)};
    std::vector<uint8_t> seen(total, 0);
    bool all_ended = true;
    for (unsigned block = 0; block < static_cast<unsigned>(plan.blocks); ++block) {
      for (unsigned thread = 0; thread < kThreadsPerBlock; ++thread) {
        all_ended &= RunThread(loop, block, thread, 0, total + 1, [&](uint64_t e) {
          if (e < total && seen[e] < 255) ++seen[e];
        });
      }
    }
    EXPECT_TRUE(all_ended);
    for (uint64_t e = 0; e < total; ++e) {
      if (seen[e] != 1) {
        ADD_FAILURE() << "element " << e << " visited " << int{seen[e]} << " times";
        break;
      }
    }
  }
}

}  // namespace
}  // namespace geeps::device::cuda
