// A server partition's checkpoints (docs/architecture.md, "Checkpoints"):
// the clocks to save, the checkpoints being assembled table by table, and
// the writer thread that writes complete ones to files (format and atomic
// write: server/checkpoint.h); and reading one back for a restart.
//
// Threads: the partition's thread calls Request and AddTable (it owns the
// requested clocks and the checkpoints being assembled, no lock); the writer
// thread owns the files; the queue between them is under a mutex.
#ifndef GEEPS_SERVER_CHECKPOINT_WRITER_H_
#define GEEPS_SERVER_CHECKPOINT_WRITER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/partition.h"
#include "geeps/config.h"
#include "geeps/status.h"
#include "server/checkpoint.h"

namespace geeps::server {

// A table as a partition holds it: what its entry in a checkpoint must be.
struct CheckpointShape {
  std::string name;  // TableSpec::name, for messages
  // Shared with rows in this partition; else it has no entry.
  bool saved = false;
  uint32_t width = 0;
  common::RowSpan span;
};

class CheckpointWriter {
 public:
  // The checkpoints of `partition` (of `num_partitions`) of a job of
  // `fingerprint` (transport::JobFingerprint, kCheckpoint), into `dir` (empty: off; Request and
  // AddTable do nothing), every `every` clocks (0: only on request), each
  // complete with the rows of `num_tables` tables.
  CheckpointWriter(std::string dir, int64_t every, uint64_t fingerprint, int partition,
                   int num_partitions, int num_tables);
  ~CheckpointWriter();  // Stop()
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Before Start()/Read(), in a job with CURVE keys: files are written with
  // a MAC by `key`, and only files with a valid one are read.
  void SetKey(const CheckpointKey& key) { key_ = key; }

  // Starts the writer thread (when `dir` is set).
  void Start();
  // Lets the writer finish the checkpoints handed to it (complete ones
  // only: one partly assembled is dropped), then joins it. Idempotent.
  void Stop();

  // A worker asked for a checkpoint at `clock`.
  void Request(int64_t clock);
  // Table `table`'s minimum clock became `clock`, and `rows` (its rows in
  // the partition: span.size() * width) hold exactly the updates of clocks
  // < clock. At a checkpoint clock (a multiple of `every`, or requested)
  // they are copied into the checkpoint of that clock; the last table to
  // arrive hands the whole to the writer thread, waiting while two are
  // already queued (a disk slower than the training).
  void AddTable(TableId table, uint32_t width, common::RowSpan span, const std::vector<float>& rows,
                int64_t clock);

  // Reads this partition's checkpoint of `clock` and verifies the whole
  // file, then each entry against `tables` (by TableId): every saved table
  // exactly once with its width and rows, no other. A missing, truncated,
  // corrupt or foreign file is an error naming it (kNotFound, kDataLoss,
  // kFailedPrecondition).
  StatusOr<CheckpointData> Read(int64_t clock, const std::vector<CheckpointShape>& tables) const;

  // Checkpoint files written so far, and the clock of the newest (0: none;
  // or the clock restored, NoteRestored).
  int64_t written() const { return written_.load(); }
  int64_t last_clock() const { return last_clock_.load(); }
  void NoteRestored(int64_t clock) { last_clock_.store(clock); }

 private:
  void Run();
  const CheckpointKey* key() const { return key_ ? &*key_ : nullptr; }

  const std::string dir_;
  const int64_t every_;
  const uint64_t fingerprint_;
  const int partition_;
  const int num_partitions_;
  const int num_tables_;
  std::optional<CheckpointKey> key_;  // set before the threads start
  // The partition thread's: the clocks workers asked for, the checkpoints
  // being assembled.
  std::set<int64_t> requested_;
  std::map<int64_t, CheckpointData> assembling_;
  // Handed to the writer thread.
  std::thread thread_;
  common::Mutex mu_;
  std::condition_variable cv_;
  std::deque<CheckpointData> to_write_ GEEPS_GUARDED_BY(mu_);
  bool stop_ GEEPS_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> written_{0}, last_clock_{0};
};

}  // namespace geeps::server

#endif  // GEEPS_SERVER_CHECKPOINT_WRITER_H_
