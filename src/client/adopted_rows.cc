#include "client/adopted_rows.h"

#include <cstdint>
#include <utility>

namespace geeps::client {

std::shared_ptr<const AdoptedRows> AdoptedRows::Make(device::Device* device,
                                                     std::shared_ptr<void> owner, void* host,
                                                     size_t bytes) {
  if (host == nullptr || reinterpret_cast<uintptr_t>(host) % alignof(float) != 0) return nullptr;
  void* mapped = device->MapHostMemory(host, bytes);
  if (mapped == nullptr) return nullptr;
  return std::shared_ptr<const AdoptedRows>(
      new AdoptedRows(device, std::move(owner), static_cast<float*>(mapped)));
}

AdoptedRows::~AdoptedRows() { device_->UnmapHostMemory(rows_); }

}  // namespace geeps::client
