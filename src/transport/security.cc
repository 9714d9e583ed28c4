#include "transport/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <zmq.hpp>

#include "common/file_util.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "geeps/process.h"
#include "transport/socket_util.h"

namespace geeps::transport {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapDomain = "geeps";
constexpr const char* kZapControlDomain = "geeps-control";
// ZMQ_ZAP_ENFORCE_DOMAIN (a draft option in libzmq 4.3's header, honoured by
// the library): with a ZAP domain set, a CURVE server refuses every client
// when no ZAP handler answers, instead of admitting all of them.
constexpr int kZapEnforceDomain = 93;
constexpr size_t kMaxKeyFileBytes = 64 * 1024;
constexpr size_t kMaxLoggedPeers = 256;
// A data connection's handshake must end within this (ZMQ_HANDSHAKE_IVL):
// what a connection that never proves itself holds is held no longer. A
// held ZAP request (no token yet) waits for the rendezvous, which ends
// within Config::timeout on every rank at nearly the same moment.
constexpr int kDataHandshakeMs = 10000;
// The PLAIN user name of the job's data connections (the token is the
// password; the name says what the password is).
constexpr const char* kTokenUser = "geeps-job-token";
// The PLAIN user name of a rank's connection to the coordinator without
// keys; the password is its routing id (routing_id.h: "r<rank>.<nonce>").
constexpr const char* kRankUser = "geeps-rank";
constexpr int kMonitorEvents = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_MONITOR_STOPPED;

std::string Quote(const std::string& path) { return "'" + path + "'"; }

std::string ErrnoText(int err) { return std::strerror(err); }

void SetKey(zmq::socket_t& socket, int option, const std::string& z85) {
  if (zmq_setsockopt(socket.handle(), option, z85.c_str(), z85.size()) != 0) throw zmq::error_t();
}

Status WriteAll(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return InvalidArgumentError("cannot write CURVE key file " + Quote(path) + ": " +
                                  ErrnoText(errno));
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0)
    return InvalidArgumentError("cannot write CURVE key file " + Quote(path) + ": " +
                                ErrnoText(errno));
  return Status::OK();
}

std::string ProtocolErrorText(uint32_t value, bool curve) {
  switch (value) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return curve ? "the peer does not use CURVE (security mechanism mismatch)"
                   : "the peer did not offer the job token (security mechanism mismatch: a "
                     "process outside the job?)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
      return "the peer uses another CURVE key (cryptographic error)";
    default: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "ZeroMQ protocol error 0x%08x", value);
      return buf;
    }
  }
}

}  // namespace

StatusOr<CurveKeys> NewCurveKeys() {
  char pub[kZ85KeyChars + 1] = {};
  char sec[kZ85KeyChars + 1] = {};
  if (!zmq_has("curve") || zmq_curve_keypair(pub, sec) != 0)
    return FailedPreconditionError(
        "this libzmq has no CURVE support (it was built without libsodium or tweetnacl)");
  return CurveKeys{pub, sec};
}

Status CheckCurveKeys(const CurveKeys& keys, const std::string& what) {
  for (const std::string* k : {&keys.public_key, &keys.secret_key}) {
    uint8_t raw[32];
    if (k->size() != kZ85KeyChars || !zmq_z85_decode(raw, k->c_str()))
      return InvalidArgumentError(what + ": a key is not 40 Z85 characters");
  }
  char derived[kZ85KeyChars + 1] = {};
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0)
    return FailedPreconditionError(
        "this libzmq has no CURVE support (it was built without libsodium or tweetnacl)");
  if (keys.public_key != derived)
    return InvalidArgumentError(what + ": the public key does not belong to the secret key");
  return Status::OK();
}

