// Counters and timings of a worker and of the server shards.
#ifndef GEEPS_STATS_H_
#define GEEPS_STATS_H_

#include <cstdint>
#include <string>

namespace geeps {

struct WorkerStats {
  int rank = 0;
  int64_t clock = 0;             // clocks completed (the prologue is clock 0)
  int64_t iterations = 0;        // repeated iterations completed
  double read_wait_seconds = 0;  // time the application thread waited in Read
  int64_t reads_waited = 0;      // Reads that had to wait for fresh rows
  int64_t messages_sent = 0;
  int64_t messages_received = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t pushes_installed = 0;   // fresh row blocks installed in the cache
  int64_t frames_dropped = 0;     // malformed or unexpected frames dropped
  uint64_t device_bytes_in_use = 0;

  std::string ToJson() const;
};

struct ShardStats {
  int shard = 0;
  int64_t updates_applied = 0;   // update messages applied
  int64_t rows_applied = 0;
  int64_t pushes_sent = 0;
  int64_t bytes_received = 0;
  int64_t bytes_sent = 0;
  int64_t frames_dropped = 0;    // malformed or unexpected frames dropped

  // Adds the counters of `other` (e.g. of another channel of the shard).
  void Add(const ShardStats& other);
  std::string ToJson() const;
};

}  // namespace geeps

#endif  // GEEPS_STATS_H_
