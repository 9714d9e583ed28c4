// Kernel launches of the CUDA layer backend (cuda_backend.cu) whose error is
// the launch's own, never an older one.
//
// The CUDA runtime latches the error of every failed call as the thread's
// "last error", which cudaGetLastError() returns and clears. Reading it after
// a <<<...>>> launch therefore also reports any older error still latched
// (say a cudaMalloc of the application's that failed and was handled),
// blaming it on the kernel. cudaLaunchKernelEx returns the launch's own
// error instead (sticky errors of earlier kernels aside: every call reports
// those); a failed launch is then cleared from the last error, where it
// would otherwise surface in a later, unrelated check. libgeeps' kernels
// follow the same rule (src/device/cuda/launch_error.h); these examples use
// only libgeeps' public API, so they have their own copy.
//
// OwnLaunchError, the policy, has no CUDA types: tests/launch_error_test.cc
// drives it with fake runtime functions without a GPU. LaunchKernel, the
// CUDA launch built on it, exists where nvcc compiles.
#ifndef GEEPS_EXAMPLES_LAYERS_CUDA_LAUNCH_H_
#define GEEPS_EXAMPLES_LAYERS_CUDA_LAUNCH_H_

#include <utility>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace nn {

// Runs `launch` (which returns its own error, e.g. a cudaLaunchKernelEx
// call) and returns that error; when it is not `success`, also calls
// `take_last_error` (cudaGetLastError) to clear it from the last error.
// An older error latched before the launch is neither returned nor cleared.
template <typename Error, typename Launch, typename TakeLastError>
Error OwnLaunchError(Error success, Launch&& launch, TakeLastError&& take_last_error) {
  const Error error = launch();
  if (error != success) take_last_error();
  return error;
}

#if defined(__CUDACC__)
// Launches `kernel` on `blocks` x `threads` threads on `stream` (no dynamic
// shared memory) and returns this launch's own error.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), int blocks, int threads, cudaStream_t stream,
                         Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = stream;
  return OwnLaunchError(
      cudaSuccess, [&] { return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...); },
      [] { return cudaGetLastError(); });
}
#endif

}  // namespace nn

#endif  // GEEPS_EXAMPLES_LAYERS_CUDA_LAUNCH_H_
