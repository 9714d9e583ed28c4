// The index arithmetic of the CUDA row kernels (Gather, Scatter and
// ScatterAdd: RowKernel in kernels.cu): which rows and columns each thread
// visits, the launch shape, and the choice of 32-bit or 64-bit counters. A
// header that both nvcc and the host compiler build, so that
// tests/row_groups_test.cc runs exactly this arithmetic for every thread of
// real launches on a machine without a GPU, including sizes around 2^32
// elements that no test could afford to run as kernels.
//
// The mapping: a group of G lanes (consecutive threads of a block; G a power
// of two, the least one >= the row width, at most 32) handles one row at a
// time. Groups stride over the rows (group g takes rows g, g + groups,
// g + 2 * groups, ...); within a row the lanes of a group stride over the
// columns by G (lane l takes columns l, l + G, ...). So element (row, col)
// belongs to exactly one thread: group row % groups, lane col % G. Lane and
// group come from a mask and a shift of the thread index (no divide);
// consecutive lanes touch consecutive addresses (coalesced); a lane reads
// index[row] once per row, at the same address as the rest of its group (a
// broadcast).
#ifndef GEEPS_DEVICE_CUDA_ROW_GROUPS_H_
#define GEEPS_DEVICE_CUDA_ROW_GROUPS_H_

#include <cstddef>
#include <cstdint>

#include "device/cuda/grid_stride.h"

namespace geeps::device::cuda {

// The most lanes a row group has: a warp.
inline constexpr int kMaxRowGroupLanes = 32;
static_assert(kThreadsPerBlock % kMaxRowGroupLanes == 0, "a block holds whole row groups");

// log2 of the lanes per group for rows of `width` elements: the least power
// of two >= width, capped at 32 lanes (shift 5).
constexpr int RowGroupShift(size_t width) {
  int shift = 0;
  while (shift < 5 && (size_t{1} << shift) < width) ++shift;
  return shift;
}

// Whether the row loops of an n x width operation run by `groups` groups of
// `lanes` lanes may count in 32 bits. As in FitsNarrowIndex, a counter goes
// one step past its last value before its loop test fails: the row counter
// reaches up to (n - 1) + groups and the column counter (width - 1) + lanes;
// the flat offset row * width + col reaches n * width - 1. All must fit.
constexpr bool FitsNarrowRows(uint64_t n, uint64_t width, uint64_t groups, uint64_t lanes) {
  constexpr uint64_t kLimit = uint64_t{1} << 32;
  return FitsNarrowIndex(n, groups) && FitsNarrowIndex(width, lanes) &&
         (n == 0 || width <= kLimit / n);
}

// How kernels.cu launches the row kernel over n rows of `width` elements.
struct RowGroupLaunch {
  int blocks;       // grid size; blockDim is kThreadsPerBlock
  int lane_shift;   // log2 of the lanes per group (1 to 32 lanes)
  uint64_t groups;  // row groups in the grid: the row step
  bool narrow;      // 32-bit counters and flat offsets, else 64-bit
};

// One group per row when that fits under `max_blocks`, else `max_blocks`
// (the groups then loop over the rows); at least one block.
constexpr RowGroupLaunch PlanRowGroups(size_t n, size_t width, int max_blocks) {
  const int shift = RowGroupShift(width);
  const size_t threads = n > (SIZE_MAX >> shift) ? SIZE_MAX : n << shift;
  const int blocks = GridBlocks(threads, max_blocks);
  const uint64_t groups = (static_cast<uint64_t>(blocks) * kThreadsPerBlock) >> shift;
  return RowGroupLaunch{blocks, shift, groups,
                        FitsNarrowRows(n, width, groups, uint64_t{1} << shift)};
}

// One thread's loops, with the counter type I (uint32_t or size_t):
//   const I col0 = g.FirstColumn(threadIdx.x);
//   for (I row = g.FirstRow(...); g.WithinRows(row); row = g.NextRow(row)) {
//     const I start = g.RowStart(row);                  // flat side
//     const size_t at = g.IndexedRowStart(index[row]);  // indexed side
//     for (I col = col0; g.WithinRow(col); col = g.NextColumn(col))
//       ... element start + col <-> element at + col ...
//   }
// REQUIRES (narrow I): FitsNarrowRows(rows, width, row_step, 1 << lane_shift).
template <typename I>
struct RowGroups {
  I rows;               // n
  I width;              // elements per row
  I row_step;           // row groups in the grid
  unsigned lane_shift;  // log2 of the lanes per group

  // The thread's group number in the grid, which is its first row. Computed
  // in 64 bits: the thread number may not fit I where the group number does.
  GEEPS_HOST_DEVICE I FirstRow(unsigned block, unsigned block_dim, unsigned thread) const {
    return static_cast<I>((static_cast<uint64_t>(block) * block_dim + thread) >> lane_shift);
  }
  GEEPS_HOST_DEVICE bool WithinRows(I row) const { return row < rows; }
  GEEPS_HOST_DEVICE I NextRow(I row) const { return row + row_step; }

  // The thread's lane in its group, which is its first column (a block
  // holds whole groups, so the thread's index in its block suffices).
  GEEPS_HOST_DEVICE I FirstColumn(unsigned thread) const {
    return static_cast<I>(thread & ((1u << lane_shift) - 1u));
  }
  GEEPS_HOST_DEVICE bool WithinRow(I col) const { return col < width; }
  GEEPS_HOST_DEVICE I NextColumn(I col) const { return col + (I{1} << lane_shift); }

  // The offset of a row on the flat side (row i of the n rows), in I.
  GEEPS_HOST_DEVICE I RowStart(I row) const { return row * width; }
  // The offset of the row an index names, always in 64 bits: index * width
  // exceeds 2^32 whenever the indexed array holds more than 2^32 elements.
  GEEPS_HOST_DEVICE size_t IndexedRowStart(uint32_t index) const {
    return static_cast<size_t>(index) * width;
  }
};

// The loop parameters of a launch planned by PlanRowGroups.
template <typename I>
constexpr RowGroups<I> MakeRowGroups(const RowGroupLaunch& plan, size_t n, size_t width) {
  return RowGroups<I>{static_cast<I>(n), static_cast<I>(width), static_cast<I>(plan.groups),
                      static_cast<unsigned>(plan.lane_shift)};
}

}  // namespace geeps::device::cuda

#endif  // GEEPS_DEVICE_CUDA_ROW_GROUPS_H_