Status WriteCurveKeyFile(const std::string& path, const CurveKeys& keys, bool overwrite) {
  GEEPS_RETURN_IF_ERROR(CheckCurveKeys(keys, "the keys for " + Quote(path)));
  const std::string text =
      "# libgeeps CURVE job key, written by geeps_keygen (docs/security.md).\n"
      "# Secret: keep it mode 0600 and give it only to the processes of the job.\n"
      "public-key " +
      keys.public_key + "\nsecret-key " + keys.secret_key + "\n";
  if (!overwrite) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      if (errno == EEXIST)
        return FailedPreconditionError("CURVE key file " + Quote(path) +
                                       " already exists; it was not overwritten");
      return InvalidArgumentError("cannot create CURVE key file " + Quote(path) + ": " +
                                  ErrnoText(errno));
    }
    Status st = ::fchmod(fd, 0600) == 0
                    ? WriteAll(fd, text, path)
                    : InvalidArgumentError("cannot chmod " + Quote(path) + ": " + ErrnoText(errno));
    ::close(fd);
    if (!st.ok()) ::unlink(path.c_str());
    return st;
  }
  // Replace atomically: a new file (mkstemp makes it 0600) renamed over it.
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    return InvalidArgumentError("cannot create a file next to " + Quote(path) + ": " +
                                ErrnoText(errno));
  Status st = ::fchmod(fd, 0600) == 0
                  ? WriteAll(fd, text, path)
                  : InvalidArgumentError("cannot chmod " + Quote(tmp) + ": " + ErrnoText(errno));
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = InvalidArgumentError("cannot replace " + Quote(path) + ": " + ErrnoText(errno));
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

StatusOr<CurveKeys> ReadCurveKeyFile(const std::string& path) {
  const std::string what = "CURVE key file " + Quote(path);
  if (path.empty()) return InvalidArgumentError("CURVE key file: empty path");
  // Opened without blocking and checked before reading: a FIFO, a device
  // or a huge file is an error naming it (common/file_util.h).
  struct stat st {};
  StatusOr<std::string> read = common::ReadRegularFile(path, what, kMaxKeyFileBytes, &st);
  if (!read.ok()) {
    if (read.status().code() == StatusCode::kNotFound)
      return NotFoundError(what + " does not exist (make one with: geeps_keygen " + path + ")");
    return InvalidArgumentError(read.status().message());
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return InvalidArgumentError(what + " has mode " + mode +
                                ": its secret key must be readable only by its owner "
                                "(run: chmod 600 " +
                                path + ")");
  }
  const std::string& text = *read;

  CurveKeys keys;
  bool have_public = false, have_secret = false;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    std::string name, value, extra;
    if (!(fields >> name) || name[0] == '#') continue;
    const std::string where = what + " line " + std::to_string(number);
    if (!(fields >> value) || (fields >> extra))
      return InvalidArgumentError(where + ": expected '<name> <key>'");
    bool* seen = nullptr;
    std::string* key = nullptr;
    if (name == "public-key") {
      seen = &have_public;
      key = &keys.public_key;
    } else if (name == "secret-key") {
      seen = &have_secret;
      key = &keys.secret_key;
    } else {
      return InvalidArgumentError(where + ": unknown entry '" + name +
                                  "' (expected public-key or secret-key)");
    }
    if (*seen) return InvalidArgumentError(where + ": a second " + name);
    *seen = true;
    *key = value;
  }
  if (!have_public || !have_secret)
    return InvalidArgumentError(what + " has no " + (have_public ? "secret-key" : "public-key") +
                                " line (make a new one with geeps_keygen)");
  GEEPS_RETURN_IF_ERROR(CheckCurveKeys(keys, what));
  return keys;
}

// ---- SecurityConfig ----------------------------------------------------------

SecurityConfig::SecurityConfig(zmq::context_t* context, bool curve, CurveKeys keys)
    : context_(context),
      curve_(curve),
      keys_(std::move(keys)),
      control_endpoint_("inproc://geeps-security-" +
                        std::to_string(reinterpret_cast<uintptr_t>(this))) {}

