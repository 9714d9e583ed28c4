// The plan of a worker's iterations, computed once at FinishVirtualIteration
// from the recorded sequence and the configuration: which rows each shared
// table caches and how they fall in the server partitions, after which
// operation each table's clock advances, and which reads and updates take
// the direct paths (docs/architecture.md, "Per-worker state (client)").
//
// Pure: no device, no sockets, no threads. It decides nothing about memory:
// where the memory manager places the caches is an input (PlaceCaches).
//
// Invariants:
//  - a shared table's `rows` are sorted and unique: every row the worker
//    reads or updates in it; its slices cover the partitions with a
//    non-empty row span, in partition order.
//  - every shared table advances exactly once per section: after its last
//    Update there, or, with none, at Clock() (repeated section) or at the
//    end of the prologue.
//  - a direct update or an in-place read has rows at consecutive cached
//    positions in ascending order, starting at its first_pos.
#ifndef GEEPS_CLIENT_ITERATION_PLAN_H_
#define GEEPS_CLIENT_ITERATION_PLAN_H_

#include <cstdint>
#include <vector>

#include "client/op_sequence.h"
#include "client/table_cache.h"
#include "geeps/config.h"

namespace geeps::client {

// Position of each of `rows` in the sorted `cached` rows (all of `rows`
// must be cached).
std::vector<uint32_t> CachedPositions(const std::vector<uint64_t>& cached,
                                      const std::vector<RowIndex>& rows);

// Whether `rows` are consecutive rows in ascending order.
bool ConsecutiveRows(const std::vector<RowIndex>& rows);

// The cached rows of one table and their partitions.
struct TablePlan {
  bool shared = false;                 // false: a local table (nothing cached)
  std::vector<uint64_t> rows;          // cached rows, sorted
  std::vector<PartitionSlice> slices;  // partitions with a non-empty span
};

class IterationPlan {
 public:
  // Cached rows, slices, the clock plan and the reads' slices.
  // REQUIRES: seq.Finish() is OK.
  IterationPlan(const Config& config, const OpSequence& seq);

  // The direct paths, once the caches are placed: cache_on_device[id] says
  // whether the whole cache of shared table `id` lies in device memory (true
  // for every table without a memory budget).
  void PlaceCaches(const std::vector<bool>& cache_on_device);

  const TablePlan& table(TableId id) const { return tables_[id]; }
  // Tables whose clock advances after op `pos` of section `s`.
  const std::vector<TableId>& advance_after(Section s, size_t pos) const {
    return advance_after_[s][pos];
  }
  // Tables without an Update in the prologue: they advance at its end.
  const std::vector<TableId>& prologue_end_tables() const { return prologue_end_tables_; }
  // Indexes into the table's slices of the partitions a read covers.
  const std::vector<int>& read_slices(int32_t read) const { return read_slices_[read]; }

  // An update that is the only one of its table in every section it occurs
  // in, covers exactly the rows the worker updates in that table, at
  // consecutive cached positions in order, all in device memory, with
  // read-my-writes off: its buffer holds the table's whole clock of deltas
  // in slot order (an Update copies or sends it straight, no oplog).
  bool direct_update(int32_t update) const { return direct_update_[update]; }
  uint32_t direct_first_pos(int32_t update) const { return direct_first_pos_[update]; }
  // A read in the repeated section with slack 0, read-my-writes off, over
  // consecutive cached positions in order, the whole table cache in device
  // memory, and no advance of its table between the Read and its PostRead:
  // no push of the table can be installed while it is open, so Read returns
  // the cache rows themselves.
  bool read_in_place(int32_t read) const { return read_in_place_[read]; }
  uint32_t read_first_pos(int32_t read) const { return read_first_pos_[read]; }

 private:
  void PlanTables();
  void PlanClocks();

  const Config& config_;
  const OpSequence& seq_;
  std::vector<TablePlan> tables_;
  std::vector<std::vector<TableId>> advance_after_[2];
  std::vector<TableId> prologue_end_tables_;
  std::vector<std::vector<int>> read_slices_;
  std::vector<bool> direct_update_, read_in_place_;
  std::vector<uint32_t> direct_first_pos_, read_first_pos_;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_ITERATION_PLAN_H_
