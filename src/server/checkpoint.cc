#include "server/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/file_util.h"
#include "common/partition.h"

namespace geeps::server {
namespace {

constexpr char kMagic[8] = {'G', 'E', 'E', 'P', 'S', 'C', 'K', 'P'};
constexpr size_t kEntryBytes = 24;  // u32 table, u32 width, u64 first, u64 count

uint32_t CrcTableEntry(uint32_t i) {
  uint32_t c = i;
  for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  return c;
}

struct CrcTable {
  uint32_t v[256];
  CrcTable() {
    for (uint32_t i = 0; i < 256; ++i) v[i] = CrcTableEntry(i);
  }
};

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian, like the wire format
  out->append(b, sizeof(T));
}

template <typename T>
T Get(const std::string& in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

std::string Errno(int e) { return std::strerror(e); }

// Parses "partition-<p>-clock-<k>.ckpt" strictly (decimal, no signs).
bool ParseName(const std::string& name, int* partition, int64_t* clock) {
  const std::string a = "partition-", b = "-clock-", c = ".ckpt";
  if (name.rfind(a, 0) != 0 || name.size() <= a.size() + b.size() + c.size()) return false;
  if (name.compare(name.size() - c.size(), c.size(), c) != 0) return false;
  const size_t mid = name.find(b, a.size());
  if (mid == std::string::npos) return false;
  const std::string p = name.substr(a.size(), mid - a.size());
  const std::string k = name.substr(mid + b.size(), name.size() - c.size() - mid - b.size());
  auto digits = [](const std::string& s, size_t max) {
    if (s.empty() || s.size() > max) return false;
    for (char ch : s)
      if (ch < '0' || ch > '9') return false;
    return true;
  };
  if (!digits(p, 6) || !digits(k, 18)) return false;
  *partition = std::stoi(p);
  *clock = std::stoll(k);
  return true;
}

Status SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return UnavailableError("checkpoint: cannot open folder " + dir + ": " + Errno(errno));
  const int rc = fsync(fd);
  const int e = errno;
  close(fd);
  if (rc != 0) return UnavailableError("checkpoint: fsync of folder " + dir + ": " + Errno(e));
  return Status::OK();
}

}  // namespace

