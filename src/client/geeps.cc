// geeps::GeePS forwards to client::Worker (the pimpl keeps ZeroMQ and device
// headers out of users' builds).
#include "geeps/geeps.h"

#include "client/worker.h"

namespace geeps {

GeePS::GeePS(std::unique_ptr<client::Worker> impl) : impl_(std::move(impl)) {}
GeePS::~GeePS() = default;

int GeePS::rank() const { return impl_->rank(); }
int GeePS::num_workers() const { return impl_->num_workers(); }
const Config& GeePS::config() const { return impl_->config(); }
DeviceKind GeePS::device_kind() const { return impl_->device_kind(); }
ComputeStream GeePS::compute_stream() const {
  return ComputeStream(impl_->device_kind(), impl_->compute_stream());
}

StatusOr<ReadHandle> GeePS::VirtualRead(TableId table, const std::vector<RowIndex>& rows,
                                        int slack) {
  return impl_->VirtualRead(table, rows, slack);
}
StatusOr<ReadHandle> GeePS::VirtualRead(TableId table, const std::vector<RowIndex>& rows) {
  return impl_->VirtualRead(table, rows, impl_->config().default_slack);
}
Status GeePS::VirtualPostRead(ReadHandle h) { return impl_->VirtualPostRead(h); }
StatusOr<UpdateHandle> GeePS::VirtualPreUpdate(TableId table, const std::vector<RowIndex>& rows) {
  return impl_->VirtualPreUpdate(table, rows, /*zeroed=*/true);
}

StatusOr<UpdateHandle> GeePS::VirtualPreUpdate(TableId table, const std::vector<RowIndex>& rows,
                                               bool zeroed) {
  return impl_->VirtualPreUpdate(table, rows, zeroed);
}
Status GeePS::VirtualUpdate(UpdateHandle h) { return impl_->VirtualUpdate(h); }
StatusOr<LocalHandle> GeePS::VirtualLocalAccess(TableId table, const std::vector<RowIndex>& rows,
                                                bool fetch) {
  return impl_->VirtualLocalAccess(table, rows, fetch);
}
StatusOr<LocalHandle> GeePS::VirtualLocalRead(TableId table, const std::vector<RowIndex>& rows) {
  return impl_->VirtualLocalRead(table, rows);
}
Status GeePS::VirtualPostLocalAccess(LocalHandle h, bool keep) {
  return impl_->VirtualPostLocalAccess(h, keep);
}
Status GeePS::VirtualClock() { return impl_->VirtualClock(); }
Status GeePS::FinishVirtualIteration() { return impl_->FinishVirtualIteration(); }
Status GeePS::StartIterations() { return impl_->StartIterations(); }
StatusOr<const float*> GeePS::Read(ReadHandle h) { return impl_->Read(h); }
Status GeePS::PostRead(ReadHandle h) { return impl_->PostRead(h); }
StatusOr<float*> GeePS::PreUpdate(UpdateHandle h) { return impl_->PreUpdate(h); }
Status GeePS::Update(UpdateHandle h) { return impl_->Update(h); }
StatusOr<float*> GeePS::LocalAccess(LocalHandle h) { return impl_->LocalAccess(h); }
StatusOr<const float*> GeePS::LocalRead(LocalHandle h) { return impl_->LocalRead(h); }
Status GeePS::PostLocalAccess(LocalHandle h) { return impl_->PostLocalAccess(h); }
Status GeePS::Clock() { return impl_->Clock(); }
Status GeePS::CopyToHost(float* host, const float* device_buffer, size_t floats) {
  return impl_->CopyToHost(host, device_buffer, floats);
}
Status GeePS::CopyFromHost(float* device_buffer, const float* host, size_t floats) {
  return impl_->CopyFromHost(device_buffer, host, floats);
}
Status GeePS::EnqueueHostWork(std::function<void()> work) {
  return impl_->EnqueueHostWork(std::move(work));
}
Status GeePS::SynchronizeComputeStream() { return impl_->SynchronizeComputeStream(); }
const float* GeePS::HostAddress(const float* buffer) const { return impl_->HostAddress(buffer); }
float* GeePS::HostAddress(float* buffer) const {
  return const_cast<float*>(impl_->HostAddress(buffer));
}
Status GeePS::Sync() { return impl_->Sync(); }
Status GeePS::CopyRows(TableId table, const std::vector<RowIndex>& rows, float* out) {
  return impl_->CopyRows(table, rows, out);
}
WorkerStats GeePS::GetStats() const { return impl_->GetStats(); }
StatusOr<int64_t> GeePS::RequestCheckpoint() { return impl_->RequestCheckpoint(); }
int64_t GeePS::resumed_clock() const { return impl_->resumed_clock(); }
Status GeePS::Shutdown() { return impl_->Shutdown(); }

}  // namespace geeps
