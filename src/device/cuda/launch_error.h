// How a kernel launch's error is read (kernels.cu, Launch): the launch's own
// error, never an older one. A header without CUDA types, so that
// tests/launch_error_test.cc drives this very template with fake runtime
// functions on a machine without a GPU.
//
// The CUDA runtime latches the error of every failed call as the thread's
// "last error", which cudaGetLastError() returns and clears. Reading it after
// a <<<...>>> launch therefore also reports any older error still latched
// (say a cudaMalloc that failed on purpose and was handled), blaming it on
// the kernel. cudaLaunchKernelEx returns the launch's own error instead
// (sticky errors of earlier kernels aside: every call reports those). A
// failed launch is then handled by the caller, so it is cleared from the last
// error too, where it would otherwise surface in a later, unrelated check.
#ifndef GEEPS_DEVICE_CUDA_LAUNCH_ERROR_H_
#define GEEPS_DEVICE_CUDA_LAUNCH_ERROR_H_

namespace geeps::device::cuda {

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

}  // namespace geeps::device::cuda

#endif  // GEEPS_DEVICE_CUDA_LAUNCH_ERROR_H_
