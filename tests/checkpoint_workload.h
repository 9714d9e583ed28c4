// A deterministic-BSP training-like workload for the checkpoint tests, shared
// by tests/checkpoint_test.cc (threads) and tests/multiproc_worker.cc
// (processes): each iteration's deltas depend on the values read, with float
// arithmetic whose result depends on the order of additions, so a resumed
// run equals an uninterrupted one only if the restored rows are bitwise
// right and the resumed iterations are the right ones.
#ifndef GEEPS_TESTS_CHECKPOINT_WORKLOAD_H_
#define GEEPS_TESTS_CHECKPOINT_WORKLOAD_H_

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "geeps/geeps.h"
#include "host_view.h"

namespace geeps::testing {

inline Config TrainConfig(int workers, int shards, int channels) {
  Config c;
  c.num_workers = workers;
  c.num_shards = shards;
  c.num_channels = channels;
  c.deterministic_bsp = true;
  c.tables = {{"w", 40, 7}, {"b", 3, 5}};
  c.timeout = std::chrono::milliseconds(20000);
  return c;
}

struct TrainOptions {
  int total = 12;       // iterations of the whole job
  int stop_after = -1;  // >= 0: return (without Sync) once this many are done
  // Called before each Clock() with the iteration index.
  std::function<void(GeePS&, int64_t)> before_clock;
};

// Runs iterations [resumed_clock() - 1 or 0, total); on a full run, copies
// the final rows of every table (table by table) into `out`.
inline Status Train(GeePS& ps, const Config& c, const TrainOptions& o, std::vector<float>* out) {
  const size_t tables = c.tables.size();
  std::vector<ReadHandle> reads;
  std::vector<UpdateHandle> updates, init;
  for (TableId t = 0; t < tables; ++t) {
    GEEPS_ASSIGN_OR_RETURN(ReadHandle h, ps.VirtualRead(t, RowRange(0, c.tables[t].num_rows)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(h));
    reads.push_back(h);
  }
  for (TableId t = 0; t < tables; ++t) {
    GEEPS_ASSIGN_OR_RETURN(UpdateHandle h,
                           ps.VirtualPreUpdate(t, RowRange(0, c.tables[t].num_rows)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h));
    updates.push_back(h);
  }
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  if (ps.rank() == 0) {  // the prologue: initial values
    for (TableId t = 0; t < tables; ++t) {
      GEEPS_ASSIGN_OR_RETURN(UpdateHandle h,
                             ps.VirtualPreUpdate(t, RowRange(0, c.tables[t].num_rows)));
      GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h));
      init.push_back(h);
    }
  }
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  GEEPS_RETURN_IF_ERROR(ps.StartIterations());
  for (TableId t = 0; t < init.size(); ++t) {
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(init[t]));
    std::vector<float> initial(c.tables[t].num_rows * c.tables[t].row_width);
    for (size_t k = 0; k < initial.size(); ++k)
      initial[k] = 0.25f + 0.01f * static_cast<float>(k % 17);
    GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, d, initial));
    GEEPS_RETURN_IF_ERROR(ps.Update(init[t]));
  }
  const int64_t first = ps.resumed_clock() > 0 ? ps.resumed_clock() - 1 : 0;
  std::vector<std::vector<float>> values(tables);
  for (int64_t i = first; i < o.total; ++i) {
    if (o.stop_after >= 0 && i >= o.stop_after) return Status::OK();
    for (TableId t = 0; t < tables; ++t) {
      GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(reads[t]));
      GEEPS_ASSIGN_OR_RETURN(values[t],
                             ReadBuffer(ps, v, c.tables[t].num_rows * c.tables[t].row_width));
      GEEPS_RETURN_IF_ERROR(ps.PostRead(reads[t]));
    }
    // Depends only on (rank, iteration) and the values read.
    std::mt19937 rng(static_cast<uint32_t>(1000003 * ps.rank() + i));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (TableId t = 0; t < tables; ++t) {
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(updates[t]));
      const std::vector<float>& w = values[t];
      const std::vector<float>& other = values[(t + 1) % tables];
      std::vector<float> deltas(w.size());
      for (size_t k = 0; k < w.size(); ++k)
        deltas[k] =
            dist(rng) * 1e-3f + 0.1f * std::sin(w[k]) / (1.0f + std::fabs(other[k % other.size()]));
      GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, d, deltas));
      GEEPS_RETURN_IF_ERROR(ps.Update(updates[t]));
    }
    if (o.before_clock) o.before_clock(ps, i);
    GEEPS_RETURN_IF_ERROR(ps.Clock());
  }
  GEEPS_RETURN_IF_ERROR(ps.Sync());
  out->clear();
  for (TableId t = 0; t < tables; ++t) {
    std::vector<float> rows(c.tables[t].num_rows * c.tables[t].row_width);
    GEEPS_RETURN_IF_ERROR(ps.CopyRows(t, RowRange(0, c.tables[t].num_rows), rows.data()));
    out->insert(out->end(), rows.begin(), rows.end());
  }
  return Status::OK();
}

// The bits of `v` as hex, for comparing runs across processes.
inline std::string HexBits(const std::vector<float>& v) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (float f : v) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    for (int k = 7; k >= 0; --k) s += digits[(b >> (4 * k)) & 15];
  }
  return s;
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_CHECKPOINT_WORKLOAD_H_
