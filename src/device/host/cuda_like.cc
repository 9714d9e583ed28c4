#include "device/host/cuda_like.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

namespace geeps::device::host {

namespace {

std::atomic<bool> g_started{false};
// The resident block: reachable from here for as long as the process lives,
// as the driver's memory is (leak checkers see it still referenced).
// volatile: never read, so an optimiser could drop the store and leave the
// block unreferenced (LeakSanitizer called it a leak at -O1).
char* volatile g_resident = nullptr;

// The stand-in for the driver's helper threads: blocks every signal (so that
// none is delivered here instead of to the application's threads) and
// sleeps until the process ends; `ready` once it has its name.
void DriverThread(std::promise<void>* ready) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  pthread_setname_np(pthread_self(), "geeps-cudalike");
  ready->set_value();
  for (;;) sigsuspend(&all);
}

}  // namespace

DeviceOptions CudaLikeOptions(DeviceOptions options) {
  options.async_streams = true;
  options.opaque_pointers = true;
  options.no_host_alias = true;
  options.cuda_like = true;
  options.ordinal = 0;
  options.host_devices = 1;
  return options;
}

void StartDriverStandIn() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(kDriverStartMs));
    char* block = static_cast<char*>(std::malloc(kDriverResidentBytes));
    if (block != nullptr) std::memset(block, 0x5a, kDriverResidentBytes);
    g_resident = block;
    static std::promise<void> ready;  // outlives the set_value of the thread
    std::thread(DriverThread, &ready).detach();
    ready.get_future().wait();  // as cuInit returns with its threads started
    g_started.store(true);
  });
}

bool DriverStandInStarted() { return g_started.load(); }

}  // namespace geeps::device::host
