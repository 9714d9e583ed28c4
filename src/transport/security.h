// Who may connect to a multi-process job's tcp:// and ipc:// sockets
// (docs/security.md).
//
// Without a key file (token mode), ZeroMQ's PLAIN mechanism, checked by the
// ZAP handler below:
//  * the data plane (shard ROUTERs, workers' and relays' DEALERs) admits
//    only connections that present the job token: a random secret rank 0
//    makes at the rendezvous and sends to every rank in its WELCOME;
//  * the coordinator's port admits, during the rendezvous, connections that
//    name a rank (their routing id, "r<rank>.<nonce>"), and once every rank
//    has joined only those ranks' own (SealControlPlane).
// So after the rendezvous a process outside the job never gets a frame past
// a handshake: it can neither claim a worker's routing id nor make a
// process hold its messages.
//
// With a key file, CURVE authentication and encryption of every tcp:// and
// ipc:// socket, the control plane's too:
//
// One key pair per job (the "job key"), in a key file written by
// geeps_keygen and given to every process (ProcessOptions::curve_key_file or
// GEEPS_CURVE_KEYS). Every socket that binds (shard ROUTERs, the
// coordinator's ROUTER) is a CURVE server with the job's secret key; every
// socket that connects (workers' DEALERs, a rank's DEALER to the
// coordinator) is a CURVE client with the job key pair as its own key and the
// job's public key as the server's. A ZAP handler in each process's ZeroMQ
// context admits only clients that prove they hold the job's secret key
// (their public key is the job's); anything else is refused, counted and
// logged once per peer address. inproc:// sockets stay plain.
//
// Key file (text, mode 0600, owner only):
//   # libgeeps CURVE job key (geeps_keygen) ...   lines starting with '#'
//   public-key <40 Z85 characters>
//   secret-key <40 Z85 characters>
#ifndef GEEPS_TRANSPORT_SECURITY_H_
#define GEEPS_TRANSPORT_SECURITY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "geeps/status.h"
#include "transport/context.h"
#include "transport/routing_id.h"  // NewJobToken, ValidJobToken

namespace zmq {
class context_t;
class message_t;
class socket_t;
}  // namespace zmq

namespace geeps::transport {

inline constexpr size_t kZ85KeyChars = 40;  // a 32-byte CURVE key in Z85

struct CurveKeys {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// A new random key pair (libzmq's zmq_curve_keypair). kFailedPrecondition
// when libzmq has no CURVE support.
StatusOr<CurveKeys> NewCurveKeys();

// Checks a pair: both keys 40 valid Z85 characters, the public key derived
// from the secret one. kInvalidArgument otherwise (`what` names the source).
Status CheckCurveKeys(const CurveKeys& keys, const std::string& what);

// Writes a key file with mode 0600. An existing file is kFailedPrecondition
// unless `overwrite` (then it is replaced atomically, mode 0600 again).
Status WriteCurveKeyFile(const std::string& path, const CurveKeys& keys, bool overwrite);

// Reads and checks a key file. Errors name the path: kNotFound (no such
// file), kInvalidArgument (not a regular file, group or others have any
// access to it, unreadable, malformed, keys that do not match).
StatusOr<CurveKeys> ReadCurveKeyFile(const std::string& path);

// Which of a job's sockets a setting is for.
enum class Plane {
  kData,     // shard ROUTERs, workers' and relays' DEALERs
  kControl,  // the coordinator's ROUTER, each rank's DEALER to it
};

// The security setup of one process: CURVE with the job key, or the job
// token; the ZAP handler thread of one ZeroMQ context; the count of refused
// connections. Passed down as `const SecurityConfig*` (null: nothing, as in
// an EmbeddedCluster, whose sockets are inproc://) to the code that makes
// sockets. Must outlive every socket it configured (Process destroys it
// just before the ZeroMQ context).
class SecurityConfig {
 public:
  // Binds the ZAP handler (inproc://zeromq.zap.01) in `context`, starts its
  // thread. With `job_keys`: CURVE. kFailedPrecondition without CURVE
  // support in libzmq; kUnavailable if the context already has a ZAP
  // handler.
  static StatusOr<std::unique_ptr<SecurityConfig>> Start(zmq::context_t* context,
                                                         CurveKeys job_keys);
  // Without keys: the data plane admits holders of the job token
  // (SetJobToken), the control plane the ranks (SealControlPlane).
  static StatusOr<std::unique_ptr<SecurityConfig>> StartWithToken(zmq::context_t* context);
  ~SecurityConfig();  // unregisters, stops the thread
  SecurityConfig(const SecurityConfig&) = delete;
  SecurityConfig& operator=(const SecurityConfig&) = delete;

  bool curve() const { return curve_; }
  const CurveKeys& keys() const { return keys_; }  // empty without CURVE

  // The job token (token mode; ignored with CURVE), once, when this process
  // learns it: rank 0 before it sends WELCOME, the others from it. A data
  // connection whose handshake comes before is held (at most
  // kMaxHeldZapRequests of them; later ones are refused) and judged then.
  // kInvalidArgument for a malformed token, kFailedPrecondition for a
  // second, different one.
  Status SetJobToken(const std::string& token);
  std::string job_token() const;  // "" until set

