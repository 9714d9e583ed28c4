#include "transport/control_messages.h"

#include <sstream>

#include "transport/routing_id.h"

namespace geeps::transport {
namespace {

bool ValidRole(int role) { return role >= 0 && role <= 2; }
bool HasShard(ProcessRole r) { return r != ProcessRole::kWorker; }
bool HasWorker(ProcessRole r) { return r != ProcessRole::kServer; }

// Reads "<rank> <role> <machine> <n> <endpoint>..." from `in` (machine "-":
// none).
bool ReadPeer(std::istream& in, int channels, PeerInfo* peer) {
  int role = -1;
  size_t n = 0;
  if (!(in >> peer->rank >> role >> peer->machine >> n) || !ValidRole(role) || n > 64) return false;
  if (peer->machine == "-")
    peer->machine.clear();
  else if (!ValidMachineName(peer->machine))
    return false;
  peer->role = static_cast<ProcessRole>(role);
  peer->endpoints.resize(n);
  for (auto& ep : peer->endpoints) {
    if (!(in >> ep) || ep.size() > 512) return false;
  }
  if (channels < 0) return true;  // checked later, against the fingerprint
  return HasShard(peer->role) ? n == static_cast<size_t>(channels) : n == 0;
}

void WritePeer(std::ostream& out, const PeerInfo& peer) {
  out << peer.rank << ' ' << static_cast<int>(peer.role) << ' '
      << (peer.machine.empty() ? std::string("-") : peer.machine) << ' ' << peer.endpoints.size();
  for (const auto& ep : peer.endpoints) out << ' ' << ep;
}

// Reads the optional " CKPT <n> (<partition> <clock>)..." of a HELLO.
bool ReadCheckpoints(std::istream& in, PeerInfo* peer) {
  std::string word;
  if (!(in >> word)) return true;  // none
  size_t n = 0;
  if (word != "CKPT" || !(in >> n) || n > 1000000) return false;
  peer->checkpoints.resize(n);
  for (auto& [p, k] : peer->checkpoints) {
    if (!(in >> p >> k) || p < 0 || k <= 0) return false;
  }
  return true;
}

// The value of `s`, a number in canonical decimal (digits only, no leading
// zero) of 1 to 9 digits (so no overflow), or -1.
int CanonicalDecimal(const std::string& s) {
  if (s.empty() || s.size() > 9) return -1;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return std::to_string(v) == s ? v : -1;
}

}  // namespace

bool ValidMachineName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "-") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_' || c == ':';
    if (!ok) return false;
  }
  return true;
}

JobLayout MakeLayout(std::vector<PeerInfo> peers) {
  JobLayout l;
  l.worker_index.assign(peers.size(), -1);
  l.shard_index.assign(peers.size(), -1);
  for (size_t r = 0; r < peers.size(); ++r) {
    if (HasWorker(peers[r].role)) l.worker_index[r] = l.num_workers++;
    if (HasShard(peers[r].role)) l.shard_index[r] = l.num_shards++;
  }
  l.peers = std::move(peers);
  return l;
}

std::string EncodeHello(const PeerInfo& self, int world_size, uint64_t fingerprint) {
  std::ostringstream out;
  out << "HELLO " << world_size << ' ' << fingerprint << ' ';
  WritePeer(out, self);
  if (!self.checkpoints.empty()) {
    out << " CKPT " << self.checkpoints.size();
    for (const auto& [p, k] : self.checkpoints) out << ' ' << p << ' ' << k;
  }
  return out.str();
}

std::string EncodeWelcome(const JobLayout& layout) {
  std::ostringstream out;
  out << "WELCOME " << layout.peers.size();
  for (const PeerInfo& p : layout.peers) {
    out << '\n';
    WritePeer(out, p);
  }
  if (layout.resume_clock > 0) out << "\nRESUME " << layout.resume_clock;
  if (!layout.token.empty()) out << "\nTOKEN " << layout.token;
  return out.str();
}

StatusOr<JobLayout> DecodeWelcome(const std::string& text, int world_size, int channels) {
  std::istringstream in(text);
  std::string word;
  int n = 0;
  if (!(in >> word >> n) || word != "WELCOME" || n != world_size)
    return InvalidArgumentError("malformed WELCOME from the coordinator");
  std::vector<PeerInfo> peers(n);
  for (int r = 0; r < n; ++r) {
    if (!ReadPeer(in, channels, &peers[r]) || peers[r].rank != r)
      return InvalidArgumentError("malformed WELCOME entry for rank " + std::to_string(r));
  }
  JobLayout layout = MakeLayout(std::move(peers));
  if (in >> word && word == "RESUME") {
    if (!(in >> layout.resume_clock) || layout.resume_clock <= 0)
      return InvalidArgumentError("malformed WELCOME from the coordinator (resume clock)");
    if (!(in >> word)) return layout;
  }
  if (in && word == "TOKEN") {
    if (!(in >> layout.token) || !ValidJobToken(layout.token))
      return InvalidArgumentError("malformed WELCOME from the coordinator (job token)");
    if (!(in >> word)) return layout;
  }
  if (in) return InvalidArgumentError("malformed WELCOME from the coordinator (after the ranks)");
  return layout;
}

StatusOr<Hello> DecodeHello(const std::string& text, int from) {
  if (from <= 0 || text.size() > kMaxControlText) return InvalidArgumentError("malformed HELLO");
  std::istringstream in(text);
  std::string word;
  Hello h;
  if (!(in >> word >> h.world_size >> h.fingerprint) || word != "HELLO" ||
      !ReadPeer(in, -1, &h.peer) || h.peer.rank != from || !ReadCheckpoints(in, &h.peer))
    return InvalidArgumentError("malformed HELLO");
  return h;
}

int ParseLost(const std::string& text, int world_size) {
  if (text.rfind("LOST ", 0) != 0) return -1;
  const int v = CanonicalDecimal(text.substr(5));
  return v > 0 && v < world_size ? v : -1;
}

}  // namespace geeps::transport
