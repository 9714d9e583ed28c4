// A push kept in the message that brought it (docs/architecture.md, "Pushes
// kept where they arrived"). On a device whose memory is host memory (the
// host backend), a worker need not copy a push into its cache: the slice
// points at the received payload, which the device maps as its memory, and
// an in-place Read of the slice returns that. Shared by the slice and by
// every in-place Read of it still open, so the message outlives both.
//
// Thread-safety: immutable once made; the last owner unmaps and frees.
#ifndef GEEPS_CLIENT_ADOPTED_ROWS_H_
#define GEEPS_CLIENT_ADOPTED_ROWS_H_

#include <cstddef>
#include <memory>

#include "device/device.h"

namespace geeps::client {

class AdoptedRows {
 public:
  // Smaller pushes are copied. Keeping a push holds its receive buffer until
  // the next push replaces it, so a worker with many slices holds many
  // buffers and ZeroMQ receives into fresh memory: at 16 emulated machines
  // with 78 KiB slices that cost more page faults (and CPU) than the copies
  // it saved (docs/performance.md, 2026-12-05). From 1 MiB on, a copy
  // costs at least a hundred microseconds, and pushes that big are few.
  static constexpr size_t kMinBytes = 1 << 20;

  // `owner` keeps [host, host + bytes) alive (the received message). Null
  // when the device cannot map host memory (CUDA, the no-alias mode) or the
  // rows are not aligned for floats. `device` must outlive the result.
  static std::shared_ptr<const AdoptedRows> Make(device::Device* device,
                                                 std::shared_ptr<void> owner, void* host,
                                                 size_t bytes);
  ~AdoptedRows();
  AdoptedRows(const AdoptedRows&) = delete;
  AdoptedRows& operator=(const AdoptedRows&) = delete;

  // The slice's first row, as a device address.
  const float* rows() const { return rows_; }

 private:
  AdoptedRows(device::Device* device, std::shared_ptr<void> owner, float* rows)
      : device_(device), owner_(std::move(owner)), rows_(rows) {}

  device::Device* const device_;
  const std::shared_ptr<void> owner_;
  float* const rows_;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_ADOPTED_ROWS_H_
