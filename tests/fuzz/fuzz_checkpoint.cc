// Fuzz target: a checkpoint file's bytes (src/server/checkpoint.h), as
// a restarting partition meets them after ReadCheckpointFile
// (CheckpointWriter::Read, for ShardChannel::Restore).
//
// Each input is decoded twice: as it is (the CRC-32 almost always rejects
// it), and "repaired": the header's file-size field set to the input's size
// and the CRC recomputed, so that the fuzzer reaches the header and entry
// checks behind the checksum. The expected fingerprint, partition and clock
// are taken from the header, so the identity checks pass as often as not.
// Each is decoded without a key and with a fixed one (the corpus has a file
// MAC'd with it: tests/fuzz/make_corpus.py).
//
// Properties checked (beyond "never crashes"):
//   - a rejection is kDataLoss (corrupt) or kFailedPrecondition (another
//     job's file), never another code;
//   - whatever is accepted re-encodes to exactly the same bytes, and its
//     tables' data sizes match their row counts and widths.
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "server/checkpoint.h"

#ifndef GEEPS_FUZZ_ENTRY
#define GEEPS_FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

namespace geeps::fuzz::checkpoint {

// Decodes with or without the MAC key; what is accepted re-encodes exactly.
void DecodeWith(const std::string& bytes, uint64_t fingerprint, uint32_t partition, int64_t clock,
                const server::CheckpointKey* key) {
  StatusOr<server::CheckpointData> d = server::DecodeCheckpoint(
      bytes, "fuzz", fingerprint, static_cast<int>(partition & 0x7fffffff), clock, key);
  if (!d.ok()) {
    const StatusCode code = d.status().code();
    GEEPS_FUZZ_CHECK(code == StatusCode::kDataLoss || code == StatusCode::kFailedPrecondition);
    return;
  }
  for (const server::CheckpointTable& t : d->tables)
    GEEPS_FUZZ_CHECK(t.data.size() == t.row_count * t.width);
  // Keyless, a MAC'd file decodes too (the MAC is skipped): it re-encodes
  // with its MAC only under the key, so compare up to it then.
  if (key != nullptr || (bytes.size() >= 56 && (static_cast<uint8_t>(bytes[52]) & 1) == 0))
    GEEPS_FUZZ_CHECK(server::EncodeCheckpoint(*d, key) == bytes);
}

void DecodeOne(const std::string& bytes) {
  uint64_t fingerprint = 0;
  uint32_t partition = 0;
  int64_t clock = 0;
  if (bytes.size() >= server::kCheckpointHeaderBytes) {
    std::memcpy(&fingerprint, bytes.data() + 24, sizeof(fingerprint));
    std::memcpy(&partition, bytes.data() + 32, sizeof(partition));
    std::memcpy(&clock, bytes.data() + 40, sizeof(clock));
  }
  static const server::CheckpointKey kKey =
      server::CheckpointKeyFromSecret("fuzz-key-fuzz-key-fuzz-key-fuzz-key-0000");
  DecodeWith(bytes, fingerprint, partition, clock, nullptr);
  DecodeWith(bytes, fingerprint, partition, clock, &kKey);
}

int Run(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  DecodeOne(bytes);
  if (bytes.size() >= server::kCheckpointHeaderBytes + sizeof(uint32_t)) {
    const uint64_t total = bytes.size();
    std::memcpy(&bytes[16], &total, sizeof(total));
    const uint32_t crc = server::Crc32(bytes.data(), bytes.size() - sizeof(uint32_t));
    std::memcpy(&bytes[bytes.size() - sizeof(uint32_t)], &crc, sizeof(crc));
    DecodeOne(bytes);
  }
  return 0;
}

}  // namespace geeps::fuzz::checkpoint

extern "C" int GEEPS_FUZZ_ENTRY(const uint8_t* data, size_t size) {
  return geeps::fuzz::checkpoint::Run(data, size);
}
