// The launch shape of the CUDA kernels (kernels.cu): threads per block, the
// grid cap, the blocks of a launch, and when a grid-stride loop counter may
// be 32 bits. A header that both nvcc and the host compiler build; the row
// kernels' loops built on it are in row_groups.h, and tests/grid_stride_test.cc
// and tests/row_groups_test.cc run this arithmetic on a machine without a
// GPU.
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

}  // namespace geeps::device::cuda

#endif  // GEEPS_DEVICE_CUDA_GRID_STRIDE_H_
