// The CUDA row kernels' index arithmetic (src/device/cuda/row_groups.h), run
// on the host: the launch shape kernels.cu computes for a GPU (H200, A100,
// one multiprocessor), the lanes per row, the choice of 32-bit or 64-bit
// counters, and each thread's loops over rows and columns, emulated with the
// very calls RowKernel makes, in the counter type the launch picks. Every
// (row, column) element of n x width must be visited exactly once, at the
// right flat and indexed offsets, and every loop must end, also around
// 2^32 elements where a 32-bit counter or offset can wrap; a GPU is not
// needed to see that, and no test could run such sizes as kernels.
#include "device/cuda/row_groups.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace geeps::device::cuda {
namespace {

constexpr uint64_t k2To32 = uint64_t{1} << 32;

// Multiprocessor counts: an H200 (and H100 SXM), an A100, and one
// multiprocessor (a small grid: many rows per group).
constexpr int kH200 = 132;
constexpr int kA100 = 108;

// The widths (in elements) every test covers: one lane, partial groups,
// exact powers of two, one past them, several columns per lane.
const std::vector<uint64_t> kWidths = {1, 2, 3, 4, 5, 7, 8, 13, 31, 32, 33, 63, 64, 65, 129, 1000};

// The index value the emulation reads for a row: near 2^32, so that an
// indexed offset computed in 32 bits would be caught.
uint32_t IndexOf(uint64_t row) { return UINT32_MAX - static_cast<uint32_t>(row % 7); }

struct Visit {
  uint64_t row, col, flat, indexed;
};

// Runs one thread's loops as RowKernel does, with counter type I, recording
// each element it visits. Rows start at the thread's row number `row_skip`
// and each row's columns at its column number `col_skip` (0: from the
// start); skipping k steps stands for running them, as their values lie
// below the bound and cannot wrap. Returns false when a loop had not ended
// after `max_visits` elements (or as many rows).
template <typename I>
bool RunThread(const RowGroups<I>& g, unsigned block, unsigned thread, uint64_t row_skip,
               uint64_t col_skip, uint64_t max_visits, std::vector<Visit>* visits) {
  visits->clear();
  const I first_col = g.FirstColumn(thread);
  if (!g.WithinRow(first_col)) return true;  // RowKernel returns here too
  I row = g.FirstRow(block, kThreadsPerBlock, thread);
  row = static_cast<I>(uint64_t{row} + row_skip * uint64_t{g.row_step});
  const I col_from = static_cast<I>(uint64_t{first_col} + (col_skip << g.lane_shift));
  uint64_t rows_run = 0;
  for (; g.WithinRows(row); row = g.NextRow(row)) {
    if (rows_run++ == max_visits) return false;
    const I flat = g.RowStart(row);
    const size_t indexed = g.IndexedRowStart(IndexOf(row));
    for (I col = col_from; g.WithinRow(col); col = g.NextColumn(col)) {
      if (visits->size() == max_visits) return false;
      visits->push_back(
          {uint64_t{row}, uint64_t{col}, uint64_t{static_cast<I>(flat + col)}, indexed + col});
    }
  }
  return true;
}

// One launch, checked thread by thread.
class LaunchCheck {
 public:
  // `exhaustive`: run every element (and count each in seen_); otherwise
  // only the last two rows of each thread and, of rows over 4 columns a
  // lane, the last two columns (where counters wrap).
  LaunchCheck(uint64_t n, uint64_t width, int multiprocessors, bool exhaustive)
      : n_(n),
        width_(width),
        plan_(PlanRowGroups(static_cast<size_t>(n), static_cast<size_t>(width),
                            MaxBlocks(multiprocessors))),
        exhaustive_(exhaustive) {
    if (exhaustive_) seen_.assign(n * width, 0);
  }

  void Run() {
    ASSERT_GE(plan_.blocks, 1);
    lanes_ = uint64_t{1} << plan_.lane_shift;
    groups_ = uint64_t(plan_.blocks) * kThreadsPerBlock / lanes_;
    ASSERT_EQ(plan_.groups, groups_);
    if (plan_.narrow) {
      // Only what the casts need; the emulation shows any wrap.
      ASSERT_LT(n_, k2To32) << "32-bit counters for " << n_ << " rows";
      ASSERT_LT(width_, k2To32) << "32-bit counters for rows of " << width_;
      RunAll(MakeRowGroups<uint32_t>(plan_, n_, width_));
    } else {
      RunAll(MakeRowGroups<size_t>(plan_, n_, width_));
    }
    for (uint64_t e = 0; e < seen_.size(); ++e) {
      if (seen_[e] != 1) {
        ADD_FAILURE() << "element (" << e / width_ << ", " << e % width_ << ") visited "
                      << int{seen_[e]} << " times";
        break;
      }
    }
  }

