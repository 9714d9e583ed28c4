#include "client/iteration_plan.h"

#include <algorithm>

#include "common/partition.h"

namespace geeps::client {
namespace {

// The first cached position of `rows` (an access's rows: all cached) if
// they lie at consecutive cached positions in ascending order; -1 otherwise.
int64_t ConsecutivePositions(const std::vector<uint64_t>& cached,
                             const std::vector<RowIndex>& rows) {
  const std::vector<uint32_t> pos = CachedPositions(cached, rows);
  if (pos.empty()) return -1;
  for (size_t i = 1; i < pos.size(); ++i) {
    if (pos[i] != pos[0] + i) return -1;
  }
  return pos[0];
}

}  // namespace

std::vector<uint32_t> CachedPositions(const std::vector<uint64_t>& cached,
                                      const std::vector<RowIndex>& rows) {
  std::vector<uint32_t> pos(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    pos[i] = static_cast<uint32_t>(std::lower_bound(cached.begin(), cached.end(), rows[i]) -
                                   cached.begin());
  }
  return pos;
}

bool ConsecutiveRows(const std::vector<RowIndex>& rows) {
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i] != rows[0] + i) return false;
  }
  return true;
}

IterationPlan::IterationPlan(const Config& config, const OpSequence& seq)
    : config_(config), seq_(seq) {
  PlanTables();
  PlanClocks();
  // No direct path until the caches are placed.
  direct_update_.assign(seq_.updates().size(), false);
  direct_first_pos_.assign(seq_.updates().size(), 0);
  read_in_place_.assign(seq_.reads().size(), false);
  read_first_pos_.assign(seq_.reads().size(), 0);
}

void IterationPlan::PlanTables() {
  const int num_partitions = config_.num_shards * config_.num_channels;
  tables_.resize(config_.tables.size());
  for (TableId id = 0; id < config_.tables.size(); ++id) {
    const TableSpec& spec = config_.tables[id];
    if (spec.local) continue;
    TablePlan& t = tables_[id];
    t.shared = true;
    std::vector<uint64_t> updated;
    for (const RecordedAccess& a : seq_.reads())
      if (a.table == id) t.rows.insert(t.rows.end(), a.rows.begin(), a.rows.end());
    for (const RecordedAccess& a : seq_.updates())
      if (a.table == id) updated.insert(updated.end(), a.rows.begin(), a.rows.end());
    t.rows.insert(t.rows.end(), updated.begin(), updated.end());
    for (auto* v : {&t.rows, &updated}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    for (int p = 0; p < num_partitions; ++p) {
      common::RowSpan span = common::PartitionRows(spec.num_rows, p, num_partitions);
      if (span.size() == 0) continue;
      PartitionSlice s;
      s.partition = p;
      s.row_begin = span.begin;
      s.row_end = span.end;
      auto lo = std::lower_bound(t.rows.begin(), t.rows.end(), span.begin);
      auto hi = std::lower_bound(t.rows.begin(), t.rows.end(), span.end);
      s.cache_begin = static_cast<uint32_t>(lo - t.rows.begin());
      s.cache_count = static_cast<uint32_t>(hi - lo);
      auto ulo = std::lower_bound(updated.begin(), updated.end(), span.begin);
      auto uhi = std::lower_bound(updated.begin(), updated.end(), span.end);
      s.update_rows.assign(ulo, uhi);
      s.update_pos = CachedPositions(t.rows, s.update_rows);
      t.slices.push_back(std::move(s));
    }
  }
  read_slices_.resize(seq_.reads().size());
  for (size_t i = 0; i < seq_.reads().size(); ++i) {
    const RecordedAccess& a = seq_.reads()[i];
    const std::vector<PartitionSlice>& slices = tables_[a.table].slices;
    for (size_t si = 0; si < slices.size(); ++si) {
      const PartitionSlice& s = slices[si];
      if (std::any_of(a.rows.begin(), a.rows.end(),
                      [&](RowIndex r) { return r >= s.row_begin && r < s.row_end; }))
        read_slices_[i].push_back(static_cast<int>(si));
    }
  }
}

void IterationPlan::PlanClocks() {
  for (int s = 0; s < 2; ++s) {
    const std::vector<Op>& ops = seq_.ops(static_cast<Section>(s));
    advance_after_[s].assign(ops.size(), {});
    std::vector<int64_t> last_update(config_.tables.size(), -1);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].type == OpType::kUpdate)
        last_update[seq_.updates()[ops[i].handle].table] = static_cast<int64_t>(i);
    }
    for (TableId id = 0; id < config_.tables.size(); ++id) {
      if (config_.tables[id].local) continue;
      if (last_update[id] >= 0) {
        advance_after_[s][last_update[id]].push_back(id);
      } else if (s == kRepeated) {
        advance_after_[s][ops.size() - 1].push_back(id);  // at Clock()
      } else {
        prologue_end_tables_.push_back(id);
      }
    }
  }
}

