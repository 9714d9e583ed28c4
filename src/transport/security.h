// Optional CURVE authentication and encryption of a multi-process job's
// tcp:// and ipc:// sockets (docs/security.md).
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
#include <zmq.hpp>

#include "common/mutex.h"
#include "geeps/status.h"

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

// The CURVE setup of one process: the job key, the ZAP handler thread of one
// ZeroMQ context, and the count of rejected connections. Passed down as
// `const SecurityConfig*` (null: CURVE off) to the code that makes sockets.
// Must outlive every socket it configured (Process destroys it just before
// the ZeroMQ context).
class SecurityConfig {
 public:
  // Binds the ZAP handler (inproc://zeromq.zap.01) in `context`, starts its
  // thread.
  // kFailedPrecondition without CURVE support in libzmq; kUnavailable if the
  // context already has a ZAP handler.
  static StatusOr<std::unique_ptr<SecurityConfig>> Start(zmq::context_t* context,
                                                         CurveKeys job_keys);
  ~SecurityConfig();  // unregisters, stops the thread
  SecurityConfig(const SecurityConfig&) = delete;
  SecurityConfig& operator=(const SecurityConfig&) = delete;

  const CurveKeys& keys() const { return keys_; }
  // Connection attempts refused so far: clients the ZAP handler denied, and
  // handshakes that failed on a secured socket (a peer without CURVE, with
  // another job's key, or not speaking ZeroMQ).
  int64_t rejected_connections() const { return rejected_.load(); }

  // Configure a socket before its bind (server) or connect (client), on the
  // thread that owns it, and watch it for failed handshakes. Throw
  // zmq::error_t like cppzmq.
  void ConfigureServer(zmq::socket_t& socket) const;
  void ConfigureClient(zmq::socket_t& socket) const;

 private:
  SecurityConfig(zmq::context_t* context, CurveKeys keys);
  void Watch(zmq::socket_t& socket) const;
  void Run();
  void HandleZapRequest(std::vector<zmq::message_t>& frames);
  void HandleMonitorEvent(std::vector<zmq::message_t>& frames, bool* stopped);
  void Reject(const std::string& where, const std::string& why);

  zmq::context_t* const context_;
  const CurveKeys keys_;
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
  std::set<std::string> logged_;                          // the thread's
  std::atomic<int64_t> rejected_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The calls the socket-setup code makes: no-ops when `security` is null.
void ConfigureCurveServer(zmq::socket_t& socket, const SecurityConfig* security);
void ConfigureCurveClient(zmq::socket_t& socket, const SecurityConfig* security);

// "" without CURVE or rejections; else a sentence for a rendezvous timeout
// ("; N connection attempts failed CURVE authentication: ...").
std::string RejectionHint(const SecurityConfig* security);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_SECURITY_H_
