// The library's own way to make a geeps::GeePS around a client::Worker: the
// constructor is private so that applications cannot reach the internal
// Worker type through the public header.
#ifndef GEEPS_CLIENT_GEEPS_ACCESS_H_
#define GEEPS_CLIENT_GEEPS_ACCESS_H_

#include <memory>

#include "client/worker.h"
#include "geeps/geeps.h"

namespace geeps {
namespace internal {

class GeePSAccess {
 public:
  static std::unique_ptr<GeePS> Make(std::unique_ptr<client::Worker> impl) {
    return std::unique_ptr<GeePS>(new GeePS(std::move(impl)));
  }
  // The worker behind `ps` (the Step's checks of its phase).
  static const client::Worker& Impl(const GeePS& ps) { return *ps.impl_; }
};

}  // namespace internal
}  // namespace geeps

#endif  // GEEPS_CLIENT_GEEPS_ACCESS_H_
