// The job's ZeroMQ context, by a name that code outside src/transport can
// hold without ZeroMQ's header: a pointer or reference to it is all such
// code passes on (to a link or socket factory of src/transport).
#ifndef GEEPS_TRANSPORT_CONTEXT_H_
#define GEEPS_TRANSPORT_CONTEXT_H_

namespace zmq {
class context_t;
}  // namespace zmq

#include <memory>

namespace geeps::transport {

using Context = zmq::context_t;

// Owns a context (made by NewContext, socket_util.h); closing it waits for
// its sockets' lingering messages.
struct ContextDeleter {
  void operator()(Context* context) const;
};
using ContextPtr = std::unique_ptr<Context, ContextDeleter>;

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_CONTEXT_H_