uint32_t Crc32(const void* data, size_t size, uint32_t crc) {
  static const CrcTable kTable;
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kTable.v[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string CheckpointFileName(int partition, int64_t clock) {
  return "partition-" + std::to_string(partition) + "-clock-" + std::to_string(clock) + ".ckpt";
}

std::string CheckpointPath(const std::string& dir, int partition, int64_t clock) {
  return dir + "/" + CheckpointFileName(partition, clock);
}

CheckpointKey CheckpointKeyFromSecret(const std::string& secret_key_z85) {
  static constexpr char kLabel[] = "libgeeps checkpoint MAC key v1";
  std::string input(kLabel, sizeof(kLabel));  // the label with its NUL
  input += secret_key_z85;
  CheckpointKey key{};
  crypto_generichash(key.data(), key.size(), reinterpret_cast<const unsigned char*>(input.data()),
                     input.size(), nullptr, 0);
  sodium_memzero(input.data(), input.size());
  return key;
}

std::string EncodeCheckpoint(const CheckpointData& d, const CheckpointKey* key) {
  size_t total = kCheckpointHeaderBytes + sizeof(uint32_t) + (key ? kCheckpointMacBytes : 0);
  for (const CheckpointTable& t : d.tables) total += kEntryBytes + t.data.size() * sizeof(float);
  std::string out;
  out.reserve(total);
  out.append(kMagic, sizeof(kMagic));
  Put<uint32_t>(&out, kCheckpointVersion);
  Put<uint32_t>(&out, static_cast<uint32_t>(kCheckpointHeaderBytes));
  Put<uint64_t>(&out, total);
  Put<uint64_t>(&out, d.fingerprint);
  Put<uint32_t>(&out, d.partition);
  Put<uint32_t>(&out, d.num_partitions);
  Put<int64_t>(&out, d.clock);
  Put<uint32_t>(&out, static_cast<uint32_t>(d.tables.size()));
  Put<uint32_t>(&out, key ? kCheckpointFlagMac : 0);
  Put<uint64_t>(&out, 0);
  for (const CheckpointTable& t : d.tables) {
    Put<uint32_t>(&out, t.table);
    Put<uint32_t>(&out, t.width);
    Put<uint64_t>(&out, t.first_row);
    Put<uint64_t>(&out, t.row_count);
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  }
  if (key != nullptr) {
    unsigned char mac[kCheckpointMacBytes];
    static_assert(kCheckpointMacBytes == crypto_auth_hmacsha256_BYTES);
    crypto_auth_hmacsha256(mac, reinterpret_cast<const unsigned char*>(out.data()), out.size(),
                           key->data());
    out.append(reinterpret_cast<const char*>(mac), sizeof(mac));
  }
  Put<uint32_t>(&out, Crc32(out.data(), out.size()));
  return out;
}

StatusOr<CheckpointData> DecodeCheckpoint(const std::string& in, const std::string& what,
                                          uint64_t expected_fingerprint, int partition,
                                          int64_t clock, const CheckpointKey* key) {
  auto loss = [&](const std::string& m) { return DataLossError("checkpoint " + what + ": " + m); };
  if (in.empty()) return loss("the file is empty");
  if (in.size() < kCheckpointHeaderBytes + sizeof(uint32_t))
    return loss("truncated: " + std::to_string(in.size()) + " bytes, shorter than the " +
                std::to_string(kCheckpointHeaderBytes) + "-byte header");
  if (std::memcmp(in.data(), kMagic, sizeof(kMagic)) != 0)
    return loss("bad magic: not a libgeeps checkpoint file");
  const uint32_t version = Get<uint32_t>(in, 8);
  if (version != kCheckpointVersion)
    return loss("format version " + std::to_string(version) + ", this build reads version " +
                std::to_string(kCheckpointVersion));
  const uint32_t header_bytes = Get<uint32_t>(in, 12);
  const uint64_t file_bytes = Get<uint64_t>(in, 16);
  if (header_bytes != kCheckpointHeaderBytes)
    return loss("header size " + std::to_string(header_bytes) + ", expected " +
                std::to_string(kCheckpointHeaderBytes) + " (corrupt header)");
  if (file_bytes != in.size())
    return loss(file_bytes > in.size()
                    ? "truncated: the header says " + std::to_string(file_bytes) +
                          " bytes, the file has " + std::to_string(in.size())
                    : "the header says " + std::to_string(file_bytes) + " bytes, the file has " +
                          std::to_string(in.size()) + " (trailing bytes or corrupt header)");
  const size_t body = in.size() - sizeof(uint32_t);
  const uint32_t stored = Get<uint32_t>(in, body);
  const uint32_t computed = Crc32(in.data(), body);
  if (stored != computed) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "stored %08x, computed %08x", stored, computed);
    return loss(std::string("checksum mismatch (") + buf + "): the file is corrupt");
  }
  CheckpointData d;
  d.fingerprint = Get<uint64_t>(in, 24);
  d.partition = Get<uint32_t>(in, 32);
  d.num_partitions = Get<uint32_t>(in, 36);
  d.clock = Get<int64_t>(in, 40);
  const uint32_t entries = Get<uint32_t>(in, 48);
  const uint32_t flags = Get<uint32_t>(in, 52);
  if ((flags & ~kCheckpointFlagMac) != 0 || Get<uint64_t>(in, 56) != 0)
    return loss("unknown header flags, or reserved header fields that are not zero");
  // The rows end where the MAC (if any) begins.
  const bool has_mac = (flags & kCheckpointFlagMac) != 0;
  if (has_mac && body < kCheckpointHeaderBytes + kCheckpointMacBytes)
    return loss("truncated: too short for its MAC");
  const size_t rows_end = has_mac ? body - kCheckpointMacBytes : body;
  if (key != nullptr && !has_mac)
    return loss(
        "no MAC, but this job has a CURVE key: a checkpoint of this job has one (was "
        "the file written by a job without the key, or replaced?)");
  if (key != nullptr &&
      crypto_auth_hmacsha256_verify(reinterpret_cast<const unsigned char*>(in.data()) + rows_end,
                                    reinterpret_cast<const unsigned char*>(in.data()), rows_end,
                                    key->data()) != 0)
    return loss(
        "MAC mismatch: the file was changed after it was written, or by a job with "
        "another key");
  if (d.fingerprint != expected_fingerprint)
    return FailedPreconditionError("checkpoint " + what +
                                   " belongs to another job: its tables, workers, shards, channels "
                                   "or consistency mode differ from this job's (fingerprint " +
                                   std::to_string(d.fingerprint) + ", this job's " +
                                   std::to_string(expected_fingerprint) + ")");
  if (static_cast<int64_t>(d.partition) != partition || d.clock != clock)
    return FailedPreconditionError(
        "checkpoint " + what + " holds partition " + std::to_string(d.partition) + " at clock " +
        std::to_string(d.clock) + ", but its name says partition " + std::to_string(partition) +
        " at clock " + std::to_string(clock) + " (renamed file?)");
  size_t at = kCheckpointHeaderBytes;
  for (uint32_t e = 0; e < entries; ++e) {
    if (rows_end - at < kEntryBytes)
      return loss("table entry " + std::to_string(e) + " is cut off");
    CheckpointTable t;
    t.table = Get<uint32_t>(in, at);
    t.width = Get<uint32_t>(in, at + 4);
    t.first_row = Get<uint64_t>(in, at + 8);
    t.row_count = Get<uint64_t>(in, at + 16);
    at += kEntryBytes;
    const uint64_t room = (rows_end - at) / sizeof(float);
    if (t.width == 0 || t.row_count > room || (t.row_count > 0 && t.width > room / t.row_count))
      return loss("table entry " + std::to_string(e) + " claims more rows than the file holds");
    const size_t floats = static_cast<size_t>(t.row_count) * t.width;
    t.data.resize(floats);
    // An entry of 0 rows is legal; memcpy of 0 bytes to its null data is not.
    if (floats > 0) std::memcpy(t.data.data(), in.data() + at, floats * sizeof(float));
    at += floats * sizeof(float);
    d.tables.push_back(std::move(t));
  }
  if (at != rows_end)
    return loss(std::to_string(rows_end - at) + " unexpected bytes after the last table");
  return d;
}

