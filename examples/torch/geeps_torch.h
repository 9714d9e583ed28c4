// geeps_torch: a libtorch module's parameters in libgeeps tables.
//
// A small adapter, header-only so that libgeeps itself never depends on
// libtorch. Each named parameter of a torch::nn::Module gets a shared table
// of its own (as GeePS gave each layer a table): rows of at most
// `max_width` floats, RowsFor(numel, width) of them, in named_parameters()
// order. A Trainer then runs one worker's iterations through geeps::Step:
//
//   prologue   worker 0 writes its module's initial parameters (every
//              worker's module is then replaced by the tables' values);
//   iteration  Read every table and copy its rows into the parameter's own
//              storage (never a view of the read buffer, which is
//              read-only); the caller's loss function; backward; PostRead;
//              then per table PreUpdate, the delta -lr * v written into the
//              (zeroed) update buffer (v = momentum * v + grad /
//              num_workers, a worker-local velocity), plus the worker's
//              in-place edit (below), Update; Clock.
//
// Summed over the workers, the deltas are one SGD step (with momentum) on
// the mean of the workers' gradients: with equal batches, N workers of b
// examples step as one worker of N * b would (up to the order of float
// sums). Buffers (batch norm's running statistics) are not parameters: each
// worker keeps its own, and evaluation uses the evaluating worker's.
//
// In-place edits: a loss function may change a parameter in place (under
// torch::NoGradGuard: w.mul_(0), w.clamp_(-c, c), a renormalisation), as
// plain libtorch code does. The edit (the parameter after the loss
// function and backward, minus the rows read) divided by num_workers joins
// that worker's delta: when every worker makes the same edit, the tables
// change by exactly that edit plus the SGD step, as one libtorch process
// would; an edit of one worker alone counts for 1/num_workers of it. An
// edit never reaches the other workers in any other way.
//
// Errors: a table layout that does not match the module (Trainer::Create),
// and anything libtorch throws in the loss function or backward, become a
// geeps::Status naming the parameter or the exception's text; nothing
// throws through the worker.
//
// Threading: one Trainer per worker, on that worker's application thread.
#ifndef GEEPS_EXAMPLES_TORCH_GEEPS_TORCH_H_
#define GEEPS_EXAMPLES_TORCH_GEEPS_TORCH_H_

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "geeps/geeps_all.h"

namespace geeps_torch {

// The tables of `module`'s parameters, in named_parameters() order, to put
// in Config::tables (at position `first_table` onwards: the Trainer's
// first_table). Row width: the parameter's size up to `max_width`.
inline std::vector<geeps::TableSpec> TablesFor(const torch::nn::Module& module,
                                               uint32_t max_width = 4096) {
  std::vector<geeps::TableSpec> specs;
  for (const auto& p : module.named_parameters()) {
    const auto numel = static_cast<uint64_t>(p.value().numel());
    const auto width =
        static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(numel, max_width)));
    specs.push_back({p.key(), geeps::RowsFor(numel, width), width});
  }
  return specs;
}

// SGD with momentum, applied on each worker to its share of the gradient
// (grad / num_workers): linear, so the workers' deltas add up to one step
// on the mean gradient.
struct Sgd {
  double lr = 0.01;
  double momentum = 0.0;
  // If set, the learning rate of each iteration (in place of lr).
  std::function<double(int64_t iteration)> lr_at;
};

class Trainer {
 public:
  // The loss of iteration `i` (forward pass on this worker's batch); the
  // Trainer calls backward() on it. Called only in real iterations.
  using LossFn = std::function<torch::Tensor(int64_t iteration)>;