void IterationPlan::PlaceCaches(const std::vector<bool>& cache_on_device) {
  // Direct updates.
  const size_t n = seq_.updates().size();
  direct_update_.assign(n, !config_.read_my_writes);
  direct_first_pos_.assign(n, 0);
  std::vector<bool> seen(n, false);
  for (int s = 0; s < 2; ++s) {
    std::vector<int> updates_of(config_.tables.size(), 0);
    for (const Op& op : seq_.ops(static_cast<Section>(s))) {
      if (op.type == OpType::kUpdate) ++updates_of[seq_.updates()[op.handle].table];
    }
    for (const Op& op : seq_.ops(static_cast<Section>(s))) {
      if (op.type != OpType::kUpdate) continue;
      seen[op.handle] = true;
      if (updates_of[seq_.updates()[op.handle].table] != 1) direct_update_[op.handle] = false;
    }
  }
  for (size_t h = 0; h < n; ++h) {
    if (!seen[h] || !direct_update_[h]) {
      direct_update_[h] = false;
      continue;
    }
    const RecordedAccess& a = seq_.updates()[h];
    const TablePlan& t = tables_[a.table];
    size_t updated = 0;
    for (const PartitionSlice& sl : t.slices) updated += sl.update_rows.size();
    const bool shape_ok = cache_on_device[a.table] && a.rows.size() == updated;
    const int64_t first = shape_ok ? ConsecutivePositions(t.rows, a.rows) : -1;
    direct_update_[h] = first >= 0;
    direct_first_pos_[h] = first >= 0 ? static_cast<uint32_t>(first) : 0;
  }

  // Reads in place.
  const size_t m = seq_.reads().size();
  read_in_place_.assign(m, false);
  read_first_pos_.assign(m, 0);
  // The checked mode poisons each read's buffer at PostRead: its own.
  if (config_.read_my_writes || config_.checked) return;
  const std::vector<Op>& ops = seq_.ops(kRepeated);
  std::vector<int64_t> open_at(m, -1), close_at(m, -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].type == OpType::kRead) open_at[ops[i].handle] = static_cast<int64_t>(i);
    if (ops[i].type == OpType::kPostRead) close_at[ops[i].handle] = static_cast<int64_t>(i);
  }
  for (size_t h = 0; h < m; ++h) {
    const RecordedAccess& a = seq_.reads()[h];
    if (a.slack != 0 || open_at[h] < 0 || close_at[h] < open_at[h]) continue;
    const TablePlan& t = tables_[a.table];
    if (!cache_on_device[a.table] || t.rows.empty()) continue;
    bool advances = false;
    for (int64_t p = open_at[h]; p < close_at[h] && !advances; ++p) {
      const std::vector<TableId>& at = advance_after_[kRepeated][p];
      advances = std::find(at.begin(), at.end(), a.table) != at.end();
    }
    if (advances) continue;
    const int64_t first = ConsecutivePositions(t.rows, a.rows);
    if (first < 0) continue;
    read_in_place_[h] = true;
    read_first_pos_[h] = static_cast<uint32_t>(first);
  }
}

}  // namespace geeps::client