StatusOr<std::unique_ptr<SecurityConfig>> SecurityConfig::Start(zmq::context_t* context,
                                                                CurveKeys job_keys) {
  if (!zmq_has("curve"))
    return FailedPreconditionError(
        "a CURVE key file was given, but this libzmq has no CURVE support (it was built "
        "without libsodium or tweetnacl)");
  GEEPS_RETURN_IF_ERROR(CheckCurveKeys(job_keys, "the job's CURVE keys"));
  std::unique_ptr<SecurityConfig> s(new SecurityConfig(context, true, std::move(job_keys)));
  s->allowed_client_key_.resize(32);
  zmq_z85_decode(s->allowed_client_key_.data(), s->keys_.public_key.c_str());
  return StartHandler(std::move(s));
}

StatusOr<std::unique_ptr<SecurityConfig>> SecurityConfig::StartWithToken(zmq::context_t* context) {
  return StartHandler(std::unique_ptr<SecurityConfig>(new SecurityConfig(context, false, {})));
}

StatusOr<std::unique_ptr<SecurityConfig>> SecurityConfig::StartHandler(
    std::unique_ptr<SecurityConfig> s) {
  try {
    s->zap_ = std::make_unique<zmq::socket_t>(*s->context_, zmq::socket_type::router);
    s->zap_->set(zmq::sockopt::linger, 0);
    s->zap_->bind(kZapEndpoint);
    s->control_ = std::make_unique<zmq::socket_t>(*s->context_, zmq::socket_type::pull);
    s->control_->set(zmq::sockopt::linger, 0);
    s->control_->bind(s->control_endpoint_);
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string("cannot start the ZAP handler at ") + kZapEndpoint + ": " +
                            e.what() + " (does this ZeroMQ context already have a ZAP handler?)");
  }
  // A second handler in the same context fails above: the ZAP endpoint is
  // taken.
  s->thread_ = std::thread([p = s.get()] { p->Run(); });
  return s;
}

Status SecurityConfig::SetJobToken(const std::string& token) {
  if (!ValidJobToken(token))
    return InvalidArgumentError("malformed job token (expected 32 hexadecimal digits)");
  {
    common::MutexLock lock(&token_mu_);
    if (!token_.empty() && token_ != token)
      return FailedPreconditionError("the job token is already set to another value");
    token_ = token;
  }
  WakeUp(context_, control_endpoint_);  // the held handshakes are judged now
  return Status::OK();
}

std::string SecurityConfig::job_token() const {
  common::MutexLock lock(&token_mu_);
  return token_;
}

void SecurityConfig::SealControlPlane(std::vector<std::string> joined_ids) const {
  common::MutexLock lock(&token_mu_);
  joined_ids_.clear();
  joined_ids_.insert(joined_ids.begin(), joined_ids.end());
  sealed_ = true;
}

bool SecurityConfig::RefusedBy(const std::string& endpoint) const {
  common::MutexLock lock(&token_mu_);
  return refused_by_.count(endpoint) > 0;
}

SecurityConfig::~SecurityConfig() {
  stop_.store(true);
  if (thread_.joinable()) {
    WakeUp(context_, control_endpoint_);
    thread_.join();
  }
  zap_.reset();
  control_.reset();
  monitors_.clear();
  common::MutexLock lock(&mu_);
  new_monitors_.clear();
}

void SecurityConfig::ConfigureServer(zmq::socket_t& socket, Plane plane) const {
  if (curve_) {
    socket.set(zmq::sockopt::curve_server, 1);
    SetKey(socket, ZMQ_CURVE_SECRETKEY, keys_.secret_key);
  } else {
    socket.set(zmq::sockopt::plain_server, 1);
    socket.set(zmq::sockopt::handshake_ivl, kDataHandshakeMs);
  }
  socket.set(zmq::sockopt::zap_domain,
             !curve_ && plane == Plane::kControl ? kZapControlDomain : kZapDomain);
  const int one = 1;
  // Best effort: a libzmq that does not know it still has our handler, which
  // lives as long as the socket.
  zmq_setsockopt(socket.handle(), kZapEnforceDomain, &one, sizeof(one));
  Watch(socket);
}

