// What a receiver does with a frame it cannot use (malformed, unexpected,
// out of sequence, from a stranger): drop it, count it, and log why the
// first time for each kind of drop; later drops of that kind are only
// counted. So a peer or a stranger that sends garbage never floods the log
// and nothing it sends is fatal (docs/architecture.md, "Errors"). The
// worker's channels, the shards and the machine relays each keep one.
//
// Threads: Drop() from the one thread that receives; the counter may be
// read from any thread.
#ifndef GEEPS_TRANSPORT_DROP_LOG_H_
#define GEEPS_TRANSPORT_DROP_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

namespace geeps::transport {

class DropLog {
 public:
  static constexpr unsigned kKinds = 32;

  // `who` names the receiver in the log ("worker 3 channel 0"); `counter`
  // (outlives the log) counts every drop.
  DropLog(std::string who, std::atomic<int64_t>* counter)
      : who_(std::move(who)), counter_(counter) {}

  // Counts a drop of `kind` (< kKinds: the kinds this receiver tells apart;
  // larger ones count as the last) because of `what`, and logs it if it is
  // the first of its kind. Returns false, for handlers that return it.
  bool Drop(const std::string& what, unsigned kind = 0);
  // Whether a drop of `kind` was logged.
  bool logged(unsigned kind = 0) const;

 private:
  const std::string who_;
  std::atomic<int64_t>* const counter_;
  uint32_t logged_ = 0;  // bit k: a drop of kind k was logged
};

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_DROP_LOG_H_
