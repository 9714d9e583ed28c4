#include "server/checkpoint_writer.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "common/mutex.h"

namespace geeps::server {

CheckpointWriter::CheckpointWriter(std::string dir, int64_t every, uint64_t fingerprint,
                                   int partition, int num_partitions, int num_tables)
    : dir_(std::move(dir)),
      every_(every),
      fingerprint_(fingerprint),
      partition_(partition),
      num_partitions_(num_partitions),
      num_tables_(num_tables) {}

CheckpointWriter::~CheckpointWriter() { Stop(); }

void CheckpointWriter::Start() {
  if (dir_.empty() || thread_.joinable()) return;
  {
    common::MutexLock lock(&mu_);  // no writer thread yet: for the analysis
    stop_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void CheckpointWriter::Stop() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::Run() {
  common::MutexLock lock(&mu_);
  for (;;) {
    lock.Wait(cv_, [&]() GEEPS_REQUIRES(mu_) { return stop_ || !to_write_.empty(); });
    if (to_write_.empty()) return;  // stopping, nothing left
    CheckpointData d = std::move(to_write_.front());
    to_write_.pop_front();
    lock.Unlock();
    cv_.notify_all();  // room in the queue
    const Status st = WriteCheckpointFile(dir_, d, /*keep=*/2, key());
    if (st.ok()) {
      written_.fetch_add(1);
      last_clock_.store(d.clock);
    } else {
      GEEPS_LOG(Error) << "shard partition " << partition_ << ": checkpoint of clock " << d.clock
                       << " not written: " << st.message();
    }
    lock.Lock();
  }
}

void CheckpointWriter::Request(int64_t clock) {
  if (!dir_.empty()) requested_.insert(clock);
}

void CheckpointWriter::AddTable(TableId table, uint32_t width, common::RowSpan span,
                                const std::vector<float>& rows, int64_t clock) {
  if (dir_.empty() || span.size() == 0) return;
  const bool periodic = every_ > 0 && clock % every_ == 0;
  if (!periodic && requested_.count(clock) == 0) return;
  CheckpointData& d = assembling_[clock];
  CheckpointTable e;
  e.table = table;
  e.width = width;
  e.first_row = span.begin;
  e.row_count = span.size();
  e.data = rows;  // the rows hold exactly the updates of clocks < clock
  d.tables.push_back(std::move(e));
  if (static_cast<int>(d.tables.size()) < num_tables_) return;
  d.fingerprint = fingerprint_;
  d.partition = static_cast<uint32_t>(partition_);
  d.num_partitions = static_cast<uint32_t>(num_partitions_);
  d.clock = clock;
  std::sort(d.tables.begin(), d.tables.end(),
            [](const CheckpointTable& a, const CheckpointTable& b) { return a.table < b.table; });
  {
    // At most two checkpoints wait for the writer; beyond that this
    // partition waits (a disk slower than the training).
    common::MutexLock lock(&mu_);
    lock.Wait(cv_, [&]() GEEPS_REQUIRES(mu_) { return to_write_.size() < 2 || stop_; });
    to_write_.push_back(std::move(d));
  }
  cv_.notify_all();
  assembling_.erase(clock);
  requested_.erase(requested_.begin(), requested_.upper_bound(clock));
}

StatusOr<CheckpointData> CheckpointWriter::Read(int64_t clock,
                                                const std::vector<CheckpointShape>& tables) const {
  std::vector<std::pair<uint64_t, uint32_t>> shape;
  for (const CheckpointShape& t : tables)
    if (t.saved) shape.emplace_back(t.span.size(), t.width);
  GEEPS_ASSIGN_OR_RETURN(CheckpointData d,
                         ReadCheckpointFile(dir_, fingerprint_, partition_, clock,
                                            CheckpointFileBytes(shape, key() != nullptr), key()));
  const std::string what = CheckpointPath(dir_, partition_, clock);
  // Check every entry against this partition's tables.
  std::vector<bool> seen(tables.size(), false);
  for (const CheckpointTable& e : d.tables) {
    if (e.table >= tables.size() || !tables[e.table].saved)
      return DataLossError("checkpoint " + what + ": entry for table " + std::to_string(e.table) +
                           ", which has no rows in partition " + std::to_string(partition_));
    if (seen[e.table])
      return DataLossError("checkpoint " + what + ": table " + std::to_string(e.table) +
                           " appears twice");
    const CheckpointShape& t = tables[e.table];
    if (e.width != t.width || e.first_row != t.span.begin || e.row_count != t.span.size())
      return DataLossError("checkpoint " + what + ": table " + std::to_string(e.table) +
                           " holds rows [" + std::to_string(e.first_row) + ", " +
                           std::to_string(e.first_row + e.row_count) + ") of width " +
                           std::to_string(e.width) + ", the partition owns [" +
                           std::to_string(t.span.begin) + ", " + std::to_string(t.span.end) +
                           ") of width " + std::to_string(t.width));
    seen[e.table] = true;
  }
  for (size_t i = 0; i < tables.size(); ++i) {
    if (tables[i].saved && !seen[i])
      return DataLossError("checkpoint " + what + ": table " + std::to_string(i) + " ('" +
                           tables[i].name + "') is missing");
  }
  return d;
}

}  // namespace geeps::server
