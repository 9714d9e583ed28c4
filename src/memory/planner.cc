#include "memory/planner.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>

namespace geeps::memory {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// Saturating arithmetic: a requirement that does not fit in 64 bits is kMax,
// which no budget meets.
uint64_t SatAdd(uint64_t a, uint64_t b) { return a > kMax - b ? kMax : a + b; }
uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kMax : r;
}

// One open or close of a local access, by op index (for the eviction search).
struct BatchEvent {
  size_t op;
  uint64_t bytes;
  bool open;
};

// What MakePlan derives from a validated input, independent of the budget.
struct Prepared {
  std::vector<uint64_t> buffer;                 // per access: rounded buffer bytes
  std::vector<std::vector<BatchEvent>> events;  // per batch, in op order
  // Every cached row as (table, row), in first-access order.
  std::vector<std::pair<int, uint64_t>> cache_order;
  // cache_cum[k]: the device cost of the first k rows of cache_order.
  std::vector<uint64_t> cache_cum;
  uint64_t local_total = 0;
};

// A placement of the local batches and what it needs from the pool.
struct Step {
  std::vector<bool> on_device;
  uint64_t local_bytes = 0;
  uint64_t peak = 0;
  uint64_t extent = 0;

  // The least pool with `factor` x peak (1: it works; 2: double buffering).
  uint64_t PoolMin(uint64_t factor) const { return std::max(SatMul(factor, peak), extent); }
  // The least budget of this placement with no cache row on the device.
  uint64_t Required(uint64_t factor) const { return SatAdd(PoolMin(factor), local_bytes); }
};

std::string Bytes(uint64_t b) { return std::to_string(b); }

bool NeedsPool(const PlanInput& in, const std::vector<bool>& on_device, int access) {
  const AccessInfo& a = in.accesses[access];
  return a.kind != AccessKind::kLocal || !on_device[a.table];
}

Status Validate(const PlanInput& in, Prepared* p) {
  const uint64_t align = in.buffer_alignment;
  if (align == 0 || (align & (align - 1)) != 0)
    return InvalidArgumentError("memory plan: buffer_alignment " + Bytes(align) +
                                " is not a power of two");
  uint64_t cache_total = 0;
  for (size_t t = 0; t < in.tables.size(); ++t) {
    const CacheTable& tab = in.tables[t];
    if (tab.rows > 0 && tab.row_bytes == 0)
      return InvalidArgumentError("memory plan: table " + std::to_string(t) + " has row_bytes 0");
    cache_total = SatAdd(cache_total, SatMul(SatMul(tab.rows, 2), tab.row_bytes));
  }
  if (cache_total == kMax)
    return InvalidArgumentError("memory plan: the cache size overflows 64 bits");
  for (const LocalBatch& b : in.local_batches) p->local_total = SatAdd(p->local_total, b.bytes);
  if (p->local_total == kMax)
    return InvalidArgumentError("memory plan: the local data size overflows 64 bits");

  p->buffer.assign(in.accesses.size(), 0);
  for (size_t i = 0; i < in.accesses.size(); ++i) {
    const AccessInfo& a = in.accesses[i];
    const std::string name = "memory plan: access " + std::to_string(i);
    const bool local = a.kind == AccessKind::kLocal;
    if (!local && a.kind != AccessKind::kRead && a.kind != AccessKind::kUpdate)
      return InvalidArgumentError(name + " has an unknown kind");
    const size_t limit = local ? in.local_batches.size() : in.tables.size();
    if (a.table < 0 || static_cast<size_t>(a.table) >= limit)
      return InvalidArgumentError(name + " names " + (local ? "local batch " : "table ") +
                                  std::to_string(a.table) + " of " + std::to_string(limit));
    if (!local) {
      for (uint64_t r : a.cache_rows) {
        if (r >= in.tables[a.table].rows)
          return InvalidArgumentError(name + " touches cached row " + Bytes(r) + " of table " +
                                      std::to_string(a.table) + ", which caches " +
                                      Bytes(in.tables[a.table].rows) + " rows");
      }
    }
    if (a.bytes > kMax - (align - 1)) return InvalidArgumentError(name + ": buffer size overflows");
    p->buffer[i] = (a.bytes + align - 1) & ~(align - 1);
  }

  // The sequence: balanced opens and closes; first-access order of the rows.
  std::vector<bool> open(in.accesses.size(), false);
  std::vector<std::vector<bool>> seen(in.tables.size());
  for (size_t t = 0; t < in.tables.size(); ++t) seen[t].assign(in.tables[t].rows, false);
  p->events.assign(in.local_batches.size(), {});
  uint64_t opened_total = 0;
  for (size_t i = 0; i < in.ops.size(); ++i) {
    const PlanOp& op = in.ops[i];
    const std::string name = "memory plan: op " + std::to_string(i);
    if (op.access < 0 || static_cast<size_t>(op.access) >= in.accesses.size())
      return InvalidArgumentError(name + " names access " + std::to_string(op.access) + " of " +
                                  std::to_string(in.accesses.size()));
    const AccessInfo& a = in.accesses[op.access];
    const bool is_open = op.kind == OpKind::kOpen;
    if (!is_open && op.kind != OpKind::kClose)
      return InvalidArgumentError(name + " has an unknown kind");
    if (open[op.access] == is_open)
      return InvalidArgumentError(name + (is_open ? " opens" : " closes") + " access " +
                                  std::to_string(op.access) + ", which is " +
                                  (is_open ? "already open" : "not open"));
    open[op.access] = is_open;
    if (a.kind == AccessKind::kLocal) {
      p->events[a.table].push_back({i, p->buffer[op.access], is_open});
    } else if (is_open) {
      for (uint64_t r : a.cache_rows) {
        if (seen[a.table][r]) continue;
        seen[a.table][r] = true;
        p->cache_order.emplace_back(a.table, r);
      }
    }
    if (is_open) opened_total = SatAdd(opened_total, p->buffer[op.access]);
  }
  if (opened_total == kMax)
    return InvalidArgumentError("memory plan: the buffers of the sequence overflow 64 bits");
  for (size_t i = 0; i < open.size(); ++i) {
    if (open[i])
      return InvalidArgumentError("memory plan: access " + std::to_string(i) +
                                  " is still open at the end of the sequence");
  }
  // Cached rows that no op touches go last, in table and row order.
  for (size_t t = 0; t < in.tables.size(); ++t) {
    for (uint64_t r = 0; r < in.tables[t].rows; ++r) {
      if (!seen[t][r]) p->cache_order.emplace_back(static_cast<int>(t), r);
    }
  }
  p->cache_cum.assign(p->cache_order.size() + 1, 0);
  for (size_t k = 0; k < p->cache_order.size(); ++k) {
    p->cache_cum[k + 1] = p->cache_cum[k] + 2 * in.tables[p->cache_order[k].first].row_bytes;
  }
  return Status::OK();
}

