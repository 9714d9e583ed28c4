#include "transport/frame.h"

#include <zmq.h>
#include <cstring>

namespace geeps::transport {

static_assert(sizeof(zmq_msg_t) == 64, "Frame's storage must hold a zmq_msg_t");
static_assert(alignof(zmq_msg_t) <= 8, "Frame's storage must align a zmq_msg_t");

namespace {
zmq_msg_t* M(void* p) { return static_cast<zmq_msg_t*>(p); }
zmq_msg_t* M(const void* p) { return const_cast<zmq_msg_t*>(static_cast<const zmq_msg_t*>(p)); }
}  // namespace

Error::Error(int num) : std::runtime_error(zmq_strerror(num)), num_(num) {}

bool Error::context_closed() const { return num_ == ETERM; }

void* Frame::msg() { return storage_; }
const void* Frame::msg() const { return storage_; }

Frame::Frame() { zmq_msg_init(M(msg())); }

Frame::Frame(size_t bytes) {
  if (zmq_msg_init_size(M(msg()), bytes) != 0) throw Error(zmq_errno());
}

Frame::Frame(const void* data, size_t bytes) : Frame(bytes) {
  if (bytes > 0) std::memcpy(this->data(), data, bytes);
}

Frame Frame::Lend(void* data, size_t bytes, Release release, void* hint) {
  Frame f;
  zmq_msg_close(M(f.msg()));
  if (zmq_msg_init_data(M(f.msg()), data, bytes, release, hint) != 0) {
    const int num = zmq_errno();
    zmq_msg_init(M(f.msg()));
    throw Error(num);
  }
  return f;
}

Frame::~Frame() { zmq_msg_close(M(msg())); }

Frame::Frame(Frame&& other) noexcept {
  zmq_msg_init(M(msg()));
  zmq_msg_move(M(msg()), M(other.msg()));
}

Frame& Frame::operator=(Frame&& other) noexcept {
  if (this != &other) zmq_msg_move(M(msg()), M(other.msg()));
  return *this;
}

void Frame::Share(Frame& other) {
  if (zmq_msg_copy(M(msg()), M(other.msg())) != 0) throw Error(zmq_errno());
}

void* Frame::data() { return zmq_msg_data(M(msg())); }
const void* Frame::data() const { return zmq_msg_data(M(msg())); }
size_t Frame::size() const { return zmq_msg_size(M(msg())); }

std::string Frame::to_string() const {
  return std::string(static_cast<const char*>(data()), size());
}

bool Frame::more() const { return zmq_msg_more(M(msg())) != 0; }

int Frame::source_fd() const { return zmq_msg_get(M(msg()), ZMQ_SRCFD); }

}  // namespace geeps::transport