  // Token mode, rank 0, once every rank has joined: from now on the
  // coordinator's port admits only the connections of those ranks (each
  // presents its routing id, whose nonce only it and rank 0 know), so a
  // process outside the job, or a late one, gets no frame to the
  // coordinator. Until then anyone who names a rank gets in (the
  // rendezvous). Thread-safe.
  void SealControlPlane(std::vector<std::string> joined_ids) const;
  // Whether a server refused a handshake of this process's socket
  // connected to `endpoint` (as given to connect): its ZAP handler said no
  // (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH). Thread-safe.
  bool RefusedBy(const std::string& endpoint) const;
  // Connection attempts refused so far: clients the ZAP handler denied, and
  // handshakes that failed on a secured socket (a peer without CURVE, with
  // another job's key, or not speaking ZeroMQ).
  int64_t rejected_connections() const { return rejected_.load(); }

  // A handshake of a watched socket failed (a socket monitor's
  // ZMQ_EVENT_HANDSHAKE_FAILED_* `event` with its `value`, on `endpoint`):
  // counted as a refused connection and logged once per endpoint. Called
  // by this handler's monitors and by the disconnect monitor that replaces
  // one (ZeroMQ keeps one monitor per socket: socket_util.h,
  // CountDisconnects). Thread-safe.
  void NoteHandshakeFailure(uint16_t event, uint32_t value, const std::string& endpoint) const;

  // Configure a socket of `plane` before its bind (server) or connect
  // (client), on the thread that owns it, and watch it for failed
  // handshakes. Throw zmq::error_t like cppzmq (EINVAL: a data-plane client
  // in token mode before the token is known).
  void ConfigureServer(zmq::socket_t& socket, Plane plane) const;
  void ConfigureClient(zmq::socket_t& socket, Plane plane) const;

  // The most data-plane handshakes held while the token is not yet known.
  static constexpr size_t kMaxHeldZapRequests = 256;

 private:
  SecurityConfig(zmq::context_t* context, bool curve, CurveKeys keys);
  static StatusOr<std::unique_ptr<SecurityConfig>> StartHandler(std::unique_ptr<SecurityConfig> s);
  void Watch(zmq::socket_t& socket) const;
  void Run();
  void HandleZapRequest(std::vector<zmq::message_t>& frames);
  // Token mode: the verdict on a PLAIN request, or "hold" (no token yet).
  enum class Verdict { kAdmit, kDeny, kHold };
  Verdict JudgeToken(const zmq::message_t* body, size_t parts) const;
  // Token mode, the coordinator's port: whether to admit a rank's
  // connection (PLAIN, its routing id as the password); `why` says why not.
  bool JudgeControl(const zmq::message_t* body, size_t parts, std::string* why) const;
  void Reply(std::vector<zmq::message_t>& frames, size_t delimiter, bool admit);
  void AnswerHeld();
  void HandleMonitorEvent(std::vector<zmq::message_t>& frames, bool* stopped);
  void Reject(const std::string& where, const std::string& why) const;

  zmq::context_t* const context_;
  const bool curve_;
  const CurveKeys keys_;
  mutable common::Mutex token_mu_;
  std::string token_ GEEPS_GUARDED_BY(token_mu_);
  mutable bool sealed_ GEEPS_GUARDED_BY(token_mu_) = false;
  mutable std::set<std::string> joined_ids_ GEEPS_GUARDED_BY(token_mu_);
  mutable std::set<std::string> refused_by_ GEEPS_GUARDED_BY(token_mu_);
  // Token mode: ZAP requests that came before the token (the thread's).
  std::vector<std::vector<zmq::message_t>> held_;
  std::vector<uint8_t> allowed_client_key_;  // 32 bytes: the job's public key
  const std::string control_endpoint_;
  std::unique_ptr<zmq::socket_t> zap_;      // ROUTER, the thread's
  std::unique_ptr<zmq::socket_t> control_;  // PULL, the thread's
  // Monitor sockets made by Watch() on other threads, not yet adopted by the
  // handler thread.
  mutable common::Mutex mu_;
  mutable std::vector<std::unique_ptr<zmq::socket_t>> new_monitors_ GEEPS_GUARDED_BY(mu_);
  mutable std::atomic<uint64_t> next_monitor_{0};
  std::vector<std::unique_ptr<zmq::socket_t>> monitors_;  // the thread's
  mutable common::Mutex log_mu_;
  mutable std::set<std::string> logged_ GEEPS_GUARDED_BY(log_mu_);  // where a rejection was logged
  mutable std::atomic<int64_t> rejected_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The calls the socket-setup code makes: no-ops when `security` is null.
void ConfigureSecureServer(zmq::socket_t& socket, const SecurityConfig* security, Plane plane);
void ConfigureSecureClient(zmq::socket_t& socket, const SecurityConfig* security, Plane plane);

// "" without CURVE or CURVE rejections; else a sentence for a rendezvous timeout
// ("; N connection attempts failed CURVE authentication: ...").
std::string RejectionHint(const SecurityConfig* security);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_SECURITY_H_
