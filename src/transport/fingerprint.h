// One fingerprint of a job's config, for the two places that must refuse a
// config that does not match: the rendezvous (every rank of a job must
// agree) and the checkpoints (a file belongs to one job). Both are
// FingerprintHash of one canonical text (FingerprintText), which takes the
// fields each scope needs:
//   kCheckpoint: "workers=W;shards=S;channels=C;slack=K;" then
//                "deterministic" or "plain", then per table
//                ";<name length>:<name>,<rows>,<width>,<l|s>"
//   kRendezvous: "channels=C;" then "deterministic" or "plain", then
//                ";noresend" when resend_after_connection_loss is off, then
//                the tables as above. Workers and shards are not in it: the
//                rendezvous itself decides them from the ranks' roles.
// The checkpoint text is part of the checkpoint file format: changing it
// makes every existing checkpoint refuse to load.
#ifndef GEEPS_TRANSPORT_FINGERPRINT_H_
#define GEEPS_TRANSPORT_FINGERPRINT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "geeps/config.h"

namespace geeps::transport {

enum class FingerprintScope { kRendezvous, kCheckpoint };

// The canonical text above.
std::string FingerprintText(const Config& config, FingerprintScope scope);

// 64-bit FNV-1a of `bytes`, but from the offset basis 1469598103934665603
// (FNV's is 14695981039346656037: the first version lost a digit, and
// checkpoint files store hashes made with it, so it stays).
uint64_t FingerprintHash(std::string_view bytes);

// FingerprintHash(FingerprintText(config, scope)).
uint64_t JobFingerprint(const Config& config, FingerprintScope scope);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_FINGERPRINT_H_
