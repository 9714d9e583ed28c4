// Fuzz target: the control plane's text messages (src/transport/
// control_messages.cc) and routing ids (src/transport/routing_id.cc), which the coordinator's port
// takes from anyone who can connect (and a peer from whatever answers at the coordinator's
// address).
//
// Input layout: byte 0 picks the decoder (mod 4), byte 1 a parameter, the
// rest is the message:
//   0: DecodeHello(text, from = byte1 % 10)       (the coordinator)
//   1: DecodeWelcome(text, world = byte1 % 8 + 1,
//                    channels = byte1 / 8 % 4)     (every other rank)
//   2: ParsePeerRoutingId(text)                    (the coordinator's routing ids)
//   3: ParseLost(text, world = byte1 % 16 + 1)     (every other rank)
//
// Properties checked (beyond "never crashes"): whatever a decoder accepts is
// well formed (the rank claimed, the world size asked for, roles and counts
// in range) and survives re-encoding: encoding it and decoding that again
// gives the same fields. An accepted routing id or LOST notice is exactly
// the canonical text of the number it yields.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "transport/control_messages.h"
#include "transport/routing_id.h"

#ifndef GEEPS_FUZZ_ENTRY
#define GEEPS_FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

namespace geeps::fuzz::control {

using transport::JobLayout;
using transport::PeerInfo;

bool SamePeer(const PeerInfo& a, const PeerInfo& b) {
  return a.rank == b.rank && a.role == b.role && a.endpoints == b.endpoints &&
         a.checkpoints == b.checkpoints && a.machine == b.machine;
}

bool ValidRole(ProcessRole r) {
  return r == ProcessRole::kWorkerAndServer || r == ProcessRole::kWorker ||
         r == ProcessRole::kServer;
}

void CheckHello(const std::string& text, int from) {
  StatusOr<transport::Hello> h = transport::DecodeHello(text, from);
  if (!h.ok()) {
    GEEPS_FUZZ_CHECK(h.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  GEEPS_FUZZ_CHECK(from > 0 && h->peer.rank == from);
  GEEPS_FUZZ_CHECK(ValidRole(h->peer.role));
  GEEPS_FUZZ_CHECK(h->peer.endpoints.size() <= 64);
  for (const auto& ep : h->peer.endpoints) GEEPS_FUZZ_CHECK(!ep.empty() && ep.size() <= 512);
  for (const auto& [p, k] : h->peer.checkpoints) GEEPS_FUZZ_CHECK(p >= 0 && k > 0);
  GEEPS_FUZZ_CHECK(h->peer.machine.empty() || transport::ValidMachineName(h->peer.machine));
  const std::string again = transport::EncodeHello(h->peer, h->world_size, h->fingerprint);
  StatusOr<transport::Hello> h2 = transport::DecodeHello(again, from);
  GEEPS_FUZZ_CHECK(h2.ok());
  GEEPS_FUZZ_CHECK(h2->world_size == h->world_size && h2->fingerprint == h->fingerprint);
  GEEPS_FUZZ_CHECK(SamePeer(h2->peer, h->peer));
}

void CheckWelcome(const std::string& text, int world, int channels) {
  StatusOr<JobLayout> l = transport::DecodeWelcome(text, world, channels);
  if (!l.ok()) {
    GEEPS_FUZZ_CHECK(l.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  GEEPS_FUZZ_CHECK(l->peers.size() == static_cast<size_t>(world));
  GEEPS_FUZZ_CHECK(l->worker_index.size() == l->peers.size());
  GEEPS_FUZZ_CHECK(l->shard_index.size() == l->peers.size());
  GEEPS_FUZZ_CHECK(l->resume_clock >= 0);
  int workers = 0, shards = 0;
  for (int r = 0; r < world; ++r) {
    const PeerInfo& p = l->peers[r];
    GEEPS_FUZZ_CHECK(p.rank == r && ValidRole(p.role));
    const bool shard = p.role != ProcessRole::kWorker;
    GEEPS_FUZZ_CHECK(p.endpoints.size() == (shard ? static_cast<size_t>(channels) : 0u));
    GEEPS_FUZZ_CHECK(l->shard_index[r] == (shard ? shards++ : -1));
    GEEPS_FUZZ_CHECK(l->worker_index[r] == (p.role != ProcessRole::kServer ? workers++ : -1));
  }
  GEEPS_FUZZ_CHECK(l->num_workers == workers && l->num_shards == shards);
  StatusOr<JobLayout> l2 = transport::DecodeWelcome(transport::EncodeWelcome(*l), world, channels);
  GEEPS_FUZZ_CHECK(l2.ok());
  GEEPS_FUZZ_CHECK(l2->resume_clock == l->resume_clock);
  GEEPS_FUZZ_CHECK(l->token.empty() || transport::ValidJobToken(l->token));
  GEEPS_FUZZ_CHECK(l2->token == l->token);
  for (int r = 0; r < world; ++r) GEEPS_FUZZ_CHECK(SamePeer(l2->peers[r], l->peers[r]));
}

void CheckPeerId(const std::string& text) {
  const int v = transport::ParsePeerRoutingId(text);
  GEEPS_FUZZ_CHECK(v >= -1);
  if (v < 0) return;
  const std::string prefix = "r" + std::to_string(v) + ".";
  GEEPS_FUZZ_CHECK(text.compare(0, prefix.size(), prefix) == 0);
  GEEPS_FUZZ_CHECK(text.size() > prefix.size() && text.size() <= 40);
}

void CheckLost(const std::string& text, int world) {
  const int v = transport::ParseLost(text, world);
  GEEPS_FUZZ_CHECK(v == -1 || (v > 0 && v < world));
  if (v > 0) GEEPS_FUZZ_CHECK(text == "LOST " + std::to_string(v));
}

}  // namespace geeps::fuzz::control

extern "C" int GEEPS_FUZZ_ENTRY(const uint8_t* data, size_t size) {
  using namespace geeps::fuzz::control;
  if (size < 2) return 0;
  const int which = data[0] % 4, param = data[1];
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  switch (which) {
    case 0:
      CheckHello(text, param % 10);
      break;
    case 1:
      CheckWelcome(text, param % 8 + 1, param / 8 % 4);
      break;
    case 2:
      CheckPeerId(text);
      break;
    default:
      CheckLost(text, param % 16 + 1);
      break;
  }
  return 0;
}
