// ThreadSanitizer annotations for ZeroMQ message passing.
//
// Debian's libzmq is not instrumented, so TSan cannot see that a message sent
// on one thread happens before its receipt on another, and reports the
// sender's writes (to the frame buffers, or to data the message refers to) as
// races with the receiver's reads. Every send in libgeeps is preceded by
// ReleaseBeforeSend(context) and every receipt followed by
// AcquireAfterRecv(context), which tells TSan about that edge. The edge is
// per ZeroMQ context (coarser than per socket): it can hide a race only
// between two threads that also exchange messages. Without TSan these are
// no-ops.
#ifndef GEEPS_TRANSPORT_TSAN_H_
#define GEEPS_TRANSPORT_TSAN_H_

#if defined(__SANITIZE_THREAD__)
#define GEEPS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GEEPS_TSAN 1
#endif
#endif

#ifdef GEEPS_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace geeps::transport {

inline void ReleaseBeforeSend(const void* context) {
#ifdef GEEPS_TSAN
  __tsan_release(const_cast<void*>(context));
#else
  (void)context;
#endif
}

inline void AcquireAfterRecv(const void* context) {
#ifdef GEEPS_TSAN
  __tsan_acquire(const_cast<void*>(context));
#else
  (void)context;
#endif
}

}  // namespace geeps::transport

#endif  // GEEPS_TRANSPORT_TSAN_H_
