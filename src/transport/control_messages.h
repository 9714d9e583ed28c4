// The control plane's text messages: a process's HELLO to the coordinator
// (rank 0), the coordinator's WELCOME with the job's layout, and the
// heartbeat thread's LOST notice (the routing ids ranks connect with are in
// routing_id.h). Decoding is
// strict and bounded (every count is checked before it sizes anything): the
// coordinator's port takes frames from anyone who can connect.
// tests/fuzz/fuzz_control.cc fuzzes every decoder here.
//
// Nothing here needs ZeroMQ.
#ifndef GEEPS_TRANSPORT_CONTROL_MESSAGES_H_
#define GEEPS_TRANSPORT_CONTROL_MESSAGES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "geeps/process.h"
#include "geeps/status.h"

namespace geeps::transport {

// The longest control message decoded (the control sockets' ZMQ_MAXMSGSIZE,
// kControlFrameLimit in socket_util.h, is the same).
inline constexpr size_t kMaxControlText = size_t{16} << 20;

struct PeerInfo {
  int rank = 0;
  ProcessRole role = ProcessRole::kWorkerAndServer;
  std::vector<std::string> endpoints;  // its shard's channel endpoints
  // The machine it runs on (ProcessOptions::machine; "" for none): with
  // Config::aggregate_per_machine, the workers of one machine share a relay.
  std::string machine;
  // (partition, clock) of the checkpoint files it sees (HELLO only; for
  // Config::resume).
  std::vector<std::pair<int, int64_t>> checkpoints;
};

struct JobLayout {
  std::vector<PeerInfo> peers;    // by rank
  std::vector<int> worker_index;  // per rank: its index among workers, or -1
  std::vector<int> shard_index;   // per rank: its index among shards, or -1
  int num_workers = 0;
  int num_shards = 0;
  int64_t resume_clock = 0;  // the checkpoint every rank restores; 0: none
  // The job token (security.h: what the data plane's connections present
  // without CURVE keys), made by rank 0; "" in a WELCOME without one.
  std::string token;
};

// Rank 0's choice of the checkpoint clock, given every rank's HELLO.
using ResumeChooser = std::function<StatusOr<int64_t>(const JobLayout& layout)>;

// A machine name: 1 to 255 of [A-Za-z0-9._:-], not "-" (which stands for
// none in HELLO and WELCOME).
bool ValidMachineName(const std::string& name);

// Builds the layout from the peers (by rank): workers and shards are
// numbered in rank order.
JobLayout MakeLayout(std::vector<PeerInfo> peers);
std::string EncodeHello(const PeerInfo& self, int world_size, uint64_t fingerprint);
std::string EncodeWelcome(const JobLayout& layout);  // with resume_clock and token
StatusOr<JobLayout> DecodeWelcome(const std::string& text, int world_size, int channels);

// A decoded HELLO. The peer's shard endpoints are not yet checked against
// the channel count (the fingerprint says whether the configs agree first).
struct Hello {
  int world_size = 0;
  uint64_t fingerprint = 0;
  PeerInfo peer;
};
// `from`: the rank the sender's routing id claims; a HELLO naming another
// rank, or from a rank <= 0, is malformed.
StatusOr<Hello> DecodeHello(const std::string& text, int from);

// "LOST <rank>" from the coordinator: the rank (1 .. world_size - 1), or -1
// when the text is malformed or the rank is out of range.
int ParseLost(const std::string& text, int world_size);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_CONTROL_MESSAGES_H_
