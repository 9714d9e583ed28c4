#include "net_layout.h"

#include <algorithm>

namespace fmnist {
namespace {

std::vector<geeps::RowIndex> Take(uint64_t* next, size_t floats, uint32_t width) {
  const uint64_t n = geeps::RowsFor(std::max<size_t>(floats, 1), width);
  std::vector<geeps::RowIndex> rows = geeps::RowRange(*next, n);
  *next += n;
  return rows;
}

}  // namespace

Layout MakeLayout(const nn::Network& net, int per_worker_batch) {
  Layout l;
  const int n = net.size();
  l.params.resize(n);
  l.param_table.assign(n, 0);
  l.param_offset.resize(n);
  l.act.resize(n + 1);
  l.grad.resize(n + 1);
  l.wgrad.resize(n);
  l.velocity.resize(n);
  size_t scratch = 0;
  for (int i = 0; i < n; ++i) {
    const nn::Layer& layer = net.layer(i);
    l.param_offset[i] = l.param_rows * kParamRowWidth;
    if (layer.num_params() > 0) {
      uint64_t table_rows = 0;
      l.params[i] = Take(&table_rows, layer.num_params(), kParamRowWidth);
      l.param_table[i] = static_cast<geeps::TableId>(l.param_table_rows.size());
      l.param_table_rows.push_back(table_rows);
      l.param_rows += table_rows;
    }
    scratch = std::max(scratch, layer.ScratchFloats(per_worker_batch));
  }
  const auto batch = static_cast<size_t>(per_worker_batch);
  for (int i = 0; i <= n; ++i) {
    const size_t floats =
        batch * (i == 0 ? net.input_shape().size() : net.layer(i - 1).out_shape().size());
    l.act[i] = Take(&l.local_rows, floats, kLocalRowWidth);
    if (i > 0) l.grad[i] = Take(&l.local_rows, floats, kLocalRowWidth);
  }
  for (int i = 0; i < n; ++i) {
    const size_t p = net.layer(i).num_params();
    if (p == 0) continue;
    l.wgrad[i] = Take(&l.local_rows, p, kLocalRowWidth);
    l.velocity[i] = Take(&l.local_rows, p, kLocalRowWidth);
  }
  if (scratch > 0) l.scratch = Take(&l.local_rows, scratch, kLocalRowWidth);
  l.local_table = static_cast<geeps::TableId>(l.param_table_rows.size());
  return l;
}

}  // namespace fmnist