void SecurityConfig::ConfigureClient(zmq::socket_t& socket, Plane plane) const {
  if (curve_) {
    SetKey(socket, ZMQ_CURVE_SERVERKEY, keys_.public_key);
    SetKey(socket, ZMQ_CURVE_PUBLICKEY, keys_.public_key);
    SetKey(socket, ZMQ_CURVE_SECRETKEY, keys_.secret_key);
  } else if (plane == Plane::kControl) {
    // Its routing id, set before: what the coordinator knows this rank by.
    const std::string id = socket.get(zmq::sockopt::routing_id);
    if (id.empty()) {
      errno = EINVAL;
      throw zmq::error_t();
    }
    socket.set(zmq::sockopt::plain_username, kRankUser);
    socket.set(zmq::sockopt::plain_password, id);
  } else {
    const std::string token = job_token();
    if (token.empty()) {  // an empty password would mean no mechanism at all
      errno = EINVAL;
      throw zmq::error_t();
    }
    socket.set(zmq::sockopt::plain_username, kTokenUser);
    socket.set(zmq::sockopt::plain_password, token);
  }
  Watch(socket);
}

void SecurityConfig::Watch(zmq::socket_t& socket) const {
  const std::string endpoint = "inproc://geeps-curve-monitor-" +
                               std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
                               std::to_string(next_monitor_.fetch_add(1));
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), kMonitorEvents) != 0)
    throw zmq::error_t();
  // Connected here, before the socket binds or connects, so that no event is
  // lost; the handler thread adopts it (the mutex orders the hand-over).
  auto monitor = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::pair);
  monitor->set(zmq::sockopt::linger, 0);
  monitor->connect(endpoint);
  {
    common::MutexLock lock(&mu_);
    new_monitors_.push_back(std::move(monitor));
  }
  WakeUp(context_, control_endpoint_);
}

void SecurityConfig::Run() {
  std::vector<zmq::message_t> frames;
  std::vector<zmq::pollitem_t> items;
  while (!stop_.load()) {
    try {
      {
        common::MutexLock lock(&mu_);
        for (auto& m : new_monitors_) monitors_.push_back(std::move(m));
        new_monitors_.clear();
      }
      items.assign({{zap_->handle(), 0, ZMQ_POLLIN, 0}, {control_->handle(), 0, ZMQ_POLLIN, 0}});
      for (auto& m : monitors_) items.push_back({m->handle(), 0, ZMQ_POLLIN, 0});
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(500));
      if (items[1].revents & ZMQ_POLLIN) {
        zmq::message_t m;
        while (control_->recv(m, zmq::recv_flags::dontwait)) {
        }
        AnswerHeld();
      }
      if (items[0].revents & ZMQ_POLLIN) {
        while (TryRecvMultipart(*zap_, context_, &frames)) HandleZapRequest(frames);
      }
      std::vector<bool> stopped(monitors_.size(), false);
      bool any_stopped = false;
      for (size_t i = 0; i < monitors_.size(); ++i) {
        if (!(items[i + 2].revents & ZMQ_POLLIN)) continue;
        bool done = false;
        while (!done && TryRecvMultipart(*monitors_[i], context_, &frames))
          HandleMonitorEvent(frames, &done);
        stopped[i] = done;
        any_stopped = any_stopped || done;
      }
      if (any_stopped) {  // the watched socket is closed
        std::vector<std::unique_ptr<zmq::socket_t>> keep;
        for (size_t i = 0; i < monitors_.size(); ++i)
          if (!stopped[i]) keep.push_back(std::move(monitors_[i]));
        monitors_ = std::move(keep);
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      GEEPS_LOG(Error) << "CURVE ZAP handler: " << e.what();
    }
  }
}

