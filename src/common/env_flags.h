// Environment variables that libgeeps reads by itself, without the
// application calling ApplyEnvironment (test modes that must reach every
// worker of a test suite unchanged).
#ifndef GEEPS_COMMON_ENV_FLAGS_H_
#define GEEPS_COMMON_ENV_FLAGS_H_

#include "geeps/status.h"

namespace geeps {

// GEEPS_ASYNC_HOST_STREAMS: unset, empty or "0" = false, "1" = true, anything
// else kInvalidArgument naming the variable (Config::async_host_streams).
StatusOr<bool> AsyncHostStreamsFromEnvironment();
// GEEPS_HOST_OPAQUE_POINTERS, the same way (Config::host_opaque_device_pointers).
StatusOr<bool> HostOpaquePointersFromEnvironment();
// GEEPS_HOST_NO_ALIAS, the same way: the host backend's no-alias test mode
// (device::DeviceOptions::no_host_alias). No Config field: it is a test mode
// for whole suites only.
StatusOr<bool> HostNoAliasFromEnvironment();
// GEEPS_HOST_AS_CUDA, the same way: the host backend's CUDA-like test mode
// (device/host/cuda_like.h), in which DeviceKind::kAuto without a GPU
// resolves to a host device that behaves like the GPU it would get on a
// machine with one. No Config field either.
StatusOr<bool> HostAsCudaFromEnvironment();
// GEEPS_CHECKED, the same way (Config::checked).
StatusOr<bool> CheckedFromEnvironment();
// GEEPS_LOG_LEVEL: unset, empty or one of error|warning|info|debug is OK;
// anything else kInvalidArgument naming the variable (the logger itself
// then keeps its default, warning, and says so once on stderr).
Status CheckLogLevelEnvironment();
// Every variable of this header at once: the first malformed one's error.
Status CheckSelfReadEnvironment();

}  // namespace geeps

#endif  // GEEPS_COMMON_ENV_FLAGS_H_
