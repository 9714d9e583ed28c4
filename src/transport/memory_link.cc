#include "transport/memory_link.h"

#include <utility>

namespace geeps::transport {

class MemoryNetwork::Link final : public ControlLink {
 public:
  Link(MemoryNetwork* net, std::string name) : net_(net), name_(std::move(name)) {}
  ~Link() override { net_->Close(name_, this); }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  void Send(const std::string& to, const std::string& text) override {
    net_->Send(name_, to, text);
  }
  bool TryReceive(ControlMessage* m) override { return net_->TryReceive(name_, m); }
  void Wait(std::chrono::milliseconds limit) override { net_->Wait(name_, limit); }
  void Wake() override { net_->Wake(name_); }
  Status status() const override { return Status::OK(); }

 private:
  MemoryNetwork* const net_;
  const std::string name_;
};

std::unique_ptr<ControlLink> MemoryNetwork::Open(const std::string& name, const std::string& peer) {
  auto link = std::make_unique<Link>(this, name);
  common::MutexLock lock(&mu_);
  Box& box = boxes_[name];
  box = Box{};
  box.peer = peer;
  box.owner = link.get();
  return link;
}

void MemoryNetwork::Close(const std::string& name, const Link* link) {
  common::MutexLock lock(&mu_);
  auto it = boxes_.find(name);
  if (it != boxes_.end() && it->second.owner == link) boxes_.erase(it);
}

void MemoryNetwork::set_deliver_at_once(bool at_once) {
  common::MutexLock lock(&mu_);
  at_once_ = at_once;
}

void MemoryNetwork::Send(const std::string& from, const std::string& to, const std::string& text) {
  common::MutexLock lock(&mu_);
  auto it = boxes_.find(from);
  const std::string& receiver =
      it != boxes_.end() && !it->second.peer.empty() ? it->second.peer : to;
  Message m{from, receiver, text};
  if (at_once_) {
    DeliverLocked(m);
  } else {
    in_flight_.push_back(std::move(m));
  }
}

void MemoryNetwork::DeliverLocked(const Message& m) {
  ++delivered_;
  auto it = boxes_.find(m.to);
  if (it == boxes_.end()) return;  // nobody there: the message vanishes
  Box& box = it->second;
  box.inbox.push_back(ControlMessage{box.peer.empty() ? m.from : "", m.text, true});
  cv_.notify_all();
}

bool MemoryNetwork::TryReceive(const std::string& name, ControlMessage* m) {
  common::MutexLock lock(&mu_);
  auto it = boxes_.find(name);
  if (it == boxes_.end() || it->second.inbox.empty()) return false;
  *m = std::move(it->second.inbox.front());
  it->second.inbox.pop_front();
  return true;
}

void MemoryNetwork::Wait(const std::string& name, std::chrono::milliseconds limit) {
  common::MutexLock lock(&mu_);
  lock.WaitFor(cv_, limit, [&]() GEEPS_REQUIRES(mu_) {
    auto it = boxes_.find(name);
    return it == boxes_.end() || !it->second.inbox.empty() || it->second.woken;
  });
  auto it = boxes_.find(name);
  if (it != boxes_.end()) it->second.woken = false;
}

void MemoryNetwork::Wake(const std::string& name) {
  common::MutexLock lock(&mu_);
  auto it = boxes_.find(name);
  if (it != boxes_.end()) it->second.woken = true;
  cv_.notify_all();
}

std::vector<MemoryNetwork::Message> MemoryNetwork::InFlight() const {
  common::MutexLock lock(&mu_);
  return {in_flight_.begin(), in_flight_.end()};
}

size_t MemoryNetwork::in_flight() const {
  common::MutexLock lock(&mu_);
  return in_flight_.size();
}

bool MemoryNetwork::Deliver(size_t index) {
  common::MutexLock lock(&mu_);
  if (index >= in_flight_.size()) return false;
  const Message m = in_flight_[index];
  in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(index));
  DeliverLocked(m);
  return true;
}

bool MemoryNetwork::Drop(size_t index) {
  common::MutexLock lock(&mu_);
  if (index >= in_flight_.size()) return false;
  in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(index));
  ++dropped_;
  return true;
}

bool MemoryNetwork::Duplicate(size_t index) {
  common::MutexLock lock(&mu_);
  if (index >= in_flight_.size()) return false;
  const Message copy = in_flight_[index];
  in_flight_.insert(in_flight_.begin() + static_cast<std::ptrdiff_t>(index) + 1, copy);
  return true;
}

void MemoryNetwork::DeliverAll(bool reversed) {
  common::MutexLock lock(&mu_);
  std::deque<Message> all;
  all.swap(in_flight_);
  if (reversed) {
    for (auto it = all.rbegin(); it != all.rend(); ++it) DeliverLocked(*it);
  } else {
    for (const Message& m : all) DeliverLocked(m);
  }
}

int64_t MemoryNetwork::delivered() const {
  common::MutexLock lock(&mu_);
  return delivered_;
}

int64_t MemoryNetwork::dropped() const {
  common::MutexLock lock(&mu_);
  return dropped_;
}

}  // namespace geeps::transport