 private:
  template <typename I>
  void RunAll(const RowGroups<I>& g) {
    int failed = 0;
    std::vector<Visit> visits;
    for (unsigned block = 0; block < static_cast<unsigned>(plan_.blocks); ++block) {
      for (unsigned thread = 0; thread < kThreadsPerBlock; ++thread) {
        const std::string what = CheckThread(g, block, thread, &visits);
        if (what.empty()) continue;
        if (++failed <= 3) {
          ADD_FAILURE() << "thread " << uint64_t{block} * kThreadsPerBlock + thread << " ("
                        << (sizeof(I) == 4 ? "32" : "64") << "-bit counters): " << what;
        }
      }
    }
    EXPECT_EQ(failed, 0) << "threads that went wrong";
  }

  // "" when the thread visited exactly its elements, else what went wrong.
  // A thread's elements, from the mapping's definition (divides, not the
  // header's shifts): group t / G takes rows group + k * groups, lane t % G
  // columns lane + j * G. Each element has one owner, so threads that each
  // visit exactly theirs visit every element exactly once.
  template <typename I>
  std::string CheckThread(const RowGroups<I>& g, unsigned block, unsigned thread,
                          std::vector<Visit>* visits) {
    const uint64_t t = uint64_t{block} * kThreadsPerBlock + thread;
    const uint64_t group = t / lanes_, lane = t % lanes_;
    const uint64_t rows = group < n_ ? (n_ - group - 1) / groups_ + 1 : 0;
    const uint64_t cols = lane < width_ ? (width_ - lane - 1) / lanes_ + 1 : 0;
    const uint64_t row_skip = !exhaustive_ && rows > 2 ? rows - 2 : 0;
    const uint64_t col_skip = !exhaustive_ && cols > 4 ? cols - 2 : 0;
    const uint64_t expected = cols == 0 ? 0 : (rows - row_skip) * (cols - col_skip);
    if (!RunThread(g, block, thread, row_skip, col_skip, expected + 1, visits)) {
      return "a loop did not end after " + std::to_string(expected + 1) + " visits";
    }
    if (visits->size() != expected) {
      return "visited " + std::to_string(visits->size()) + " elements, owns " +
             std::to_string(expected);
    }
    for (uint64_t i = 0; i < expected; ++i) {
      const Visit& v = (*visits)[i];
      const uint64_t row = group + (row_skip + i / (cols - col_skip)) * groups_;
      const uint64_t col = lane + (col_skip + i % (cols - col_skip)) * lanes_;
      if (v.row != row || v.col != col) {
        return "visited (" + std::to_string(v.row) + ", " + std::to_string(v.col) +
               ") where its next element is (" + std::to_string(row) + ", " + std::to_string(col) +
               ")";
      }
      if (v.flat != row * width_ + col) {
        return "flat offset " + std::to_string(v.flat) + " of (" + std::to_string(row) + ", " +
               std::to_string(col) + ") wrapped";
      }
      if (v.indexed != uint64_t{IndexOf(row)} * width_ + col) {
        return "indexed offset " + std::to_string(v.indexed) + " of row " + std::to_string(row) +
               " wrapped";
      }
      if (exhaustive_ && seen_[row * width_ + col] < 255) ++seen_[row * width_ + col];
    }
    return "";
  }

