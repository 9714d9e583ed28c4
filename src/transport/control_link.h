// The control plane's message layer: messages of one text frame each,
// between the coordinator (rank 0) and the other ranks of a job.
//
// A ControlLink is one end: the coordinator's receives from many senders,
// each named by its routing id (ControlMessage::from), and sends to one of
// them by that id; a rank's has one peer, the coordinator, and leaves the
// names empty. Sends never block: a message that cannot go (its peer gone,
// its queue full) is dropped, because the heartbeats above report a peer
// that is gone. Receives never block either; Wait blocks until a message
// is queued, another thread calls Wake, or a time limit passes.
//
// Two kinds of link implement it: ZeroMQ's (BindControlLink and
// ConnectControlLink below: a ROUTER and a DEALER, CURVE when the job has
// keys) and an in-memory one (memory_link.h), which tests drive message by
// message to drop, duplicate, reorder and delay what the protocol sends.
#ifndef GEEPS_TRANSPORT_CONTROL_LINK_H_
#define GEEPS_TRANSPORT_CONTROL_LINK_H_

#include <chrono>
#include <memory>
#include <string>

#include "geeps/status.h"
#include "transport/context.h"

namespace geeps::transport {

class SecurityConfig;

struct ControlMessage {
  std::string from;  // the sender's routing id at a coordinator's link; "" at a rank's
  std::string text;  // the message's one frame
  // False for a message that is not one frame (beside the routing id):
  // `text` is then empty and the receiver drops it.
  bool one_frame = true;
};

class ControlLink {
 public:
  virtual ~ControlLink() = default;
  // Sends `text` to the sender named `to` (a coordinator's link), or to the
  // one peer (a rank's link, which ignores `to`). Never blocks or throws.
  virtual void Send(const std::string& to, const std::string& text) = 0;
  // The next queued message, without waiting; false when none is queued
  // (or the link has failed: status()).
  virtual bool TryReceive(ControlMessage* m) = 0;
  // Blocks until a message is queued, Wake is called (by any thread; a
  // Wake with nobody waiting ends the next Wait), or `limit` passes.
  virtual void Wait(std::chrono::milliseconds limit) = 0;
  virtual void Wake() = 0;
  // OK, or why the link stopped working (its context closed): then no
  // receive returns a message again.
  virtual Status status() const = 0;
};

// ZeroMQ's links. The coordinator's: a ROUTER bound at `endpoint`
// (kUnavailable "cannot bind the coordinator at <endpoint>: <cause>" when
// the port is taken). A rank's: a DEALER connected to `endpoint` with
// `routing_id`. `security` (null: none) makes either CURVE.
StatusOr<std::unique_ptr<ControlLink>> BindControlLink(Context& context,
                                                       const std::string& endpoint,
                                                       const SecurityConfig* security);
StatusOr<std::unique_ptr<ControlLink>> ConnectControlLink(Context& context,
                                                          const std::string& endpoint,
                                                          const std::string& routing_id,
                                                          const SecurityConfig* security);

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_CONTROL_LINK_H_
