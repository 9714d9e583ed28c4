// The check of the check (scripts/check-thread-safety.sh --self-test; not
// part of any build): misuses of src/common/mutex.h's annotations that
// clang's -Wthread-safety must report. Each line marked "expect:" names the
// message the self-test looks for. With -DGEEPS_TSA_CORRECT the same
// functions use the lock correctly, and clang must accept them.
#include <condition_variable>

#include "common/mutex.h"

namespace geeps::common {

class Counter {
 public:
  void Bump() {
#ifdef GEEPS_TSA_CORRECT
    MutexLock lock(&mu_);
#endif
    ++count_;  // expect: writing variable 'count_' requires holding mutex 'mu_' exclusively
  }

  int Get() {
#ifdef GEEPS_TSA_CORRECT
    MutexLock lock(&mu_);
#endif
    return count_;  // expect: reading variable 'count_' requires holding mutex 'mu_'
  }

  void Reset() {
#ifdef GEEPS_TSA_CORRECT
    MutexLock lock(&mu_);
#endif
    ResetLocked();  // expect: calling function 'ResetLocked' requires holding mutex 'mu_'
  }

  void WaitPositive() {
    MutexLock lock(&mu_);
#ifdef GEEPS_TSA_CORRECT
    lock.Wait(cv_, [&]() GEEPS_REQUIRES(mu_) { return count_ > 0; });
#else
    lock.Wait(cv_, [&] { return count_ > 0; });  // expect: reading variable 'count_' requires
#endif
  }

  void Leak() {
    mu_.Lock();
#ifdef GEEPS_TSA_CORRECT
    mu_.Unlock();
#endif
  }  // expect: mutex 'mu_' is still held at the end of function

 private:
  void ResetLocked() GEEPS_REQUIRES(mu_) { count_ = 0; }

  Mutex mu_;
  std::condition_variable cv_;
  int count_ GEEPS_GUARDED_BY(mu_) = 0;
};

}  // namespace geeps::common

int main() {
  geeps::common::Counter c;
  c.Bump();
  c.Reset();
  c.Leak();
  return c.Get();
}