// Pool bytes open after each op, for the local placement `on_device`.
std::vector<uint64_t> Profile(const PlanInput& in, const Prepared& p,
                              const std::vector<bool>& on_device) {
  std::vector<uint64_t> prof(in.ops.size());
  uint64_t cur = 0;
  for (size_t i = 0; i < in.ops.size(); ++i) {
    const PlanOp& op = in.ops[i];
    if (NeedsPool(in, on_device, op.access)) {
      if (op.kind == OpKind::kOpen)
        cur += p.buffer[op.access];
      else
        cur -= p.buffer[op.access];
    }
    prof[i] = cur;
  }
  return prof;
}

// The end of the highest block when a first-fit BufferPool replays the
// sequence in order: allocate at open, free at close.
uint64_t FitExtent(const PlanInput& in, const Prepared& p, const std::vector<bool>& on_device) {
  BufferPool pool(nullptr, kMax);
  std::vector<uint64_t> offset(in.accesses.size(), 0);
  for (const PlanOp& op : in.ops) {
    const uint64_t bytes = p.buffer[op.access];
    if (bytes == 0 || !NeedsPool(in, on_device, op.access)) continue;
    if (op.kind == OpKind::kOpen) {
      // Cannot fail: Validate bounded the sum of all buffers.
      offset[op.access] = pool.Allocate(bytes, in.buffer_alignment).value();
    } else {
      (void)pool.Free(offset[op.access]);
    }
  }
  return pool.high_water_extent();
}

Step MakeStep(const PlanInput& in, const Prepared& p, std::vector<bool> on_device) {
  Step s;
  s.on_device = std::move(on_device);
  for (size_t b = 0; b < s.on_device.size(); ++b) {
    if (s.on_device[b]) s.local_bytes += in.local_batches[b].bytes;
  }
  for (uint64_t v : Profile(in, p, s.on_device)) s.peak = std::max(s.peak, v);
  s.extent = FitExtent(in, p, s.on_device);
  return s;
}