// A ZAP request (RFC 27) through our ROUTER: [routing id, "", "1.0",
// request id, domain, address, identity, mechanism, credentials...].
void SecurityConfig::HandleZapRequest(std::vector<zmq::message_t>& frames) {
  size_t d = 0;
  while (d < frames.size() && frames[d].size() != 0) ++d;
  if (d == 0 || d + 7 > frames.size()) {
    GEEPS_LOG(Error) << "ZAP handler: malformed request dropped";
    return;
  }
  const zmq::message_t* body = frames.data() + d + 1;
  const size_t parts = frames.size() - d - 1;
  const std::string version = body[0].to_string();
  const std::string address = body[3].to_string();
  const std::string mechanism = body[5].to_string();
  bool admit = false;
  if (curve_) {
    admit =
        version == "1.0" && mechanism == "CURVE" && parts == 7 &&
        body[6].size() == allowed_client_key_.size() &&
        std::memcmp(body[6].data(), allowed_client_key_.data(), allowed_client_key_.size()) == 0;
  } else if (version == "1.0" && body[2].to_string() == kZapControlDomain) {
    std::string why;
    admit = JudgeControl(body, parts, &why);
    Reply(frames, d, admit);
    if (!admit)
      Reject("from " + (address.empty() ? std::string("a local peer") : address) +
                 " to the coordinator",
             why);
    return;
  } else if (version == "1.0") {
    const Verdict v = JudgeToken(body, parts);
    if (v == Verdict::kHold && held_.size() < kMaxHeldZapRequests) {
      held_.push_back(std::move(frames));
      frames.clear();
      return;
    }
    admit = v == Verdict::kAdmit;
  }
  Reply(frames, d, admit);
  if (!admit) {
    const std::string where =
        "from " + (address.empty() ? std::string("a local (ipc) peer") : address);
    if (curve_) {
      Reject(where, mechanism == "CURVE" ? "its CURVE key is not this job's key"
                                         : "security mechanism " + mechanism);
    } else {
      Reject(where, "it did not present this job's token (a process outside the job?)");
    }
  }
}

SecurityConfig::Verdict SecurityConfig::JudgeToken(const zmq::message_t* body, size_t parts) const {
  // PLAIN: [..., "PLAIN", user name, password].
  if (parts != 8 || body[5].to_string() != "PLAIN" || body[6].to_string() != kTokenUser)
    return Verdict::kDeny;
  const std::string token = job_token();
  if (token.empty()) return Verdict::kHold;
  if (body[7].size() != token.size()) return Verdict::kDeny;
  // In constant time: how long the comparison takes says nothing of the
  // token.
  const auto* given = static_cast<const unsigned char*>(body[7].data());
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ static_cast<unsigned char>(token[i]));
  return diff == 0 ? Verdict::kAdmit : Verdict::kDeny;
}

bool SecurityConfig::JudgeControl(const zmq::message_t* body, size_t parts,
                                  std::string* why) const {
  // PLAIN: [..., "PLAIN", user name, password = the rank's routing id].
  const std::string id = parts == 8 ? body[7].to_string() : "";
  const int rank = ParsePeerRoutingId(id);
  if (parts != 8 || body[5].to_string() != "PLAIN" || body[6].to_string() != kRankUser ||
      rank < 0) {
    *why = "it does not speak as a rank of a libgeeps job (a process outside the job?)";
    return false;
  }
  common::MutexLock lock(&token_mu_);
  if (!sealed_ || joined_ids_.count(id) > 0) return true;
  *why = "it claims rank " + std::to_string(rank) +
         ", but every rank of this job has joined and that is not how rank " +
         std::to_string(rank) + " joined (a second process started as rank " +
         std::to_string(rank) + ", or a process outside the job?)";
  return false;
}

void SecurityConfig::AnswerHeld() {
  if (held_.empty() || job_token().empty()) return;
  std::vector<std::vector<zmq::message_t>> held;
  held.swap(held_);
  for (auto& frames : held) HandleZapRequest(frames);
}

