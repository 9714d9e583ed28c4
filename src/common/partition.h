// How rows are split over server partitions. A partition is one channel of
// one shard: partition p = shard * num_channels + channel. Every table's rows
// are split into num_shards * num_channels contiguous ranges, so the ranges of
// one shard's channels are adjacent and the shard owns a contiguous range.
#ifndef GEEPS_COMMON_PARTITION_H_
#define GEEPS_COMMON_PARTITION_H_

#include <cstdint>

namespace geeps::common {

struct RowSpan {
  uint64_t begin = 0;  // first row
  uint64_t end = 0;    // one past the last row
  uint64_t size() const { return end - begin; }
  bool contains(uint64_t row) const { return row >= begin && row < end; }
};

// REQUIRES: 0 <= p < num_partitions.
inline RowSpan PartitionRows(uint64_t num_rows, int p, int num_partitions) {
  const unsigned __int128 n = num_rows;
  return RowSpan{static_cast<uint64_t>(n * p / num_partitions),
                 static_cast<uint64_t>(n * (p + 1) / num_partitions)};
}

}  // namespace geeps::common

#endif  // GEEPS_COMMON_PARTITION_H_
