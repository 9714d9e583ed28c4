#include "transport/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "common/file_util.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "geeps/process.h"
#include "transport/socket_util.h"

namespace geeps::transport {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapDomain = "geeps";
// ZMQ_ZAP_ENFORCE_DOMAIN (a draft option in libzmq 4.3's header, honoured by
// the library): with a ZAP domain set, a CURVE server refuses every client
// when no ZAP handler answers, instead of admitting all of them.
constexpr int kZapEnforceDomain = 93;
constexpr size_t kMaxKeyFileBytes = 64 * 1024;
constexpr size_t kMaxLoggedPeers = 256;
constexpr int kMonitorEvents = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
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

std::string ProtocolErrorText(uint32_t value) {
  switch (value) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return "the peer does not use CURVE (security mechanism mismatch)";
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

SecurityConfig::SecurityConfig(zmq::context_t* context, CurveKeys keys)
    : context_(context),
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
  std::unique_ptr<SecurityConfig> s(new SecurityConfig(context, std::move(job_keys)));
  s->allowed_client_key_.resize(32);
  zmq_z85_decode(s->allowed_client_key_.data(), s->keys_.public_key.c_str());
  try {
    s->zap_ = std::make_unique<zmq::socket_t>(*context, zmq::socket_type::router);
    s->zap_->set(zmq::sockopt::linger, 0);
    s->zap_->bind(kZapEndpoint);
    s->control_ = std::make_unique<zmq::socket_t>(*context, zmq::socket_type::pull);
    s->control_->set(zmq::sockopt::linger, 0);
    s->control_->bind(s->control_endpoint_);
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string("cannot start the CURVE ZAP handler at ") + kZapEndpoint +
                            ": " + e.what() +
                            " (does this ZeroMQ context already have a ZAP handler?)");
  }
  // A second handler in the same context fails above: the ZAP endpoint is
  // taken.
  s->thread_ = std::thread([p = s.get()] { p->Run(); });
  return s;
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

void SecurityConfig::ConfigureServer(zmq::socket_t& socket) const {
  socket.set(zmq::sockopt::curve_server, 1);
  SetKey(socket, ZMQ_CURVE_SECRETKEY, keys_.secret_key);
  socket.set(zmq::sockopt::zap_domain, kZapDomain);
  const int one = 1;
  // Best effort: a libzmq that does not know it still has our handler, which
  // lives as long as the socket.
  zmq_setsockopt(socket.handle(), kZapEnforceDomain, &one, sizeof(one));
  Watch(socket);
}

void SecurityConfig::ConfigureClient(zmq::socket_t& socket) const {
  SetKey(socket, ZMQ_CURVE_SERVERKEY, keys_.public_key);
  SetKey(socket, ZMQ_CURVE_PUBLICKEY, keys_.public_key);
  SetKey(socket, ZMQ_CURVE_SECRETKEY, keys_.secret_key);
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
    GEEPS_LOG(Error) << "CURVE ZAP handler: malformed request dropped";
    return;
  }
  const zmq::message_t* body = frames.data() + d + 1;
  const size_t parts = frames.size() - d - 1;
  const std::string version = body[0].to_string();
  const std::string address = body[3].to_string();
  const std::string mechanism = body[5].to_string();
  const bool admit =
      version == "1.0" && mechanism == "CURVE" && parts == 7 &&
      body[6].size() == allowed_client_key_.size() &&
      std::memcmp(body[6].data(), allowed_client_key_.data(), allowed_client_key_.size()) == 0;
  std::vector<zmq::message_t> reply;
  for (size_t i = 0; i <= d; ++i) reply.emplace_back(frames[i].data(), frames[i].size());
  reply.emplace_back(std::string("1.0"));
  reply.emplace_back(body[1].data(), body[1].size());  // request id
  reply.emplace_back(std::string(admit ? "200" : "400"));
  reply.emplace_back(std::string(admit ? "OK" : "not a key of this job"));
  reply.emplace_back(std::string(admit ? "geeps-job" : ""));  // user id
  reply.emplace_back();                                       // metadata
  for (size_t i = 0; i < reply.size(); ++i)
    zap_->send(reply[i], i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  if (!admit) {
    Reject("from " + (address.empty() ? std::string("a local (ipc) peer") : address),
           mechanism == "CURVE" ? "its CURVE key is not this job's key"
                                : "security mechanism " + mechanism);
  }
}

// A monitor event: [u16 event, u32 value] and the socket's endpoint.
void SecurityConfig::HandleMonitorEvent(std::vector<zmq::message_t>& frames, bool* stopped) {
  if (frames.size() != 2 || frames[0].size() != 6) return;
  uint16_t event = 0;
  uint32_t value = 0;
  std::memcpy(&event, frames[0].data(), sizeof(event));
  std::memcpy(&value, static_cast<const char*>(frames[0].data()) + 2, sizeof(value));
  const std::string where = "on " + frames[1].to_string();
  switch (event) {
    case ZMQ_EVENT_MONITOR_STOPPED:
      *stopped = true;
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      Reject(where, ProtocolErrorText(value));
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      Reject(where, "the CURVE handshake failed (" + ErrnoText(static_cast<int>(value)) + ")");
      break;
    default:
      break;
  }
}

void SecurityConfig::Reject(const std::string& where, const std::string& why) {
  rejected_.fetch_add(1);
  if (logged_.size() < kMaxLoggedPeers && logged_.insert(where).second) {
    GEEPS_LOG(Warning) << "CURVE: rejected a connection " << where << ": " << why
                       << " (further rejections there are only counted)";
  }
}

// ---- helpers -----------------------------------------------------------------

void ConfigureCurveServer(zmq::socket_t& socket, const SecurityConfig* security) {
  if (security) security->ConfigureServer(socket);
}

void ConfigureCurveClient(zmq::socket_t& socket, const SecurityConfig* security) {
  if (security) security->ConfigureClient(socket);
}

std::string RejectionHint(const SecurityConfig* security) {
  if (!security || security->rejected_connections() == 0) return "";
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
