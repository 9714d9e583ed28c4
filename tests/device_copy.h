// Copies between host vectors and a device::Device's buffers, for tests of
// the client's units that hold a Device and a stream rather than a GeePS
// (host_view.h is the same through GeePS::CopyToHost / CopyFromHost).
#ifndef GEEPS_TESTS_DEVICE_COPY_H_
#define GEEPS_TESTS_DEVICE_COPY_H_

#include <cstddef>
#include <vector>

#include "device/device.h"
#include "geeps/status.h"

namespace geeps::testing {

// Writes `values` to device buffer `dst` on `stream` and waits for it.
inline Status UploadFloats(device::Device& d, device::Stream* stream, float* dst,
                           const std::vector<float>& values) {
  GEEPS_RETURN_IF_ERROR(d.Copy(dst, values.data(), values.size() * sizeof(float),
                               device::CopyKind::kHostToDevice, stream));
  return d.Synchronize(stream);
}

// The first `floats` floats of device buffer `src`, read on `stream`.
inline StatusOr<std::vector<float>> DownloadFloats(device::Device& d, device::Stream* stream,
                                                   const float* src, size_t floats) {
  std::vector<float> out(floats);
  GEEPS_RETURN_IF_ERROR(
      d.Copy(out.data(), src, floats * sizeof(float), device::CopyKind::kDeviceToHost, stream));
  GEEPS_RETURN_IF_ERROR(d.Synchronize(stream));
  return out;
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_DEVICE_COPY_H_
