// One frame of a data-plane message, and the error the data plane's
// socket calls throw, by names that code outside src/transport can use
// without ZeroMQ's header (which only src/transport includes).
//
// A Frame holds its bytes one of three ways: owned (received, or made to
// be filled: Frame(bytes)), shared with another frame without a copy
// (Share), or lent (Lend: caller memory sent without a copy, handed back
// through `release` once ZeroMQ is done with it, possibly on another
// thread). A received frame can be kept, e.g. in a shared_ptr, as the
// owner of its bytes. Moving a frame moves its bytes' ownership (a small
// frame's bytes live inside the object: take data() after the move).
#ifndef GEEPS_TRANSPORT_FRAME_H_
#define GEEPS_TRANSPORT_FRAME_H_

#include <cstddef>
#include <stdexcept>
#include <string>

namespace geeps::transport {

// A failed ZeroMQ call of the data plane: its errno in num() (ETERM: the
// context is closing; EHOSTUNREACH: a ROUTER's peer is gone).
class Error : public std::runtime_error {
 public:
  explicit Error(int num);
  int num() const { return num_; }
  // ETERM: the context is closing (the loop that got it stops).
  bool context_closed() const;

 private:
  int num_;
};

class Frame {
 public:
  using Release = void (*)(void* data, void* hint);

  Frame();                                // empty
  explicit Frame(size_t bytes);           // `bytes` to fill (uninitialised)
  Frame(const void* data, size_t bytes);  // a copy of them
  // `bytes` at `data`, not copied; `release(data, hint)` once ZeroMQ is
  // done with them.
  static Frame Lend(void* data, size_t bytes, Release release, void* hint);
  ~Frame();
  Frame(Frame&& other) noexcept;
  Frame& operator=(Frame&& other) noexcept;
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;

  // This frame now holds `other`'s bytes too, without a copy.
  void Share(Frame& other);

  void* data();
  const void* data() const;
  size_t size() const;
  std::string to_string() const;
  // A received frame: whether frames of the same message follow.
  bool more() const;
  // A received frame: the descriptor of the TCP/IPC connection it came on,
  // or -1 (inproc, or not known).
  int source_fd() const;

 private:
  friend class Socket;
  void* msg();
  const void* msg() const;
  alignas(8) unsigned char storage_[64];  // a zmq_msg_t (checked in frame.cc)
};

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_FRAME_H_