  // Checks that tables first_table.. of the worker's config are the
  // module's parameters (names, sizes), in order: kInvalidArgument naming
  // the first that is not.
  static geeps::StatusOr<std::unique_ptr<Trainer>> Create(geeps::GeePS& ps,
                                                          torch::nn::Module& module, Sgd sgd,
                                                          geeps::TableId first_table = 0) {
    const auto& tables = ps.config().tables;
    std::vector<Param> params;
    geeps::TableId t = first_table;
    for (auto& p : module.named_parameters()) {
      const std::string where = "geeps_torch: parameter '" + p.key() + "'";
      if (t >= tables.size())
        return geeps::InvalidArgumentError(where + " has no table (too few tables)");
      const geeps::TableSpec& spec = tables[t];
      const auto numel = static_cast<uint64_t>(p.value().numel());
      if (spec.name != p.key() || spec.local || spec.num_rows * spec.row_width < numel ||
          (spec.num_rows - 1) * spec.row_width >= numel)
        return geeps::InvalidArgumentError(where + " does not match table " + std::to_string(t) +
                                           " ('" + spec.name + "'): use TablesFor(module)");
      if (p.value().scalar_type() != torch::kFloat32 || !p.value().device().is_cpu())
        return geeps::InvalidArgumentError(where + " is not a float tensor on the CPU");
      Param param;
      param.tensor = p.value();
      param.table = t;
      param.rows = spec.num_rows;
      param.width = spec.row_width;
      params.push_back(std::move(param));
      ++t;
    }
    if (params.empty())
      return geeps::InvalidArgumentError("geeps_torch: the module has no parameters");
    return std::unique_ptr<Trainer>(new Trainer(ps, std::move(params), sgd));
  }

  // Runs the prologue and `iterations` iterations (one Clock each), then
  // LoadParameters: the module then holds the trained values.
  geeps::Status Run(int64_t iterations, const LossFn& loss_fn) {
    geeps::Step step(ps_);
    auto prologue = [&](geeps::Step& s) { return WriteInitialValues(s); };
    auto iteration = [&](geeps::Step& s) { return Iterate(s, loss_fn); };
    geeps::Status st = step.Run(prologue, iteration, iterations);
    for (Param& p : params_) p.tensor.set_data(p.owned);  // its own storage, as in every iteration
    GEEPS_RETURN_IF_ERROR(st);
    return LoadParameters();
  }

  // Waits for every worker's updates up to this worker's clock
  // (GeePS::Sync) and copies the tables' values into the module's
  // parameters. Between runs only (Run ends with it).
  geeps::Status LoadParameters() {
    GEEPS_RETURN_IF_ERROR(ps_.Sync());
    for (Param& p : params_) {
      torch::Tensor rows = torch::empty({static_cast<int64_t>(p.rows * p.width)});
      GEEPS_RETURN_IF_ERROR(
          ps_.CopyRows(p.table, geeps::RowRange(0, p.rows), rows.data_ptr<float>()));
      torch::NoGradGuard no_grad;
      p.owned.copy_(rows.narrow(0, 0, p.owned.numel()).view(p.owned.sizes()));
      p.tensor.set_data(p.owned);
    }
    return geeps::Status::OK();
  }

 private:
  struct Param {
    torch::Tensor tensor;  // the module's parameter
    geeps::TableId table = 0;
    size_t rows = 0;
    uint32_t width = 0;
    torch::Tensor owned;     // the parameter's own storage (the rows read, then edits)
    torch::Tensor before;    // the rows read this iteration, to find in-place edits
    torch::Tensor edit;      // this iteration's in-place edit / num_workers, or undefined
    torch::Tensor velocity;  // momentum, this worker's
    torch::Tensor scratch;   // the delta on the host when the buffer is not
    geeps::ConstRows read;
  };

  Trainer(geeps::GeePS& ps, std::vector<Param> params, Sgd sgd)
      : ps_(ps), params_(std::move(params)), sgd_(sgd) {
    for (Param& p : params_) {
      p.owned = p.tensor.detach().clone().contiguous();
      p.tensor.set_data(p.owned);
      p.before = torch::empty_like(p.owned);
      p.velocity = torch::zeros_like(p.owned);
      p.scratch = torch::zeros({static_cast<int64_t>(p.rows * p.width)});
    }
  }

  static geeps::Status Guarded(const std::function<void()>& fn, const char* what) {
    try {
      fn();
    } catch (const std::exception& e) {
      return geeps::InternalError(std::string("geeps_torch: ") + what + ": " + e.what());
    }
    return geeps::Status::OK();
  }

