// geeps_cuda_probe: loads the CUDA driver (libcuda.so.1) the way the CUDA
// runtime does (dlopen, honouring LD_LIBRARY_PATH) and calls cuInit, so that
// the GPU check (scripts/gpu-check.sh, its env stage) can say why no CUDA
// device is seen before any test runs: the driver not found (and where it
// was looked for), the driver found but failing to start (cuInit's error),
// or no device. It needs no CUDA headers or libraries to build, so it is
// built everywhere. Where the device is seen it also says what starting the
// driver cost the process (cuInit, then device 0's primary context, which
// every CUDA runtime call makes): the time, the threads and the resident
// memory it added, the figures the host backend's CUDA-like mode stands in
// for (src/device/host/cuda_like.h).
//
// Prints one line per fact on stdout and exits with
//   0  the driver started and sees at least one device
//   2  bad usage
//   3  libcuda.so.1 not found
//   4  the driver lacks cuInit / cuDeviceGetCount / cuDriverGetVersion
//   5  cuInit failed
//   6  cuInit succeeded but there is no device
#include <dlfcn.h>
#include <link.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace {

// The driver API's functions the probe calls (CUresult is an int enum).
using InitFn = int (*)(unsigned);
using CountFn = int (*)(int*);
using VersionFn = int (*)(int*);
using ErrorNameFn = int (*)(int, const char**);
using DeviceGetFn = int (*)(int*, int);
using PrimaryCtxRetainFn = int (*)(void**, int);

constexpr int kExitNotFound = 3;
constexpr int kExitIncomplete = 4;
constexpr int kExitInitFailed = 5;
constexpr int kExitNoDevice = 6;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string("(unset)") : std::string("'") + v + "'";
}

// "<code> (<CUDA_ERROR_NAME>)", the name when the driver gives one.
std::string ErrorText(void* driver, int code) {
  std::string text = std::to_string(code);
  auto name_of = reinterpret_cast<ErrorNameFn>(dlsym(driver, "cuGetErrorName"));
  const char* name = nullptr;
  if (name_of != nullptr && name_of(code, &name) == 0 && name != nullptr) {
    text += std::string(" (") + name + ")";
  }
  return text;
}

std::string LoadedFrom(void* driver) {
  link_map* map = nullptr;
  if (dlinfo(driver, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
    return map->l_name;
  }
  return "(path unknown)";
}

// The process's thread count and resident set (KiB), from /proc/self/status.
struct ProcessSize {
  long threads = 0;
  long rss_kib = 0;
};

ProcessSize SizeNow() {
  ProcessSize size;
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "Threads:") status >> size.threads;
    if (key == "VmRSS:") status >> size.rss_kib;
    status.ignore(1 << 12, '\n');
  }
  return size;
}

using Clock = std::chrono::steady_clock;

void PrintCost(const char* what, Clock::time_point start, const ProcessSize& before) {
  const ProcessSize after = SizeNow();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  std::printf("cuda-probe: %s took %.0f ms, +%ld thread(s), +%.1f MiB resident\n", what, ms,
              after.threads - before.threads,
              static_cast<double>(after.rss_kib - before.rss_kib) / 1024.0);
}

// Device 0's primary context, retained (never released: the process ends),
// and what it cost; nothing where the driver lacks the two functions.
void ReportContextCost(void* driver) {
  auto get = reinterpret_cast<DeviceGetFn>(dlsym(driver, "cuDeviceGet"));
  auto retain = reinterpret_cast<PrimaryCtxRetainFn>(dlsym(driver, "cuDevicePrimaryCtxRetain"));
  if (get == nullptr || retain == nullptr) return;
  const ProcessSize before = SizeNow();
  const auto start = Clock::now();
  int device = 0;
  void* context = nullptr;
  const int result = get(&device, 0) != 0 ? -1 : retain(&context, device);
  if (result != 0) {
    std::printf("cuda-probe: device 0's primary context could not be made: error %s\n",
                ErrorText(driver, result).c_str());
    return;
  }
  PrintCost("device 0's primary context", start, before);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    std::fprintf(stderr, "usage: %s (no arguments; see the header of src/tools/cuda_probe.cc)\n",
                 argv[0]);
    return 2;
  }
  const char* soname = "libcuda.so.1";
  void* driver = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* why = dlerror();
    std::printf(
        "cuda-probe: the CUDA driver (%s) was not found: %s; searched LD_LIBRARY_PATH=%s, "
        "the ld.so cache and the default folders\n",
        soname, why != nullptr ? why : "dlopen failed", Env("LD_LIBRARY_PATH").c_str());
    return kExitNotFound;
  }
  std::printf("cuda-probe: driver %s\n", LoadedFrom(driver).c_str());
  auto init = reinterpret_cast<InitFn>(dlsym(driver, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(driver, "cuDeviceGetCount"));
  auto version = reinterpret_cast<VersionFn>(dlsym(driver, "cuDriverGetVersion"));
  if (init == nullptr || count == nullptr || version == nullptr) {
    std::printf("cuda-probe: %s lacks cuInit, cuDeviceGetCount or cuDriverGetVersion\n",
                LoadedFrom(driver).c_str());
    return kExitIncomplete;
  }
  int driver_version = 0;
  if (version(&driver_version) == 0) {
    std::printf("cuda-probe: driver API version %d.%d\n", driver_version / 1000,
                driver_version % 1000 / 10);
  }
  const ProcessSize before_init = SizeNow();
  const auto init_start = Clock::now();
  const int init_result = init(0);
  if (init_result != 0) {
    std::printf("cuda-probe: cuInit failed: error %s (driver %s)\n",
                ErrorText(driver, init_result).c_str(), LoadedFrom(driver).c_str());
    return kExitInitFailed;
  }
  int devices = 0;
  const int count_result = count(&devices);
  if (count_result != 0 || devices == 0) {
    std::printf(
        "cuda-probe: cuInit succeeded but no CUDA device is seen (cuDeviceGetCount: %s, "
        "%d devices)\n",
        ErrorText(driver, count_result).c_str(), devices);
    return kExitNoDevice;
  }
  PrintCost("cuInit", init_start, before_init);
  ReportContextCost(driver);
  std::printf("cuda-probe: cuInit succeeded, %d CUDA device(s)\n", devices);
  return 0;
}