// Range maximum over a fixed array in O(1) after O(n log n) set-up.
class RangeMax {
 public:
  explicit RangeMax(std::vector<uint64_t> v) {
    table_.push_back(std::move(v));
    const size_t n = table_[0].size();
    for (size_t w = 1; 2 * w <= n; w *= 2) {
      const std::vector<uint64_t>& prev = table_.back();
      std::vector<uint64_t> next(n - 2 * w + 1);
      for (size_t i = 0; i < next.size(); ++i) next[i] = std::max(prev[i], prev[i + w]);
      table_.push_back(std::move(next));
    }
  }
  // REQUIRES: lo < hi <= n. Max over [lo, hi).
  uint64_t Max(size_t lo, size_t hi) const {
    size_t k = 0;
    while ((size_t{2} << k) <= hi - lo) ++k;
    return std::max(table_[k][lo], table_[k][hi - (size_t{1} << k)]);
  }

 private:
  std::vector<std::vector<uint64_t>> table_;
};

// The local placements the planner may use, from all on the device to none:
// each step moves to host memory the batch whose move lowers the estimated
// double-buffered requirement (2 x peak + local bytes) the most (ties: the
// larger batch, then the lower index). The order does not depend on the
// level, so every level walks the same chain. Only the first step when
// `all_local` is set.
std::vector<Step> Trajectory(const PlanInput& in, const Prepared& p, bool all_local) {
  std::vector<Step> steps;
  steps.push_back(MakeStep(in, p, std::vector<bool>(in.local_batches.size(), true)));
  if (all_local) return steps;
  for (size_t moved = 0; moved < in.local_batches.size(); ++moved) {
    const Step& cur = steps.back();
    std::vector<uint64_t> prof = Profile(in, p, cur.on_device);
    const size_t n = prof.size();
    std::optional<RangeMax> rmq;
    if (n > 0) rmq.emplace(std::move(prof));
    size_t best = 0;
    uint64_t best_est = kMax;
    bool found = false;
    for (size_t b = 0; b < in.local_batches.size(); ++b) {
      if (!cur.on_device[b]) continue;
      // The peak with b's accesses also taking pool buffers: the profile plus
      // b's open bytes, which are constant between b's events.
      uint64_t peak = 0, extra = 0;
      size_t from = 0;
      for (const BatchEvent& e : p.events[b]) {
        if (from < e.op) peak = std::max(peak, SatAdd(rmq->Max(from, e.op), extra));
        extra = e.open ? extra + e.bytes : extra - e.bytes;
        from = e.op;
      }
      if (from < n) peak = std::max(peak, SatAdd(rmq->Max(from, n), extra));
      const uint64_t bytes = in.local_batches[b].bytes;
      const uint64_t est = SatAdd(SatMul(2, peak), cur.local_bytes - bytes);
      if (!found || est < best_est || (est == best_est && bytes > in.local_batches[best].bytes)) {
        best = b;
        best_est = est;
        found = true;
      }
    }
    std::vector<bool> next = cur.on_device;
    next[best] = false;
    steps.push_back(MakeStep(in, p, std::move(next)));
  }
  return steps;
}

uint64_t FactorFor(Level level) { return level >= Level::kDoubleBuffering ? 2 : 1; }

// The least budget of `level` over `steps` (the trajectory, or its first
// step for the levels that keep all local data on the device), and the step
// it is reached with.
uint64_t Minimum(const std::vector<Step>& steps, const Prepared& p, Level level, size_t* at) {
  const uint64_t factor = FactorFor(level);
  *at = 0;
  if (level == Level::kWholeCacheOnDevice)
    return SatAdd(steps[0].Required(factor), p.cache_cum.back());
  const size_t n = level == Level::kAllLocalOnDevice ? 1 : steps.size();
  for (size_t s = 1; s < n; ++s) {
    if (steps[s].Required(factor) < steps[*at].Required(factor)) *at = s;
  }
  return steps[*at].Required(factor);
}

Status Exhausted(const PlanInput& in, const Prepared& p, const Step& s, uint64_t factor,
                 uint64_t minimum, bool whole_cache, const std::string& what) {
  std::ostringstream m;
  m << "memory plan: device budget " << in.budget_bytes << " bytes " << what
    << ". Least-demanding placement: peak " << s.peak
    << " bytes of pool buffers open at once; pool needed " << s.PoolMin(factor) << " bytes ("
    << factor << " x peak, first-fit extent " << s.extent << "); local data " << s.local_bytes
    << " of " << p.local_total << " bytes on the device; parameter cache "
    << (whole_cache ? p.cache_cum.back() : 0) << " of " << p.cache_cum.back()
    << " bytes on the device (cache + oplog row per cached row); total " << minimum << " bytes";
  return ResourceExhaustedError(m.str());
}

}  // namespace