Status WriteCheckpointFile(const std::string& dir, const CheckpointData& data, int keep,
                           const CheckpointKey* key) {
  static std::atomic<uint64_t> counter{0};
  const std::string final_path = CheckpointPath(dir, static_cast<int>(data.partition), data.clock);
  const std::string tmp =
      dir + "/." + CheckpointFileName(static_cast<int>(data.partition), data.clock) + ".tmp-" +
      std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1));
  const std::string bytes = EncodeCheckpoint(data, key);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return UnavailableError("checkpoint: cannot create " + tmp + ": " + Errno(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return UnavailableError("checkpoint: cannot write " + tmp + ": " + Errno(e));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const int e = errno;
    close(fd);
    unlink(tmp.c_str());
    return UnavailableError("checkpoint: fsync of " + tmp + ": " + Errno(e));
  }
  close(fd);
  if (rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    return UnavailableError("checkpoint: cannot rename " + tmp + " to " + final_path + ": " +
                            Errno(e));
  }
  GEEPS_RETURN_IF_ERROR(SyncDir(dir));
  // Keep the newest `keep` of this partition's checkpoints.
  const auto all = ListCheckpoints(dir);
  auto it = all.find(static_cast<int>(data.partition));
  if (it != all.end() && static_cast<int>(it->second.size()) > keep) {
    int extra = static_cast<int>(it->second.size()) - keep;
    for (int64_t k : it->second) {
      if (extra-- <= 0) break;
      unlink(CheckpointPath(dir, static_cast<int>(data.partition), k).c_str());
    }
  }
  return Status::OK();
}

