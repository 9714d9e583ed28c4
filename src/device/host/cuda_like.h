// The host backend's CUDA-like test mode (GEEPS_HOST_AS_CUDA=1): on a
// machine without a GPU, a device that DeviceKind::kAuto resolves to is a
// host device that behaves as far as a test can tell like the GPU that kAuto
// would give on a machine with one, so that a test which only holds on the
// host fails in CI, not first on the rarely lent GPU machine
// (docs/architecture.md, "The CUDA-like host mode").
//
// Such a device has, at once:
//  - asynchronous streams (DeviceOptions::async_streams): work runs late, on
//    the stream's thread, never inline;
//  - opaque device pointers (DeviceOptions::opaque_pointers): host code that
//    touches device memory crashes;
//  - no host alias (DeviceOptions::no_host_alias): the data path copies where
//    it would read device memory in place, and no push is kept in the
//    message that brought it;
//  - one device in the process (DeviceCount(kAuto) is 1, as on the lent GPU
//    machine), named "host:0 of 1 (CUDA-like)";
//  - the CUDA driver's side effects that tests can observe, from the first
//    such device on and until the process ends: one more thread and
//    kDriverResidentBytes more resident memory.
//
// It is still a host device: kind() is kHost, so an application picks host
// kernels for it (the CUDA layers would need a GPU), and a test that
// branches on the device kind is not covered by the mode.
// DeviceKind::kHost chosen explicitly is never changed by the mode.
#ifndef GEEPS_DEVICE_HOST_CUDA_LIKE_H_
#define GEEPS_DEVICE_HOST_CUDA_LIKE_H_

#include <cstddef>

#include "device/device.h"
#include "geeps/status.h"

namespace geeps::device::host {

// The driver's start-up, as the first device of a process meets it on the
// GPU machine: cuInit and the primary context take a while (kDriverStartMs
// here) and leave memory resident (kDriverResidentBytes: the context, the
// CUDA libraries' state, the driver's pools), more than the 100 MB bounds of
// the tests that measure their resident memory, so that a test reading its
// baseline while the device is still being made fails here too. Stand-ins:
// the real figures of the GPU machine are not measured yet
// (geeps_cuda_probe reports them there).
inline constexpr size_t kDriverResidentBytes = size_t{128} << 20;
inline constexpr int kDriverStartMs = 250;

// `options` as the mode makes them: asynchronous streams, opaque pointers,
// no host alias, ordinal 0 of one device, the CUDA-like name.
DeviceOptions CudaLikeOptions(DeviceOptions options);

// The driver's side effects, the first time only (any thread; a second
// caller waits for the first, as cuInit does): sleeps kDriverStartMs, takes
// and touches kDriverResidentBytes (never freed), and starts a thread that
// blocks every signal and sleeps until the process ends.
void StartDriverStandIn();

// Whether StartDriverStandIn has run in this process.
bool DriverStandInStarted();

}  // namespace geeps::device::host

#endif  // GEEPS_DEVICE_HOST_CUDA_LIKE_H_
