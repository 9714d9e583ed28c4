// MakeCudaBackend where libgeeps is built without CUDA (GEEPS_HAVE_CUDA off):
// always null, with the reason.
#include "backend.h"

namespace nn {

std::unique_ptr<Backend> MakeCudaBackend(void* /*stream*/, std::string* error) {
  if (error != nullptr) {
    *error = "no CUDA device: libgeeps was built without CUDA (GEEPS_WITH_CUDA)";
  }
  return nullptr;
}

}  // namespace nn
