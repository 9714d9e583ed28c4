// Lock annotations, checked by Clang's thread-safety analysis
// (scripts/check-thread-safety.sh, a .ci/run stage), and the mutex they
// name. Under Clang the GEEPS_* macros are Clang's thread-safety
// attributes; under any other compiler (GCC builds the library) they expand
// to nothing, and Mutex and MutexLock compile to a std::mutex and a
// std::unique_lock<std::mutex>.
//
//   common::Mutex mu_;
//   int count_ GEEPS_GUARDED_BY(mu_) = 0;
//   void BumpLocked() GEEPS_REQUIRES(mu_);
//   ...
//   common::MutexLock lock(&mu_);
//   while (count_ == 0) lock.Wait(cv_);
//
// A condition_variable's predicate is a separate function to the analysis:
// wait in a loop, as above, or annotate the lambda,
//   lock.Wait(cv_, [&]() GEEPS_REQUIRES(mu_) { return count_ > 0; });
#ifndef GEEPS_COMMON_MUTEX_H_
#define GEEPS_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#if defined(__clang__)
#define GEEPS_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define GEEPS_THREAD_ANNOTATION_(x)
#endif

#define GEEPS_CAPABILITY(name) GEEPS_THREAD_ANNOTATION_(capability(name))
#define GEEPS_SCOPED_CAPABILITY GEEPS_THREAD_ANNOTATION_(scoped_lockable)
#define GEEPS_GUARDED_BY(x) GEEPS_THREAD_ANNOTATION_(guarded_by(x))
#define GEEPS_PT_GUARDED_BY(x) GEEPS_THREAD_ANNOTATION_(pt_guarded_by(x))
#define GEEPS_REQUIRES(...) GEEPS_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define GEEPS_EXCLUDES(...) GEEPS_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define GEEPS_ACQUIRE(...) GEEPS_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define GEEPS_RELEASE(...) GEEPS_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define GEEPS_TRY_ACQUIRE(...) GEEPS_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define GEEPS_ASSERT_CAPABILITY(x) GEEPS_THREAD_ANNOTATION_(assert_capability(x))
#define GEEPS_RETURN_CAPABILITY(x) GEEPS_THREAD_ANNOTATION_(lock_returned(x))
#define GEEPS_NO_THREAD_SAFETY_ANALYSIS GEEPS_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace geeps::common {

// A std::mutex the analysis knows as a capability. Lock it through a
// MutexLock; Lock/Unlock are for the rare pattern a scope cannot express.
class GEEPS_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() GEEPS_ACQUIRE() { mu_.lock(); }
  void Unlock() GEEPS_RELEASE() { mu_.unlock(); }
  bool TryLock() GEEPS_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis (only) that the caller holds this mutex: for a
  // condition_variable predicate, which runs under the lock the wait holds.
  void AssertHeld() const GEEPS_ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope (a std::unique_lock inside), and waits on a
// std::condition_variable with it: a wait gives the mutex up and takes it
// back before it returns, so to the analysis the mutex stays held.
class GEEPS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) GEEPS_ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() GEEPS_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Gives the mutex up before the scope ends (e.g. to notify outside it),
  // and takes it back.
  void Unlock() GEEPS_RELEASE() { lock_.unlock(); }
  void Lock() GEEPS_ACQUIRE() { lock_.lock(); }

  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <class Predicate>
  void Wait(std::condition_variable& cv, Predicate pred) {
    cv.wait(lock_, std::move(pred));
  }
  template <class Rep, class Period>
  std::cv_status WaitFor(std::condition_variable& cv,
                         const std::chrono::duration<Rep, Period>& timeout) {
    return cv.wait_for(lock_, timeout);
  }
  // True when pred() holds (it may have become so at the deadline).
  template <class Rep, class Period, class Predicate>
  bool WaitFor(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& timeout,
               Predicate pred) {
    return cv.wait_for(lock_, timeout, std::move(pred));
  }
  template <class Clock, class Duration>
  std::cv_status WaitUntil(std::condition_variable& cv,
                           const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv.wait_until(lock_, deadline);
  }
  template <class Clock, class Duration, class Predicate>
  bool WaitUntil(std::condition_variable& cv,
                 const std::chrono::time_point<Clock, Duration>& deadline, Predicate pred) {
    return cv.wait_until(lock_, deadline, std::move(pred));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace geeps::common

#endif  // GEEPS_COMMON_MUTEX_H_
