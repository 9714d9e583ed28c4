#include "big_net.h"

#include <cstdint>

#include "net_layout.h"

namespace fmnist {
namespace {

using geeps::Status;
using geeps::StatusCode;

constexpr uint64_t kFloat = sizeof(float);

uint64_t RowBytes(const std::vector<geeps::RowIndex>& rows, uint32_t width) {
  return rows.size() * width * kFloat;
}

Status RunOnce(const BigNetOptions& o, const Dataset& train, const Dataset& test, uint64_t budget,
               BigNetRun* run) {
  NetOptions n;
  n.model = o.model;
  n.workers = o.workers;
  n.epochs = 1;
  n.batch_size = o.batch_size;
  n.learning_rate = o.learning_rate;
  n.momentum = o.momentum;
  n.seed = o.seed;
  n.device_memory_budget = budget;
  n.device = o.device;
  n.emulated_copy_bandwidth = static_cast<uint64_t>(o.copy_gbs * 1e9);
  n.reread_params = true;      // the small peak that lets a budget of 1/4 work
  n.deterministic_bsp = true;  // bitwise comparable with several workers
  n.log = o.log;
  run->budget = budget;
  GEEPS_RETURN_IF_ERROR(TrainNet(n, train, test, &run->report));
  const NetReport& r = run->report;
  if (r.epochs.empty()) return Status(StatusCode::kInternal, "no epoch reported");
  run->seconds = r.epochs.back().seconds;
  run->samples_per_second = r.epochs.back().samples_per_second;
  run->stall_seconds = r.worker0_stats.memory_stall_seconds;
  run->bytes_host_to_device = r.worker0_stats.bytes_host_to_device;
  run->bytes_device_to_host = r.worker0_stats.bytes_device_to_host;
  run->pool_bytes = r.worker0_stats.pool_bytes;
  run->pool_high_water = r.worker0_stats.pool_high_water;
  run->loss_before = r.initial_test.loss;
  run->loss_after = r.epochs.back().test.loss;
  return Status::OK();
}

}  // namespace

Status RunBigNet(const BigNetOptions& o, BigNetResult* result) {
  *result = BigNetResult();
  if (o.iterations < 1 || o.batch_size < 1 || o.workers < 1 || o.batch_size % o.workers != 0 ||
      !(o.oversubscription >= 1) || o.copy_gbs < 0 || o.test_size < 1) {
    return Status(StatusCode::kInvalidArgument,
                  "big net: iterations, batch size, workers and test size must "
                  "be >= 1, the batch a multiple of the workers, the "
                  "oversubscription >= 1 and the bandwidth >= 0");
  }
  GEEPS_ASSIGN_OR_RETURN(nn::Network net, BuildModel(o.model));
  result->model = net.Describe();
  result->num_params = net.num_params();
  const Layout lay = MakeLayout(net, o.batch_size / o.workers);
  result->param_bytes = lay.param_rows * kParamRowWidth * kFloat;
  result->local_bytes = lay.local_rows * kLocalRowWidth * kFloat;
  for (int i = 0; i < net.size(); ++i) {
    result->optimizer_bytes +=
        RowBytes(lay.wgrad[i], kLocalRowWidth) + RowBytes(lay.velocity[i], kLocalRowWidth);
  }
  result->scratch_bytes = RowBytes(lay.scratch, kLocalRowWidth);
  result->activation_bytes = result->local_bytes - result->optimizer_bytes - result->scratch_bytes;

  Dataset train, test;
  MakeSyntheticData(static_cast<int64_t>(o.iterations) * o.batch_size, o.test_size, o.seed, &train,
                    &test);
  const auto budget = static_cast<uint64_t>(
      static_cast<double>(result->param_bytes + result->local_bytes) / o.oversubscription);
  if (o.log != nullptr) *o.log << "run with a device budget of " << budget << " bytes\n";
  GEEPS_RETURN_IF_ERROR(RunOnce(o, train, test, budget, &result->budgeted));
  if (o.log != nullptr) *o.log << "run without a budget\n";
  GEEPS_RETURN_IF_ERROR(RunOnce(o, train, test, 0, &result->unbudgeted));
  result->weights_identical =
      !result->budgeted.report.final_params.empty() &&
      result->budgeted.report.final_params == result->unbudgeted.report.final_params;
  return Status::OK();
}

}  // namespace fmnist