const char* LevelName(Level level) {
  switch (level) {
    case Level::kNone:
      return "kNone";
    case Level::kDoubleBuffering:
      return "kDoubleBuffering";
    case Level::kAllLocalOnDevice:
      return "kAllLocalOnDevice";
    case Level::kWholeCacheOnDevice:
      return "kWholeCacheOnDevice";
  }
  return "?";
}

StatusOr<uint64_t> MinimumBudget(const PlanInput& input, Level level) {
  Prepared p;
  GEEPS_RETURN_IF_ERROR(Validate(input, &p));
  const std::vector<Step> steps = Trajectory(input, p, level >= Level::kAllLocalOnDevice);
  size_t at = 0;
  const uint64_t minimum = Minimum(steps, p, level, &at);
  if (minimum == kMax)
    return ResourceExhaustedError("memory plan: the minimum budget overflows 64 bits");
  return minimum;
}

StatusOr<Plan> MakePlan(const PlanInput& in) {
  if (in.budget_bytes == 0)
    return InvalidArgumentError("memory plan: the device memory budget must be > 0");
  Prepared p;
  GEEPS_RETURN_IF_ERROR(Validate(in, &p));
  const Level level = in.required_level;
  const uint64_t factor = FactorFor(level);
  const bool all_local = level >= Level::kAllLocalOnDevice;
  const std::vector<Step> steps = Trajectory(in, p, all_local);
  const uint64_t budget = in.budget_bytes;

  // The placements form one chain, most on the device first: every local
  // batch with the cache rows from all down to none, then the local batches
  // leaving one by one. The plan is the first that fits, so a smaller budget
  // never places more.
  const Step* chosen = nullptr;
  size_t cache_rows = 0;
  if (steps[0].Required(factor) <= budget) {
    chosen = &steps[0];
    const uint64_t room = budget - steps[0].Required(factor);
    cache_rows =
        std::upper_bound(p.cache_cum.begin(), p.cache_cum.end(), room) - p.cache_cum.begin() - 1;
    if (level == Level::kWholeCacheOnDevice && cache_rows < p.cache_order.size()) chosen = nullptr;
  } else {
    for (size_t s = 1; s < steps.size() && chosen == nullptr; ++s) {
      if (steps[s].Required(factor) <= budget) chosen = &steps[s];
    }
  }
  if (chosen == nullptr) {
    const std::vector<Step> full = all_local ? Trajectory(in, p, false) : steps;
    size_t at = 0;
    const uint64_t min_none = Minimum(full, p, Level::kNone, &at);
    if (budget < min_none) {
      return Exhausted(in, p, full[at], 1, min_none, false,
                       "is below the minimum that can work at all (" + Bytes(min_none) + " bytes)");
    }
    const uint64_t min_level = Minimum(steps, p, level, &at);
    return Exhausted(in, p, steps[at], factor, min_level, level == Level::kWholeCacheOnDevice,
                     std::string("cannot meet the required level ") + LevelName(level) +
                         " (it needs " + Bytes(min_level) +
                         " bytes; the minimum that can work at all is " + Bytes(min_none) +
                         " bytes)");
  }

  Plan plan;
  plan.budget_bytes = budget;
  plan.peak_bytes = chosen->peak;
  plan.fit_extent_bytes = chosen->extent;
  plan.pool_min_bytes = chosen->PoolMin(factor);
  plan.local_device_bytes = chosen->local_bytes;
  plan.local_total_bytes = p.local_total;
  plan.cache_device_bytes = p.cache_cum[cache_rows];
  plan.cache_total_bytes = p.cache_cum.back();
  plan.local_on_device = chosen->on_device;
  plan.row_on_device.resize(in.tables.size());
  plan.device_rows.assign(in.tables.size(), 0);
  for (size_t t = 0; t < in.tables.size(); ++t) {
    plan.row_on_device[t].assign(in.tables[t].rows, false);
  }
  for (size_t k = 0; k < cache_rows; ++k) {
    const auto& [t, r] = p.cache_order[k];
    plan.row_on_device[t][r] = true;
    ++plan.device_rows[t];
  }
  plan.access_needs_pool.resize(in.accesses.size());
  for (size_t a = 0; a < in.accesses.size(); ++a) {
    plan.access_needs_pool[a] = NeedsPool(in, plan.local_on_device, static_cast<int>(a));
  }
  // The leftover enlarges the pool (up to the cap), in whole alignment units.
  uint64_t pool = budget - plan.local_device_bytes - plan.cache_device_bytes;
  if (in.max_pool_bytes > 0) pool = std::min(pool, in.max_pool_bytes);
  pool &= ~(in.buffer_alignment - 1);
  plan.pool_bytes = std::max(pool, plan.pool_min_bytes);
  plan.device_bytes_used = plan.pool_bytes + plan.local_device_bytes + plan.cache_device_bytes;

  const bool double_buffered = plan.pool_bytes >= chosen->PoolMin(2);
  const bool local_all = std::find(plan.local_on_device.begin(), plan.local_on_device.end(),
                                   false) == plan.local_on_device.end();
  const bool whole_cache = cache_rows == p.cache_order.size();
  plan.level = !double_buffered ? Level::kNone
               : !local_all     ? Level::kDoubleBuffering
               : !whole_cache   ? Level::kAllLocalOnDevice
                                : Level::kWholeCacheOnDevice;
  return plan;
}