void SecurityConfig::Reply(std::vector<zmq::message_t>& frames, size_t d, bool admit) {
  const zmq::message_t* body = frames.data() + d + 1;
  std::vector<zmq::message_t> reply;
  for (size_t i = 0; i <= d; ++i) reply.emplace_back(frames[i].data(), frames[i].size());
  reply.emplace_back(std::string("1.0"));
  reply.emplace_back(body[1].data(), body[1].size());  // request id
  reply.emplace_back(std::string(admit ? "200" : "400"));
  reply.emplace_back(std::string(admit ? "OK" : "not a member of this job"));
  reply.emplace_back(std::string(admit ? "geeps-job" : ""));  // user id
  reply.emplace_back();                                       // metadata
  for (size_t i = 0; i < reply.size(); ++i)
    zap_->send(reply[i], i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

// A monitor event: [u16 event, u32 value] and the socket's endpoint.
void SecurityConfig::HandleMonitorEvent(std::vector<zmq::message_t>& frames, bool* stopped) {
  if (frames.size() != 2 || frames[0].size() != 6) return;
  uint16_t event = 0;
  uint32_t value = 0;
  std::memcpy(&event, frames[0].data(), sizeof(event));
  std::memcpy(&value, static_cast<const char*>(frames[0].data()) + 2, sizeof(value));
  if (event == ZMQ_EVENT_MONITOR_STOPPED) {
    *stopped = true;  // the socket closed, or a disconnect monitor took over
    return;
  }
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    // A server's ZAP handler said no (to a client of ours; on our servers
    // the denial is counted where it is made).
    common::MutexLock lock(&token_mu_);
    refused_by_.insert(frames[1].to_string());
    return;
  }
  NoteHandshakeFailure(event, value, frames[1].to_string());
}

void SecurityConfig::NoteHandshakeFailure(uint16_t event, uint32_t value,
                                          const std::string& endpoint) const {
  const std::string where = "on " + endpoint;
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      Reject(where, ProtocolErrorText(value, curve_));
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      Reject(where, std::string(curve_ ? "the CURVE" : "the job token's") + " handshake failed (" +
                        ErrnoText(static_cast<int>(value)) + ")");
      break;
    default:
      break;
  }
}

void SecurityConfig::Reject(const std::string& where, const std::string& why) const {
  rejected_.fetch_add(1);
  common::MutexLock lock(&log_mu_);
  if (logged_.size() < kMaxLoggedPeers && logged_.insert(where).second) {
    GEEPS_LOG(Warning) << (curve_ ? "CURVE" : "job token") << ": rejected a connection " << where
                       << ": " << why << " (further rejections there are only counted)";
  }
}

// ---- helpers -----------------------------------------------------------------

void ConfigureSecureServer(zmq::socket_t& socket, const SecurityConfig* security, Plane plane) {
  if (security) security->ConfigureServer(socket, plane);
}

void ConfigureSecureClient(zmq::socket_t& socket, const SecurityConfig* security, Plane plane) {
  if (security) security->ConfigureClient(socket, plane);
}

std::string RejectionHint(const SecurityConfig* security) {
  if (!security || !security->curve() || security->rejected_connections() == 0) return "";
  return "; " + std::to_string(security->rejected_connections()) +
         " connection attempts failed CURVE authentication here (does every rank use the same "
         "GEEPS_CURVE_KEYS key file?)";
}

}  // namespace geeps::transport

namespace geeps {

StatusOr<std::string> WriteNewCurveKeyFile(const std::string& path, bool overwrite) {
  GEEPS_ASSIGN_OR_RETURN(transport::CurveKeys keys, transport::NewCurveKeys());
  GEEPS_RETURN_IF_ERROR(transport::WriteCurveKeyFile(path, keys, overwrite));
  return keys.public_key;
}

}  // namespace geeps