  const uint64_t n_, width_;
  const RowGroupLaunch plan_;
  const bool exhaustive_;
  uint64_t lanes_ = 0, groups_ = 0;
  std::vector<uint8_t> seen_;  // exhaustive: visits per element
};

void CheckLaunch(uint64_t n, uint64_t width, int multiprocessors, bool exhaustive) {
  SCOPED_TRACE(std::to_string(n) + " rows x " + std::to_string(width) + ", " +
               std::to_string(multiprocessors) + " multiprocessors");
  LaunchCheck(n, width, multiprocessors, exhaustive).Run();
}

TEST(RowGroupsTest, LanesPerRow) {
  const std::pair<uint64_t, int> cases[] = {
      {1, 1},   {2, 2},   {3, 4},   {4, 4},   {5, 8},   {7, 8},   {8, 8},     {9, 16},
      {13, 16}, {16, 16}, {17, 32}, {31, 32}, {32, 32}, {33, 32}, {1000, 32}, {k2To32, 32},
  };
  for (const auto& [width, lanes] : cases) {
    EXPECT_EQ(1 << RowGroupShift(width), lanes) << "width " << width;
  }
}

// blocks = min(ceil(n * lanes / 256), max_blocks), at least 1; the groups
// are the grid's threads over the lanes.
TEST(RowGroupsTest, LaunchShape) {
  const int h200 = MaxBlocks(kH200);  // 1056
  struct Case {
    uint64_t n, width;
    int max_blocks, blocks;
  };
  const Case cases[] = {
      {1, 1, h200, 1},    {256, 1, h200, 1}, {257, 1, h200, 2},       {8, 32, h200, 1},
      {9, 32, h200, 2},   {9, 3, h200, 1},   {8448, 33, h200, h200},  {8449, 33, h200, h200},
      {1, 1000, h200, 1}, {1000, 5, 8, 8},   {k2To32, 1, h200, h200},
  };
  for (const Case& c : cases) {
    const RowGroupLaunch plan = PlanRowGroups(c.n, c.width, c.max_blocks);
    EXPECT_EQ(plan.blocks, c.blocks) << c.n << " x " << c.width;
    EXPECT_EQ(plan.groups, uint64_t(plan.blocks) * kThreadsPerBlock >> RowGroupShift(c.width))
        << c.n << " x " << c.width;
  }
}

// 32-bit counters exactly when the row counter ((n - 1) + groups), the
// column counter ((width - 1) + lanes) and the flat offset (n * width - 1)
// all fit in 32 bits.
TEST(RowGroupsTest, NarrowOnlyWhereNothingWraps) {
  const int h200 = MaxBlocks(kH200);
  const uint64_t widths[] = {1, 3, 33, 1000, k2To32 / 4, k2To32 - 33, k2To32 - 32, k2To32 - 1};
  for (uint64_t width : widths) {
    const uint64_t at = k2To32 / width;
    for (uint64_t n : {uint64_t{1}, at - 1, at, at + 1, k2To32 - 270336, k2To32 - 270335}) {
      if (n == 0) continue;
      const RowGroupLaunch plan = PlanRowGroups(n, width, h200);
      const uint64_t lanes = uint64_t{1} << plan.lane_shift;
      const bool fits = n - 1 + plan.groups < k2To32 && width - 1 + lanes < k2To32 &&
                        n * width - 1 < k2To32 && n * width / width == n;
      EXPECT_EQ(plan.narrow, fits) << n << " x " << width;
    }
  }
}

// Every element of every small shape, every thread of the launch, counted.
void CheckSmallShapes(int multiprocessors) {
  const uint64_t row_counts[] = {1, 2, 3, 5, 8, 31, 32, 33, 100, 255, 256, 257, 1000, 2049, 4097};
  for (uint64_t width : kWidths) {
    for (uint64_t n : row_counts) CheckLaunch(n, width, multiprocessors, /*exhaustive=*/true);
  }
}

TEST(RowGroupsTest, EveryElementOnceForSmallShapesOnAnH200) {
  CheckSmallShapes(kH200);
  // Capped grids: more rows than groups (8448 groups of 32 lanes).
  for (uint64_t width : {33, 64, 100}) CheckLaunch(8449, width, kH200, true);
  CheckLaunch(270337, 1, kH200, true);  // one-lane groups
}

TEST(RowGroupsTest, EveryElementOnceForSmallShapesOnAnA100) { CheckSmallShapes(kA100); }

TEST(RowGroupsTest, EveryElementOnceForSmallShapesOnOneMultiprocessor) { CheckSmallShapes(1); }

// Sizes around 2^32 elements, where a 32-bit counter or flat offset would
// wrap: n * width around 2^32 for several widths, n around 2^32 - groups
// (the row counter of one-lane rows), and one row of about 2^32 elements
// (the column counter). Each thread's last rows and columns are run.
void CheckAroundTwoToThe32(int multiprocessors) {
  for (uint64_t width : {1, 3, 4, 33, 1000}) {
    const uint64_t at = k2To32 / width;
    for (uint64_t n : {at - 1, at, at + 1}) CheckLaunch(n, width, multiprocessors, false);
  }
  const uint64_t groups = PlanRowGroups(k2To32, 1, MaxBlocks(multiprocessors)).groups;
  for (uint64_t n :
       {k2To32 - groups - 1, k2To32 - groups, k2To32 - groups + 1, k2To32 - 1, k2To32 + 1}) {
    CheckLaunch(n, 1, multiprocessors, false);
  }
  for (uint64_t width : {k2To32 - 33, k2To32 - 32, k2To32 - 31, k2To32 - 1, k2To32 + 1}) {
    CheckLaunch(1, width, multiprocessors, false);
    CheckLaunch(3, width, multiprocessors, false);
  }
}

TEST(RowGroupsTest, EveryElementOnceAroundTwoToThe32OnAnH200) { CheckAroundTwoToThe32(kH200); }

TEST(RowGroupsTest, EveryElementOnceAroundTwoToThe32OnOtherGrids) {
  CheckAroundTwoToThe32(kA100);
  CheckAroundTwoToThe32(1);
}

}  // namespace
}  // namespace geeps::device::cuda