std::vector<RowRange> Plan::DeviceRowRanges(size_t table) const {
  std::vector<RowRange> ranges;
  const std::vector<bool>& rows = row_on_device[table];
  for (uint64_t r = 0; r < rows.size(); ++r) {
    if (!rows[r]) continue;
    if (!ranges.empty() && ranges.back().second == r) {
      ranges.back().second = r + 1;
    } else {
      ranges.emplace_back(r, r + 1);
    }
  }
  return ranges;
}

std::string Plan::Describe() const {
  std::ostringstream o;
  size_t local_on = 0;
  for (bool b : local_on_device) local_on += b;
  uint64_t rows_on = 0, rows_total = 0;
  for (size_t t = 0; t < row_on_device.size(); ++t) {
    rows_on += device_rows[t];
    rows_total += row_on_device[t].size();
  }
  o << "memory plan: level " << LevelName(level) << ", " << device_bytes_used << " of "
    << budget_bytes << " budget bytes on the device\n"
    << "  access buffer pool: " << pool_bytes << " bytes (peak " << peak_bytes
    << ", first-fit extent " << fit_extent_bytes << ", minimum " << pool_min_bytes << ")\n"
    << "  local data: " << local_on << " of " << local_on_device.size()
    << " batches on the device (" << local_device_bytes << " of " << local_total_bytes
    << " bytes)\n"
    << "  parameter cache: " << rows_on << " of " << rows_total << " rows on the device ("
    << cache_device_bytes << " of " << cache_total_bytes << " bytes with oplog)";
  for (size_t t = 0; t < row_on_device.size(); ++t) {
    o << (t == 0 ? "\n   " : ";") << " table " << t << ": " << device_rows[t] << "/"
      << row_on_device[t].size();
  }
  return o.str();
}

std::string Plan::ToJson() const {
  std::ostringstream o;
  auto bools = [&o](const std::vector<bool>& v) {
    o << '[';
    for (size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << (v[i] ? "true" : "false");
    o << ']';
  };
  o << "{\"level\":\"" << LevelName(level) << "\",\"budget_bytes\":" << budget_bytes
    << ",\"device_bytes_used\":" << device_bytes_used << ",\"pool_bytes\":" << pool_bytes
    << ",\"pool_min_bytes\":" << pool_min_bytes << ",\"peak_bytes\":" << peak_bytes
    << ",\"fit_extent_bytes\":" << fit_extent_bytes
    << ",\"local_device_bytes\":" << local_device_bytes
    << ",\"local_total_bytes\":" << local_total_bytes
    << ",\"cache_device_bytes\":" << cache_device_bytes
    << ",\"cache_total_bytes\":" << cache_total_bytes << ",\"local_on_device\":";
  bools(local_on_device);
  o << ",\"access_needs_pool\":";
  bools(access_needs_pool);
  o << ",\"tables\":[";
  for (size_t t = 0; t < row_on_device.size(); ++t) {
    o << (t ? "," : "") << "{\"rows\":" << row_on_device[t].size()
      << ",\"device_rows\":" << device_rows[t] << ",\"device_row_ranges\":[";
    const std::vector<RowRange> ranges = DeviceRowRanges(t);
    for (size_t i = 0; i < ranges.size(); ++i) {
      o << (i ? "," : "") << '[' << ranges[i].first << ',' << ranges[i].second << ']';
    }
    o << "]}";
  }
  o << "]}";
  return o.str();
}

}  // namespace geeps::memory
