// The checked mode (Config::checked, GEEPS_CHECKED=1; docs/api.md,
// "Writing through the pointers libgeeps returns"): a worker looks at the
// buffers it hands out at the calls that close them, so that a misuse is
// named at the call where it shows instead of changing results silently:
//
//   a Read buffer written before its PostRead   checksum at Read, compared
//                                               at PostRead
//   a Read buffer used after its PostRead       poisoned at PostRead (NaN
//                                               with a payload), the poison
//                                               checked at the next Read
//   an update buffer written after its Update   poisoned at Update (after
//                                               the update was copied), the
//                                               poison checked at the next
//                                               PreUpdate
//   a non-finite delta                          checked at Update, before
//                                               anything is sent
//
// Each error is kFailedPrecondition (kInvalidArgument for a non-finite
// delta) naming the call, the handle, the table and the worker. Buffers
// that the memory manager's pool lends (a device memory budget) go back to
// the pool at PostRead / Update, so only their checksum and deltas are
// checked. The worker also turns off what would share memory with a
// buffer it hands out: reads in place (every read is gathered into a
// buffer of its own) and updates sent in place.
//
// Threading: the application thread's, under the worker's API lock. The
// device work (copies for a host view, fills) runs on the application's
// stream, after what the application queued there.
#ifndef GEEPS_CLIENT_CHECKED_MODE_H_
#define GEEPS_CLIENT_CHECKED_MODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "client/op_sequence.h"
#include "device/device.h"
#include "geeps/config.h"
#include "geeps/status.h"

namespace geeps::client {

// ---- The checks on host memory (no device; tests/checked_mode_test.cc).

// A 64-bit FNV-1a-style sum of `floats` floats (8-byte steps): any change
// of one 8-byte word changes it.
uint64_t BufferChecksum(const float* host, size_t floats);
// The poison: a quiet NaN whose payload reads "bad" (0x7FCBADBA), so a
// value read after PostRead is NaN and recognisable in a debugger.
inline constexpr uint32_t kPoisonBits = 0x7FCBADBAu;
void PoisonFloats(float* host, size_t floats);
// The first float that is not the poison, or -1.
int64_t FirstUnpoisoned(const float* host, size_t floats);
// The first float that is NaN or infinite, or -1.
int64_t FirstNonFinite(const float* host, size_t floats);

class CheckedMode {
 public:
  // All outlive it. `stream`: the application thread's.
  CheckedMode(const Config* config, const OpSequence* seq, int rank, device::Device* device,
              device::Stream* stream);

  // Read, before the rows are gathered into `buffer` (the read's own, not
  // a pool's): if the last PostRead poisoned it, the poison is intact.
  Status BeforeGather(int32_t read, const float* buffer);
  // Read, returning `rows`: their checksum, for PostRead.
  Status AfterRead(int32_t read, const float* rows);
  // PostRead: the rows are as Read returned them; then `own` (the read's
  // own buffer, null for a pool's) is poisoned.
  Status AtPostRead(int32_t read, const float* rows, float* own);
  // PreUpdate, before the buffer is zeroed: if the last Update poisoned
  // `own` (the update's own buffer), the poison is intact.
  Status BeforePreUpdate(int32_t update, const float* own);
  // Update, before anything is sent: every delta is finite.
  Status AtUpdate(int32_t update, const float* deltas);
  // Update, once the deltas are copied out: `own` is poisoned.
  Status AfterUpdate(int32_t update, float* own);

 private:
  // The floats of `buffer` as the host sees them now (the stream
  // synchronized): the buffer itself where the host may address it, else
  // a copy.
  StatusOr<const float*> HostView(const float* buffer, size_t floats);
  Status Poison(float* buffer, size_t floats);
  // OK while `buffer` holds the poison; else kFailedPrecondition: `where`,
  // written after its last `closed_by`, the first float changed, `advice`.
  Status CheckPoison(const float* buffer, size_t floats, const std::string& where,
                     const char* closed_by, const char* advice);
  size_t ReadFloats(int32_t read) const;
  size_t UpdateFloats(int32_t update) const;
  // "Read(read#2) of table 0 ('w') on worker 1".
  std::string Where(const char* call, const char* kind, int32_t handle,
                    const RecordedAccess& a) const;

  const Config* config_;
  const OpSequence* seq_;
  const int rank_;
  device::Device* device_;
  device::Stream* stream_;
  std::vector<uint64_t> read_sums_;
  std::vector<bool> read_poisoned_, update_poisoned_;
  std::vector<float> scratch_;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_CHECKED_MODE_H_
