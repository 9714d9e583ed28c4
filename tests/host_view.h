// Host views of the device buffers a worker returns (Read, PreUpdate,
// LocalAccess). Those are device memory: on the CUDA backend, and on the host
// backend with opaque device pointers (Config::host_opaque_device_pointers,
// GEEPS_HOST_OPAQUE_POINTERS=1), the host cannot dereference them. Tests read
// and write them only through these helpers, which copy through
// GeePS::CopyToHost / CopyFromHost (in compute_stream() order), so that every
// test runs unchanged on every backend.
#ifndef GEEPS_TESTS_HOST_VIEW_H_
#define GEEPS_TESTS_HOST_VIEW_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "geeps/geeps.h"
#include "geeps/status.h"

namespace geeps::testing {

// The first `floats` floats of device buffer `buffer`, copied to the host.
inline StatusOr<std::vector<float>> ReadBuffer(GeePS& ps, const float* buffer, size_t floats) {
  std::vector<float> host(floats);
  GEEPS_RETURN_IF_ERROR(ps.CopyToHost(host.data(), buffer, floats));
  return host;
}

// Writes `values` to the first values.size() floats of device buffer
// `buffer`; the floats after them are left as they are.
inline Status WriteBuffer(GeePS& ps, float* buffer, const std::vector<float>& values) {
  return ps.CopyFromHost(buffer, values.data(), values.size());
}

// A host copy of `floats` floats of a device buffer, to read, modify and
// write back:
//   GEEPS_ASSIGN_OR_RETURN(HostView v, HostView::Load(ps, buf, n));
//   v[3] += 1;
//   GEEPS_RETURN_IF_ERROR(v.Store());
// Load() copies the device buffer in; a view made by the constructor starts
// as zeros (for a buffer whose contents are not needed). Store() writes the
// whole view back.
class HostView {
 public:
  HostView(GeePS& ps, float* buffer, size_t floats) : ps_(&ps), buffer_(buffer), values_(floats) {}

  static StatusOr<HostView> Load(GeePS& ps, float* buffer, size_t floats) {
    HostView view(ps, buffer, floats);
    GEEPS_RETURN_IF_ERROR(view.Reload());
    return view;
  }

  // Copies the device buffer to the view again.
  Status Reload() { return ps_->CopyToHost(values_.data(), buffer_, values_.size()); }
  // Copies the view to the device buffer.
  Status Store() const { return ps_->CopyFromHost(buffer_, values_.data(), values_.size()); }

  float& operator[](size_t i) { return values_[i]; }
  float operator[](size_t i) const { return values_[i]; }
  size_t size() const { return values_.size(); }
  std::vector<float>& values() { return values_; }
  const std::vector<float>& values() const { return values_; }

 private:
  GeePS* ps_;
  float* buffer_;
  std::vector<float> values_;
};

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_HOST_VIEW_H_
