#include "trainer_base.h"

#include <cmath>
#include <cstdio>
#include <memory>

#include "annotate.h"
#include "geeps/embedded_cluster.h"

namespace fmnist {

using geeps::Status;
using geeps::StatusCode;

Status ValidateTrainerOptions(const TrainerOptions& o) {
  auto bad = [](const std::string& what) { return Status(StatusCode::kInvalidArgument, what); };
  if (o.workers < 1) return bad("workers must be >= 1");
  if (o.shards < 1) return bad("shards must be >= 1");
  if (o.channels < 1) return bad("channels must be >= 1");
  if (o.epochs < 0) return bad("epochs must be >= 0");
  if (o.batch_size < 1) return bad("batch size must be >= 1");
  if (!std::isfinite(o.learning_rate) || o.learning_rate <= 0) {
    return bad("learning rate must be a positive number");
  }
  if (!std::isfinite(o.lr_decay) || o.lr_decay <= 0 || o.lr_decay > 1) {
    return bad("learning rate decay must be in (0, 1]");
  }
  if (o.lr_schedule == LrSchedule::kCosine && o.lr_decay != 1.0f) {
    return bad(
        "the learning rate decay applies to the step schedule only (the cosine schedule "
        "decays to 0 by itself)");
  }
  if (!std::isfinite(o.momentum) || o.momentum < 0 || o.momentum >= 1) {
    return bad("momentum must be in [0, 1)");
  }
  if (o.slack < 0) return bad("slack must be >= 0");
  if (o.timeout.count() <= 0) return bad("timeout must be positive");
  return Status::OK();
}

float LearningRate(const TrainerOptions& o, int epoch, int64_t t, int64_t steps) {
  if (o.lr_schedule == LrSchedule::kStep) {
    return o.learning_rate * std::pow(o.lr_decay, static_cast<float>(epoch));
  }
  const double total = static_cast<double>(std::max(o.epochs, 1)) * static_cast<double>(steps);
  const double done =
      static_cast<double>(epoch) * static_cast<double>(steps) + static_cast<double>(t);
  const double frac = total > 0 ? std::min(done / total, 1.0) : 0.0;
  constexpr double kPi = 3.14159265358979323846;
  return static_cast<float>(o.learning_rate * 0.5 * (1.0 + std::cos(kPi * frac)));
}

bool ParseLrSchedule(const std::string& name, LrSchedule* schedule) {
  if (name == "step") {
    *schedule = LrSchedule::kStep;
  } else if (name == "cosine") {
    *schedule = LrSchedule::kCosine;
  } else {
    return false;
  }
  return true;
}

std::string DescribeLrSchedule(const TrainerOptions& o) {
  if (o.lr_schedule == LrSchedule::kCosine) return "cosine to 0";
  char text[64];
  std::snprintf(text, sizeof(text), "decay %g per epoch", static_cast<double>(o.lr_decay));
  return text;
}

EpochBoard::EpochBoard(int workers, int epochs)
    : workers_(workers), loss_sum_(epochs), samples_(epochs), reported_(epochs) {}

void EpochBoard::Report(int epoch, double loss_sum, int64_t samples) {
  std::lock_guard<std::mutex> lock(mu_);
  loss_sum_[epoch] += loss_sum;
  samples_[epoch] += samples;
  ++reported_[epoch];
  cv_.notify_all();
}

void EpochBoard::Abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

Status EpochBoard::Wait(int epoch, std::chrono::milliseconds timeout, double* loss_sum,
                        int64_t* samples) {
  std::unique_lock<std::mutex> lock(mu_);
  bool done = cv_.wait_for(lock, timeout, [&] { return aborted_ || reported_[epoch] == workers_; });
  if (aborted_) return Status(StatusCode::kCancelled, "another worker failed");
  if (!done) {
    return Status(
        StatusCode::kDeadlineExceeded,
        "waited too long for the other workers to finish epoch " + std::to_string(epoch + 1));
  }
  *loss_sum = loss_sum_[epoch];
  *samples = samples_[epoch];
  return Status::OK();
}

Status EpochMeanLoss(EpochBoard* board, int epoch, std::chrono::milliseconds timeout,
                     double loss_sum, int64_t samples, double* mean, bool* all_workers) {
  *all_workers = board != nullptr;
  if (board != nullptr) GEEPS_RETURN_IF_ERROR(board->Wait(epoch, timeout, &loss_sum, &samples));
  *mean = loss_sum / static_cast<double>(std::max<int64_t>(samples, 1));
  return Status::OK();
}

Status RunOnEmbeddedCluster(const geeps::Config& config, int epochs,
                            const std::function<Status(geeps::GeePS& ps, EpochBoard* board)>& train,
                            geeps::WorkerStats* worker0_stats) {
  GEEPS_ASSIGN_OR_RETURN(std::unique_ptr<geeps::EmbeddedCluster> cluster,
                         Context(geeps::EmbeddedCluster::Start(config), "EmbeddedCluster::Start"));
  EpochBoard board(config.num_workers, epochs);
  Status run = cluster->RunWorkers([&](geeps::GeePS& ps) {
    Status s = train(ps, &board);
    if (!s.ok()) board.Abort();
    return s;
  });
  *worker0_stats = cluster->worker(0)->GetStats();
  Status shutdown = cluster->Shutdown();
  if (!run.ok()) return run;
  return Context(shutdown, "EmbeddedCluster::Shutdown");
}

}  // namespace fmnist
