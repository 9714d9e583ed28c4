#include "transport/control_link.h"

#include <unistd.h>

#include <utility>
#include <vector>
#include <zmq.hpp>

#include "transport/socket_util.h"
#include "transport/sockets.h"

namespace geeps::transport {
namespace {

// A ROUTER (the coordinator's) or a DEALER (a rank's), and an eventfd that
// Wake signals and Wait polls beside the socket.
class ZmqControlLink final : public ControlLink {
 public:
  ZmqControlLink(Context& context, SocketPtr socket, bool router, int wake_fd)
      : context_(context), socket_(std::move(socket)), router_(router), wake_fd_(wake_fd) {}
  ~ZmqControlLink() override {
    socket_.reset();
    ::close(wake_fd_);
  }
  ZmqControlLink(const ZmqControlLink&) = delete;
  ZmqControlLink& operator=(const ZmqControlLink&) = delete;

  void Send(const std::string& to, const std::string& text) override {
    try {
      if (router_) socket_->send(zmq::buffer(to), zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(text), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // A peer that is gone: the heartbeats report it.
    }
  }

  bool TryReceive(ControlMessage* m) override {
    if (!status_.ok()) return false;
    try {
      if (!TryRecvMultipart(*socket_, &context_, &frames_)) return false;
    } catch (const zmq::error_t& e) {
      Fail(e);
      return false;
    }
    m->from = router_ && !frames_.empty() ? frames_[0].to_string() : "";
    m->one_frame = frames_.size() == (router_ ? 2u : 1u);
    m->text = m->one_frame ? frames_.back().to_string() : "";
    return true;
  }

  void Wait(std::chrono::milliseconds limit) override {
    if (!status_.ok()) return;
    zmq::pollitem_t items[2] = {{socket_->handle(), 0, ZMQ_POLLIN, 0},
                                {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, limit);
    } catch (const zmq::error_t& e) {
      Fail(e);
      return;
    }
    if (items[1].revents & ZMQ_POLLIN) ClearWakeFd(wake_fd_);
  }

  void Wake() override { SignalWakeFd(wake_fd_); }

  Status status() const override { return status_; }

 private:
  void Fail(const zmq::error_t& e) {
    status_ = UnavailableError(std::string("the control link failed: ") + e.what());
  }

  Context& context_;
  SocketPtr socket_;
  const bool router_;
  const int wake_fd_;
  std::vector<zmq::message_t> frames_;
  Status status_;
};

StatusOr<std::unique_ptr<ControlLink>> MakeLink(Context& context, StatusOr<SocketPtr> socket,
                                                bool router) {
  if (!socket.ok()) return socket.status();
  GEEPS_ASSIGN_OR_RETURN(const int wake_fd, NewWakeFd("the control link"));
  return std::unique_ptr<ControlLink>(
      std::make_unique<ZmqControlLink>(context, std::move(socket).value(), router, wake_fd));
}

}  // namespace

StatusOr<std::unique_ptr<ControlLink>> BindControlLink(Context& context,
                                                       const std::string& endpoint,
                                                       const SecurityConfig* security) {
  return MakeLink(context, BindControlRouter(context, endpoint, security), true);
}

StatusOr<std::unique_ptr<ControlLink>> ConnectControlLink(Context& context,
                                                          const std::string& endpoint,
                                                          const std::string& routing_id,
                                                          const SecurityConfig* security) {
  return MakeLink(context, ConnectControlDealer(context, endpoint, routing_id, security), false);
}

}  // namespace geeps::transport
