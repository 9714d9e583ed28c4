// A stand-in for the CUDA driver (built as libcuda.so.1 in a folder of its
// own), for tests/gpu_check/cuda_probe_test.sh: the few driver API functions
// geeps_cuda_probe calls, with results set by the environment.
//   FAKE_CUDA_INIT     what cuInit returns (default 100,
//                      CUDA_ERROR_NO_DEVICE)
//   FAKE_CUDA_DEVICES  the device count cuDeviceGetCount gives (default 0)
// cuDevicePrimaryCtxRetain takes and touches 8 MiB, as a context takes memory.
#include <cstdlib>
#include <cstring>

namespace {
// The fake context's memory, referenced for as long as the process lives, as
// a real context's is (volatile: never read; LeakSanitizer must see it).
void* volatile g_context_memory = nullptr;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}
}  // namespace

// The driver API's own names.
// NOLINTBEGIN(readability-identifier-naming)
extern "C" {

__attribute__((visibility("default"))) int cuInit(unsigned /*flags*/) {
  return EnvInt("FAKE_CUDA_INIT", 100);
}

__attribute__((visibility("default"))) int cuDeviceGetCount(int* count) {
  *count = EnvInt("FAKE_CUDA_DEVICES", 0);
  return 0;
}

__attribute__((visibility("default"))) int cuDriverGetVersion(int* version) {
  *version = 13000;
  return 0;
}

__attribute__((visibility("default"))) int cuDeviceGet(int* device, int ordinal) {
  *device = ordinal;
  return ordinal < EnvInt("FAKE_CUDA_DEVICES", 0) ? 0 : 101;  // CUDA_ERROR_INVALID_DEVICE
}

__attribute__((visibility("default"))) int cuDevicePrimaryCtxRetain(void** context, int /*dev*/) {
  constexpr size_t kBytes = size_t{8} << 20;
  void* block = std::malloc(kBytes);  // kept: the context lives until the process ends
  if (block == nullptr) return 2;     // CUDA_ERROR_OUT_OF_MEMORY
  std::memset(block, 1, kBytes);
  g_context_memory = block;
  *context = block;
  return 0;
}

__attribute__((visibility("default"))) int cuGetErrorName(int error, const char** name) {
  if (error == 100) {
    *name = "CUDA_ERROR_NO_DEVICE";
    return 0;
  }
  return 1;  // CUDA_ERROR_INVALID_VALUE: unknown to the fake
}

}  // extern "C"
// NOLINTEND(readability-identifier-naming)
