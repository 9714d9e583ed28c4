// A scope that makes a device current on the calling thread and makes the
// previous one current again when it ends: for code that must run on its
// own device but belongs to the application's thread, such as the
// destructors of streams and events, which run wherever the application
// drops them (an application thread that had its own device current must
// find it current afterwards).
//
// Backend-neutral: `Ops` supplies the thread's current device, as
//   static bool Get(int* ordinal);  // false: failed (and logged)
//   static bool Set(int ordinal);   // false: failed (and logged)
// the CUDA backend with cudaGetDevice / cudaSetDevice (cuda_device.cc), the
// host backend with CurrentHostDevice / SetCurrentHostDevice
// (host/host_stream.h), so that tests of the host backend run this very
// class (tests/multi_device_test.cc).
#ifndef GEEPS_DEVICE_SCOPED_DEVICE_H_
#define GEEPS_DEVICE_SCOPED_DEVICE_H_

namespace geeps::device {

template <typename Ops>
class ScopedCurrentDevice {
 public:
  // Makes `ordinal` current. If the current device cannot be read, it is
  // still set (the scope's work needs it) and nothing is restored; if
  // setting fails, nothing changed and nothing is restored.
  explicit ScopedCurrentDevice(int ordinal) {
    int previous = -1;
    if (!Ops::Get(&previous)) {
      Ops::Set(ordinal);
      return;
    }
    if (previous != ordinal && Ops::Set(ordinal)) {
      previous_ = previous;
      restore_ = true;
    }
  }

  // Makes the previous device current again (a failure is the Ops' to log).
  ~ScopedCurrentDevice() {
    if (restore_) Ops::Set(previous_);
  }

  ScopedCurrentDevice(const ScopedCurrentDevice&) = delete;
  ScopedCurrentDevice& operator=(const ScopedCurrentDevice&) = delete;

 private:
  int previous_ = -1;
  bool restore_ = false;
};

}  // namespace geeps::device

#endif  // GEEPS_DEVICE_SCOPED_DEVICE_H_
