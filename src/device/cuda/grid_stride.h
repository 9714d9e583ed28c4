// The index arithmetic of the CUDA kernels' grid-stride loops (kernels.cu):
// the launch shape, the choice of a 32-bit or 64-bit loop counter and the
// sequence of elements each thread visits. It is a header that both nvcc and
// the host compiler build, so that tests/grid_stride_test.cc runs exactly
// this arithmetic on a machine without a GPU, at sizes (around 2^32 elements)
// that no test could afford to run as kernels.
#ifndef GEEPS_DEVICE_CUDA_GRID_STRIDE_H_
#define GEEPS_DEVICE_CUDA_GRID_STRIDE_H_

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define GEEPS_HOST_DEVICE __host__ __device__
#else
#define GEEPS_HOST_DEVICE
#endif

namespace geeps::device::cuda {

// Threads per block of every kernel, and the grid cap per multiprocessor
// (8 x 256 = 2048 threads: a full Hopper or Ampere multiprocessor).
inline constexpr int kThreadsPerBlock = 256;
inline constexpr int kBlocksPerMultiprocessor = 8;

// The grid cap of a device with `multiprocessors` multiprocessors.
constexpr int MaxBlocks(int multiprocessors) {
  return (multiprocessors > 1 ? multiprocessors : 1) * kBlocksPerMultiprocessor;
}

// Blocks of a launch over `work` items: one item per thread when that fits
// under `max_blocks`, else `max_blocks` (the threads then loop); at least 1.
constexpr int GridBlocks(size_t work, int max_blocks) {
  const size_t cap = max_blocks > 1 ? static_cast<size_t>(max_blocks) : 1;
  const size_t wanted = work / kThreadsPerBlock + (work % kThreadsPerBlock != 0 ? 1 : 0);
  return static_cast<int>(wanted < 1 ? 1 : (wanted < cap ? wanted : cap));
}

// Whether a grid-stride loop over `total` elements run by `grid_threads`
// threads may count in 32 bits. A thread's counter goes one stride past its
// last element before the loop test fails, so it reaches up to
// (total - 1) + grid_threads, which must not wrap: total + grid_threads
// <= 2^32. (Testing only total < 2^32 wraps the counter of the threads whose
// last element lies above 2^32 - grid_threads: they start again at a small
// element, adding it twice, and may loop forever.)
constexpr bool FitsNarrowIndex(uint64_t total, uint64_t grid_threads) {
  constexpr uint64_t kLimit = uint64_t{1} << 32;
  return grid_threads <= kLimit && total <= kLimit - grid_threads;
}

// How kernels.cu launches a grid-stride loop over `total` elements.
struct GridStrideLaunch {
  int blocks;   // grid size; blockDim is kThreadsPerBlock
  bool narrow;  // 32-bit counter (FitsNarrowIndex), else 64-bit
};

constexpr GridStrideLaunch PlanGridStride(size_t total, int max_blocks) {
  const int blocks = GridBlocks(total, max_blocks);
  return GridStrideLaunch{blocks,
                          FitsNarrowIndex(total, static_cast<uint64_t>(blocks) * kThreadsPerBlock)};
}

// One thread's loop, with the counter type I (uint32_t or size_t):
//   for (I e = loop.First(...); loop.Within(e); e = loop.Next(e)) ...
// visits first, first + stride, ... while below total, where first is the
// thread's global index. REQUIRES (narrow I): FitsNarrowIndex(total, stride).
template <typename I>
struct GridStride {
  I total;
  I stride;  // gridDim.x * blockDim.x

  GEEPS_HOST_DEVICE I First(unsigned block, unsigned block_dim, unsigned thread) const {
    return static_cast<I>(block) * block_dim + thread;
  }
  GEEPS_HOST_DEVICE bool Within(I e) const { return e < total; }
  GEEPS_HOST_DEVICE I Next(I e) const { return e + stride; }
};

}  // namespace geeps::device::cuda

#endif  // GEEPS_DEVICE_CUDA_GRID_STRIDE_H_
