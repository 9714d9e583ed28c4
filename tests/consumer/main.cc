// Uses an installed libgeeps through its public headers only, as a user
// would: the trainer of docs/api.md (trainer.h) on an embedded cluster of 2
// workers, checked against the values it must reach. Exits 0 on success.
#include <geeps/geeps_all.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <vector>

#include "trainer.h"

int main() {
  const geeps::Config config = trainer::TrainerConfig(2);
  geeps::Status status = geeps::ValidateConfig(config);
  std::cout << "ValidateConfig: " << status << "\n";
  if (!status.ok()) return 1;
  auto cluster = geeps::EmbeddedCluster::Start(config);
  std::cout << "EmbeddedCluster::Start: " << cluster.status() << "\n";
  if (!cluster.ok()) return 1;
  constexpr int kIterations = 40;
  status = (*cluster)->RunWorkers(
      [&](geeps::GeePS& ps) { return trainer::Train(ps, (*cluster)->config(), kIterations); });
  std::cout << "Train: " << status << "\n";
  if (!status.ok()) return 1;
  geeps::GeePS& ps = *(*cluster)->worker(1);
  std::vector<float> w(2 * 10);
  status = ps.Sync();
  if (status.ok()) status = ps.CopyRows(0, {0, 784}, w.data());
  std::cout << "Sync, CopyRows: " << status << "\n";
  if (!status.ok()) return 1;
  const double expect = trainer::ExpectedWeight(2, kIterations);
  for (float x : w) {
    if (std::fabs(x - expect) > 1e-3) {
      std::cout << "weight " << x << ", expected " << expect << "\n";
      return 1;
    }
  }
  std::cout << "weights " << w[0] << " as expected after " << kIterations << " iterations\n";
  status = (*cluster)->Shutdown();
  std::cout << "EmbeddedCluster::Shutdown: " << status << "\n";
  return status.ok() ? 0 : 1;
}