StatusOr<CheckpointData> ReadCheckpointFile(const std::string& dir, uint64_t fingerprint,
                                            int partition, int64_t clock, uint64_t max_bytes,
                                            const CheckpointKey* key) {
  const std::string path = CheckpointPath(dir, partition, clock);
  StatusOr<std::string> bytes = common::ReadRegularFile(path, "checkpoint " + path, max_bytes);
  if (!bytes.ok()) {
    // Not a regular file, or larger than this partition's checkpoint can
    // be: not a usable checkpoint.
    if (bytes.status().code() == StatusCode::kInvalidArgument)
      return DataLossError(bytes.status().message());
    return bytes.status();
  }
  return DecodeCheckpoint(*bytes, path, fingerprint, partition, clock, key);
}

uint64_t CheckpointFileBytes(const std::vector<std::pair<uint64_t, uint32_t>>& tables, bool mac) {
  uint64_t bytes = kCheckpointHeaderBytes + sizeof(uint32_t) + (mac ? kCheckpointMacBytes : 0);
  for (const auto& [rows, width] : tables) bytes += kEntryBytes + rows * width * sizeof(float);
  return bytes;
}

std::map<int, std::set<int64_t>> ListCheckpoints(const std::string& dir) {
  std::map<int, std::set<int64_t>> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    int p = 0;
    int64_t k = 0;
    if (ParseName(e->d_name, &p, &k)) out[p].insert(k);
  }
  closedir(d);
  return out;
}

std::vector<int> CheckpointingPartitions(const Config& c) {
  const int n = c.num_shards * c.num_channels;
  std::vector<int> out;
  for (int p = 0; p < n; ++p) {
    for (const TableSpec& t : c.tables) {
      if (!t.local && common::PartitionRows(t.num_rows, p, n).size() > 0) {
        out.push_back(p);
        break;
      }
    }
  }
  return out;
}

int64_t NewestCompleteClock(const std::map<int, std::set<int64_t>>& available,
                            const std::vector<int>& partitions, std::string* why) {
  std::set<int64_t> common;
  bool first = true;
  for (int p : partitions) {
    auto it = available.find(p);
    const std::set<int64_t> none;
    const std::set<int64_t>& have = it == available.end() ? none : it->second;
    if (first) {
      common = have;
      first = false;
    } else {
      std::set<int64_t> both;
      for (int64_t k : have)
        if (common.count(k)) both.insert(k);
      common.swap(both);
    }
  }
  if (why) {
    std::string s;
    for (int p : partitions) {
      auto it = available.find(p);
      s += (s.empty() ? "" : "; ") + std::string("partition ") + std::to_string(p) + ": ";
      if (it == available.end() || it->second.empty()) {
        s += "none";
        continue;
      }
      std::string list;
      for (int64_t k : it->second) list += (list.empty() ? "" : ",") + std::to_string(k);
      s += "clocks " + list;
    }
    *why = s;
  }
  return common.empty() ? 0 : *common.rbegin();
}

Status EnsureCheckpointDir(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("checkpoint_dir is empty");
  std::string path;
  size_t at = 0;
  while (at != std::string::npos) {
    at = dir.find('/', at + 1);
    path = dir.substr(0, at);
    if (path.empty()) continue;
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
      return InvalidArgumentError("checkpoint_dir " + dir + ": cannot create " + path + ": " +
                                  Errno(errno));
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return InvalidArgumentError("checkpoint_dir " + dir + " is not a folder");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    return InvalidArgumentError("checkpoint_dir " + dir + " is not writable: " + Errno(errno));
  return Status::OK();
}

StatusOr<int64_t> ChooseResumeClock(const Config& config,
                                    const std::map<int, std::set<int64_t>>& available) {
  if (config.resume == ResumeMode::kOff) return int64_t{0};
  std::string why;
  const int64_t k = NewestCompleteClock(available, CheckpointingPartitions(config), &why);
  if (k > 0 || config.resume == ResumeMode::kIfPresent) return k;
  return NotFoundError("resume: no complete checkpoint in " + config.checkpoint_dir +
                       " (a clock every server partition has a file of; found " + why + ")");
}

}  // namespace geeps::server