  geeps::Status WriteInitialValues(geeps::Step& s) {
    for (Param& p : params_) {
      GEEPS_ASSIGN_OR_RETURN(geeps::MutableRows d,
                             s.PreUpdate(p.table, geeps::RowRange(0, p.rows)));
      if (s.rank() == 0)
        GEEPS_RETURN_IF_ERROR(s.Compute(
            [&] { return ps_.CopyFromHost(d.data, p.owned.data_ptr<float>(), p.owned.numel()); }));
      GEEPS_RETURN_IF_ERROR(s.Update(d));
    }
    return geeps::Status::OK();
  }

  // The parameter's own storage (its data: see the constructor and Run)
  // becomes the read rows; `before` keeps them.
  geeps::Status Bind(Param& p) {
    GEEPS_RETURN_IF_ERROR(
        ps_.CopyToHost(p.before.data_ptr<float>(), p.read.data, p.before.numel()));
    return Guarded(
        [&] {
          torch::NoGradGuard no_grad;
          p.owned.copy_(p.before);
        },
        "binding a parameter");
  }

  // What the loss function changed in place, over num_workers (undefined
  // where it changed nothing: the delta then stays bitwise the SGD step).
  geeps::Status FindEdit(Param& p) {
    return Guarded(
        [&] {
          torch::NoGradGuard no_grad;
          p.edit = torch::equal(p.owned, p.before)
                       ? torch::Tensor()
                       : (p.owned - p.before).div_(static_cast<double>(ps_.num_workers()));
        },
        "comparing a parameter with the rows read");
  }

  // -lr * v into the zeroed update buffer (in place, or through scratch,
  // whose tail past the parameter stays zero).
  geeps::Status WriteDelta(Param& p, float* buffer, int64_t iteration) {
    const double lr = sgd_.lr_at ? sgd_.lr_at(iteration) : sgd_.lr;
    float* host = ps_.HostAddress(buffer);
    torch::Tensor all =
        host != nullptr ? torch::from_blob(host, {p.scratch.numel()}, torch::kFloat32) : p.scratch;
    GEEPS_RETURN_IF_ERROR(Guarded(
        [&] {
          torch::NoGradGuard no_grad;
          torch::Tensor grad = p.tensor.grad();
          if (!grad.defined()) grad = torch::zeros_like(p.owned);
          p.velocity.mul_(sgd_.momentum).add_(grad, 1.0 / ps_.num_workers());
          torch::Tensor body = all.narrow(0, 0, p.owned.numel()).view(p.owned.sizes());
          torch::mul_out(body, p.velocity, -lr);
          if (p.edit.defined()) body.add_(p.edit);
        },
        "computing a delta"));
    if (host == nullptr)
      return ps_.CopyFromHost(buffer, p.scratch.data_ptr<float>(), p.scratch.numel());
    return geeps::Status::OK();
  }

  geeps::Status Iterate(geeps::Step& s, const LossFn& loss_fn) {
    for (Param& p : params_) {
      GEEPS_ASSIGN_OR_RETURN(p.read, s.Read(p.table, geeps::RowRange(0, p.rows)));
      GEEPS_RETURN_IF_ERROR(s.Compute([&] { return Bind(p); }));
    }
    GEEPS_RETURN_IF_ERROR(s.Compute([&] {
      return Guarded(
          [&] {
            for (Param& p : params_)
              if (p.tensor.grad().defined()) p.tensor.mutable_grad().zero_();
            loss_fn(s.iteration()).backward();
          },
          "the loss function or backward");
    }));
    for (Param& p : params_) {
      GEEPS_RETURN_IF_ERROR(s.Compute([&] { return FindEdit(p); }));
      GEEPS_RETURN_IF_ERROR(s.PostRead(p.read));
    }
    for (Param& p : params_) {
      GEEPS_ASSIGN_OR_RETURN(geeps::MutableRows d,
                             s.PreUpdate(p.table, geeps::RowRange(0, p.rows)));
      GEEPS_RETURN_IF_ERROR(s.Compute([&] { return WriteDelta(p, d.data, s.iteration()); }));
      GEEPS_RETURN_IF_ERROR(s.Update(d));
    }
    return s.Clock();
  }

  geeps::GeePS& ps_;
  std::vector<Param> params_;
  Sgd sgd_;
};

}  // namespace geeps_torch

#endif  // GEEPS_EXAMPLES_TORCH_GEEPS_TORCH_H_
