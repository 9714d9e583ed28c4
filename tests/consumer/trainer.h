// The trainer of docs/api.md ("A minimal trainer"), as written there, with a
// toy model around it: every weight starts at 0.5 and follows SGD with
// momentum towards the batch's value. Used by the install test (main.cc, against the installed
// package) and by tests/step_test.cc, which also checks that docs/api.md
// shows exactly the code between the markers.
#ifndef GEEPS_TESTS_CONSUMER_TRAINER_H_
#define GEEPS_TESTS_CONSUMER_TRAINER_H_

#include <geeps/geeps_all.h>

#include <cstdint>
#include <vector>

namespace trainer {

constexpr float kLearningRate = 0.1f;
constexpr float kMomentum = 0.5f;

inline float NextBatch(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 3); }
// v = momentum * v + (w - batch); delta = -lr * v.
inline void ComputeDelta(const float* w, float batch, float* v, float* delta) {
  for (int k = 0; k < 785 * 10; ++k) {
    v[k] = kMomentum * v[k] + (w[k] - batch);
    delta[k] = -kLearningRate * v[k];
  }
}

// The lines between the markers appear verbatim in docs/api.md (30 at most):
// clang-format leaves them as they are.
// clang-format off
// ---8<--- docs/api.md, "A minimal trainer"
geeps::Status Train(geeps::GeePS& ps, const geeps::Config& config, int iterations) {
  const auto rows = geeps::RowRange(0, 785);  // tables 0 (weights, shared) and 1
  std::vector<float> w(785 * 10, 0.5f), v(785 * 10), delta(785 * 10);  // (momentum, local)
  auto prologue = [&](geeps::Step& s) -> geeps::Status {  // momentum 0; worker 0: weights
    GEEPS_ASSIGN_OR_RETURN(geeps::MutableRows m, s.LocalAccess(1, rows, /*fetch=*/false));
    GEEPS_ASSIGN_OR_RETURN(geeps::MutableRows w0, s.PreUpdate(0, rows));  // zeroed
    GEEPS_RETURN_IF_ERROR(s.Compute([&] { return ps.CopyFromHost(m.data, v.data(), v.size()); }));
    if (s.rank() == 0)
      GEEPS_RETURN_IF_ERROR(s.Compute([&] { return ps.CopyFromHost(w0.data, w.data(), w.size()); }));
    GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(m));
    return s.Update(w0);
  };
  auto iteration = [&](geeps::Step& s) -> geeps::Status {
    GEEPS_ASSIGN_OR_RETURN(geeps::ConstRows cur, s.Read(0, rows));
    GEEPS_RETURN_IF_ERROR(s.Compute([&] { return ps.CopyToHost(w.data(), cur.data, w.size()); }));
    GEEPS_RETURN_IF_ERROR(s.PostRead(cur));
    GEEPS_ASSIGN_OR_RETURN(geeps::MutableRows m, s.LocalAccess(1, rows));
    GEEPS_ASSIGN_OR_RETURN(geeps::MutableRows d, s.PreUpdate(0, rows));
    GEEPS_RETURN_IF_ERROR(s.Compute([&]() -> geeps::Status {
      GEEPS_RETURN_IF_ERROR(ps.CopyToHost(v.data(), m.data, v.size()));
      ComputeDelta(w.data(), NextBatch(s.rank(), s.iteration()), v.data(), delta.data());
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(m.data, v.data(), v.size()));
      return ps.CopyFromHost(d.data, delta.data(), delta.size());
    }));
    GEEPS_RETURN_IF_ERROR(s.PostLocalAccess(m));
    GEEPS_RETURN_IF_ERROR(s.Update(d));
    return s.Clock();
  };
  return geeps::Step(ps, config).Run(prologue, iteration, iterations);
}
// --->8---
// clang-format on

// The config Train expects: its two tables.
inline geeps::Config TrainerConfig(int workers) {
  geeps::Config config;
  config.tables = {{"weights", 785, 10}, {"momentum", 785, 10, /*local=*/true}};
  config.num_workers = workers;
  return config;
}

// Every weight after `iterations` BSP iterations of `workers` workers:
// each reads the same w and keeps its own momentum.
inline double ExpectedWeight(int workers, int iterations) {
  double w = 0.5;
  std::vector<double> v(workers, 0.0);
  for (int i = 0; i < iterations; ++i) {
    double sum = 0;
    for (int r = 0; r < workers; ++r) {
      v[r] = kMomentum * v[r] + (w - NextBatch(r, i));
      sum += -kLearningRate * v[r];
    }
    w += sum;
  }
  return w;
}

}  // namespace trainer

#endif  // GEEPS_TESTS_CONSUMER_TRAINER_H_
