// Where the parameters and the local data of a network (examples/layers)
// live in the network trainer's tables (see net_trainer.h): one shared
// table per layer with parameters, then one local table; the rows of each
// tensor.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_NET_LAYOUT_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_NET_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "geeps/config.h"
#include "layers.h"

namespace fmnist {

constexpr uint32_t kParamRowWidth = 256;
constexpr uint32_t kLocalRowWidth = 1024;

// Where everything of one network lives.
struct Layout {
  // Layer l's parameters: the rows 0..n-1 of shared table param_table[l]
  // (params[l] empty: none), one table per layer with parameters, so that
  // each layer's Update is the only one of its table per clock (a direct
  // update, docs/architecture.md); param_offset[l] is the offset of its
  // first float in a flat copy of all layers' rows (param_rows rows).
  std::vector<std::vector<geeps::RowIndex>> params;
  std::vector<geeps::TableId> param_table;
  std::vector<uint64_t> param_table_rows;  // per parameter table
  std::vector<size_t> param_offset;
  uint64_t param_rows = 0;
  // The local table (after the parameter tables), per worker: act[l] =
  // input of layer l (act[0] the images,
  // act[L] the logits), grad[l] = dLoss/dact[l] (l >= 1), wgrad[l] and
  // velocity[l] for layers with parameters, one scratch shared by all.
  std::vector<std::vector<geeps::RowIndex>> act, grad, wgrad, velocity;
  std::vector<geeps::RowIndex> scratch;
  uint64_t local_rows = 0;
  geeps::TableId local_table = 0;
};

// The layout of `net` with local buffers for `per_worker_batch` examples.
Layout MakeLayout(const nn::Network& net, int per_worker_batch);

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_NET_LAYOUT_H_
