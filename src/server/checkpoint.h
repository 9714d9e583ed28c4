// Checkpoint files of server partitions (docs/architecture.md, "Checkpoints").
//
// One file per partition and clock: <dir>/partition-<p>-clock-<k>.ckpt, with
// the rows of every shared table the partition owns, exactly as they stood
// when the table's minimum clock was k (every worker's updates of clocks < k).
//
// Layout (little-endian):
//   header  64 bytes
//     char[8] magic "GEEPSCKP" | u32 version (1) | u32 header bytes (64)
//     u64 file bytes (the whole file, checksum included)
//     u64 job fingerprint (transport::JobFingerprint, kCheckpoint) | u32 partition | u32 partitions
//     i64 clock | u32 table entries | u32 flags | u64 reserved (0)
//   per table entry
//     u32 table id | u32 row width | u64 first row | u64 row count
//     row count x row width x f32
//   with flags bit 0 (kCheckpointFlagMac), in a job with CURVE keys:
//     32 bytes HMAC-SHA-256 (libsodium) of every byte before it, keyed by
//     CheckpointKeyFromSecret(the job's secret key)
//   u32 CRC-32 (IEEE 802.3, reflected 0xEDB88320) of every byte before it
//
// The CRC catches accidents; only the MAC catches a deliberate edit (one
// can recompute a CRC). Without the job's key a MAC cannot be checked, so a
// job without CURVE reads keyed files on their CRC alone.
//
// Writing: a temporary file ".partition-<p>-clock-<k>.ckpt.tmp-<pid>-<n>",
// write, fsync, rename to the final name, fsync the folder. A crash leaves
// at most a temporary file, which every reader ignores.
#ifndef GEEPS_SERVER_CHECKPOINT_H_
#define GEEPS_SERVER_CHECKPOINT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "geeps/config.h"
#include "geeps/status.h"

namespace geeps::server {

constexpr uint32_t kCheckpointVersion = 1;
constexpr size_t kCheckpointHeaderBytes = 64;
constexpr uint32_t kCheckpointFlagMac = 1;
constexpr size_t kCheckpointMacBytes = 32;

// The key of a job's checkpoint MACs: BLAKE2b (libsodium) of a fixed label
// and the job's CURVE secret key (Z85), so every rank derives the same.
using CheckpointKey = std::array<uint8_t, 32>;
CheckpointKey CheckpointKeyFromSecret(const std::string& secret_key_z85);

// CRC-32 (IEEE) of `size` bytes, continuing from `crc` (0 to start).
uint32_t Crc32(const void* data, size_t size, uint32_t crc = 0);

struct CheckpointTable {
  TableId table = 0;
  uint32_t width = 0;
  uint64_t first_row = 0;
  uint64_t row_count = 0;
  std::vector<float> data;  // row_count * width
};

struct CheckpointData {
  uint64_t fingerprint = 0;
  uint32_t partition = 0;
  uint32_t num_partitions = 0;
  int64_t clock = 0;
  std::vector<CheckpointTable> tables;
};

std::string CheckpointFileName(int partition, int64_t clock);
std::string CheckpointPath(const std::string& dir, int partition, int64_t clock);

// The bytes of a checkpoint file (for tests and WriteCheckpointFile); with
// `key`, MAC'd.
std::string EncodeCheckpoint(const CheckpointData& data, const CheckpointKey* key = nullptr);

// Verifies and decodes a whole file's bytes; nothing is returned unless every
// check passed. `what` names the file in messages. Corrupt or truncated:
// kDataLoss; a file of another job (fingerprint, partition or clock not the
// expected ones): kFailedPrecondition. With `key` the file must carry a
// MAC by that key (kDataLoss otherwise: edited, or written by a job without
// it); without, a MAC is skipped.
StatusOr<CheckpointData> DecodeCheckpoint(const std::string& bytes, const std::string& what,
                                          uint64_t expected_fingerprint, int partition,
                                          int64_t clock, const CheckpointKey* key = nullptr);

// Writes atomically (temporary file, fsync, rename, fsync of the folder),
// then deletes this partition's checkpoints older than the newest `keep`.
// kUnavailable naming the path on any I/O error.
Status WriteCheckpointFile(const std::string& dir, const CheckpointData& data, int keep = 2,
                           const CheckpointKey* key = nullptr);

// Reads and verifies <dir>/partition-<p>-clock-<k>.ckpt (kNotFound if it
// does not exist). A file that is not a regular file (a FIFO, a device, a
// directory), or holds more than `max_bytes` (CheckpointFileBytes of the
// partition's tables), is kDataLoss naming it, without reading it.
StatusOr<CheckpointData> ReadCheckpointFile(const std::string& dir, uint64_t fingerprint,
                                            int partition, int64_t clock, uint64_t max_bytes,
                                            const CheckpointKey* key = nullptr);

// The size of a checkpoint file holding tables of (row count, row width),
// with a MAC when `mac`.
uint64_t CheckpointFileBytes(const std::vector<std::pair<uint64_t, uint32_t>>& tables,
                             bool mac = false);

// Clocks of the finished checkpoint files in `dir`, by partition. Temporary
// files and other names are ignored. A missing folder is empty.
std::map<int, std::set<int64_t>> ListCheckpoints(const std::string& dir);

// Partitions that own at least one row of a shared table: the ones that
// write checkpoints.
std::vector<int> CheckpointingPartitions(const Config& config);

// The newest clock that every partition of `partitions` has in `available`,
// or 0 if none. `why`, if given, gets a description of what is there.
int64_t NewestCompleteClock(const std::map<int, std::set<int64_t>>& available,
                            const std::vector<int>& partitions, std::string* why = nullptr);

// Creates `dir` (and its parents) if missing; kInvalidArgument naming it if
// it cannot be created or is not a folder.
Status EnsureCheckpointDir(const std::string& dir);

// Chooses the clock a job starts at from `available` (Config::resume): 0
// for a fresh start; kNotFound when resume is required and there is none.
StatusOr<int64_t> ChooseResumeClock(const Config& config,
                                    const std::map<int, std::set<int64_t>>& available);

}  // namespace geeps::server

#endif  // GEEPS_SERVER_CHECKPOINT_H_
