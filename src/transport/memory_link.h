// An in-memory control network, for tests: links of the ControlLink
// interface (control_link.h) whose messages wait in the network until the
// test delivers, drops, duplicates or reorders them, one by one, so that a
// protocol participant runs deterministically under exactly the faults a
// case names. With deliver_at_once, every send arrives at once instead (in
// order), for threads that run the protocol as they would over ZeroMQ.
//
// Names: each link has one (its routing id, as its receivers see it). A
// coordinator's link (Open with no peer) receives messages with `from` =
// the sender's name and sends to a name; a rank's link (Open with the
// coordinator's name as its peer) sends to that peer whatever `to` says and
// receives with `from` empty, as over ZeroMQ. A message to a name with no
// open link vanishes when delivered, like ZeroMQ's to a peer that is gone.
// Thread-safe; every link must be closed (destroyed) before the network.
#ifndef GEEPS_TRANSPORT_MEMORY_LINK_H_
#define GEEPS_TRANSPORT_MEMORY_LINK_H_

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "transport/control_link.h"

namespace geeps::transport {

class MemoryNetwork {
 public:
  struct Message {
    std::string from;  // the sender's name
    std::string to;    // the receiver's name
    std::string text;
  };

  MemoryNetwork() = default;
  MemoryNetwork(const MemoryNetwork&) = delete;
  MemoryNetwork& operator=(const MemoryNetwork&) = delete;

  // Opens the link `name` (a name already open: the new link replaces the
  // old one's queue, as a restarted process would).
  std::unique_ptr<ControlLink> Open(const std::string& name, const std::string& peer = "");

  void set_deliver_at_once(bool at_once);
  // The messages sent and not yet delivered or dropped, oldest first.
  std::vector<Message> InFlight() const;
  size_t in_flight() const;
  // The message at `index` of InFlight() reaches its receiver (Deliver),
  // is lost (Drop), or is sent twice (Duplicate: a copy right behind it).
  // An index out of range changes nothing and returns false.
  bool Deliver(size_t index);
  bool Drop(size_t index);
  bool Duplicate(size_t index);
  // Delivers every message in flight, oldest first (newest first with
  // `reversed`).
  void DeliverAll(bool reversed = false);
  // Messages delivered and dropped so far.
  int64_t delivered() const;
  int64_t dropped() const;

 private:
  class Link;
  struct Box {
    std::string peer;  // a rank's link: its coordinator's name
    std::deque<ControlMessage> inbox;
    bool woken = false;
    const Link* owner = nullptr;
  };

  void Send(const std::string& from, const std::string& to, const std::string& text);
  bool TryReceive(const std::string& name, ControlMessage* m);
  void Wait(const std::string& name, std::chrono::milliseconds limit);
  void Wake(const std::string& name);
  void Close(const std::string& name, const Link* link);
  void DeliverLocked(const Message& m) GEEPS_REQUIRES(mu_);

  mutable common::Mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Box> boxes_ GEEPS_GUARDED_BY(mu_);
  std::deque<Message> in_flight_ GEEPS_GUARDED_BY(mu_);
  bool at_once_ GEEPS_GUARDED_BY(mu_) = false;
  int64_t delivered_ GEEPS_GUARDED_BY(mu_) = 0;
  int64_t dropped_ GEEPS_GUARDED_BY(mu_) = 0;
};

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_MEMORY_LINK_H_
