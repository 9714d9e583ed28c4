#include "transport/socket_util.h"

#include "transport/tsan.h"

namespace geeps::transport {

bool TryRecvMultipart(zmq::socket_t& socket, zmq::context_t* context,
                      std::vector<zmq::message_t>* frames) {
  frames->clear();
  for (bool more = true; more;) {
    zmq::message_t msg;
    auto r = socket.recv(msg, frames->empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!r) return !frames->empty();
    more = msg.more();
    frames->push_back(std::move(msg));
  }
  AcquireAfterRecv(context);
  return true;
}

void WakeUp(zmq::context_t* context, const std::string& endpoint) {
  try {
    zmq::socket_t wake(*context, zmq::socket_type::push);
    wake.set(zmq::sockopt::linger, 0);
    wake.connect(endpoint);
    wake.send(zmq::str_buffer("w"), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
  }
}

}  // namespace geeps::transport
