// Uses an installed libgeeps through its public headers only: validates a
// config, starts an embedded cluster and shuts it down. Exits 0 on success.
#include <geeps/geeps_all.h>

#include <iostream>
#include <memory>

int main() {
  geeps::Config config;
  geeps::TableSpec table;
  table.name = "weights";
  table.num_rows = 4;
  table.row_width = 8;
  config.tables.push_back(table);
  config.num_workers = 1;
  config.num_shards = 1;

  geeps::Status status = geeps::ValidateConfig(config);
  std::cout << "ValidateConfig: " << status << "\n";
  if (!status.ok()) return 1;

  geeps::StatusOr<std::unique_ptr<geeps::EmbeddedCluster>> cluster =
      geeps::EmbeddedCluster::Start(config);
  std::cout << "EmbeddedCluster::Start: " << cluster.status() << "\n";
  if (!cluster.ok()) return 1;
  status = (*cluster)->Shutdown();
  std::cout << "EmbeddedCluster::Shutdown: " << status << "\n";
  return status.ok() ? 0 : 1;
}
