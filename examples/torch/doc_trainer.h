// The two loops of docs/api.md, "With libtorch": a plain libtorch training
// loop, and the same loop with its parameters in libgeeps on `workers`
// workers. TorchDocTest runs both and checks that the guide shows exactly
// this text, and counts the lines the second adds or changes.
//
// Net: a TORCH_MODULE holder; Data: data.Batch(i) returns the (input,
// target) of batch i.
#ifndef GEEPS_EXAMPLES_TORCH_DOC_TRAINER_H_
#define GEEPS_EXAMPLES_TORCH_DOC_TRAINER_H_

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "geeps/geeps_all.h"
#include "geeps_torch.h"

namespace torch_doc {

// BEGIN plain
template <typename Net, typename Data>
void Train(Net& net, const Data& data, int64_t steps) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int64_t i = 0; i < steps; ++i) {
    auto [x, y] = data.Batch(i);
    opt.zero_grad();
    torch::Tensor loss = torch::nll_loss(net->forward(x), y);
    loss.backward();
    opt.step();
  }
}
// END plain

// BEGIN geeps
template <typename Net, typename Data>
geeps::Status Train(std::vector<Net>& nets, const Data& data, int64_t steps) {
  geeps::Config config;
  config.tables = geeps_torch::TablesFor(*nets[0]);
  config.num_workers = static_cast<int>(nets.size());
  GEEPS_ASSIGN_OR_RETURN(auto cluster, geeps::EmbeddedCluster::Start(config));
  return cluster->RunWorkers([&](geeps::GeePS& ps) -> geeps::Status {
    Net& net = nets[ps.rank()];
    GEEPS_ASSIGN_OR_RETURN(auto opt, geeps_torch::Trainer::Create(ps, *net, {0.05, 0.9}));
    return opt->Run(steps, [&](int64_t i) {
      auto [x, y] = data.Batch(i * ps.num_workers() + ps.rank());
      torch::Tensor loss = torch::nll_loss(net->forward(x), y);
      return loss;
    });
  });
}
// END geeps

}  // namespace torch_doc

#endif  // GEEPS_EXAMPLES_TORCH_DOC_TRAINER_H_
