// The checked mode's looks at the buffers (client/checked_mode.h).
#include "client/checked_mode.h"

#include <cmath>
#include <cstring>

namespace geeps::client {

uint64_t BufferChecksum(const float* host, size_t floats) {
  // FNV-1a's step over 8-byte words, not bytes (8 times fewer steps): each
  // step is a bijection of the state, so a change of any one word always
  // changes the sum.
  const size_t bytes = floats * sizeof(float);
  const auto* p = reinterpret_cast<const unsigned char*>(host);
  uint64_t h = 14695981039346656037ull;
  size_t i = 0;
  for (; i + sizeof(uint64_t) <= bytes; i += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, p + i, sizeof(word));
    h = (h ^ word) * 1099511628211ull;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void PoisonFloats(float* host, size_t floats) {
  float poison;
  std::memcpy(&poison, &kPoisonBits, sizeof(poison));
  for (size_t i = 0; i < floats; ++i) host[i] = poison;
}

int64_t FirstUnpoisoned(const float* host, size_t floats) {
  for (size_t i = 0; i < floats; ++i) {
    uint32_t bits;
    std::memcpy(&bits, host + i, sizeof(bits));
    if (bits != kPoisonBits) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t FirstNonFinite(const float* host, size_t floats) {
  for (size_t i = 0; i < floats; ++i)
    if (!std::isfinite(host[i])) return static_cast<int64_t>(i);
  return -1;
}

CheckedMode::CheckedMode(const Config* config, const OpSequence* seq, int rank,
                         device::Device* device, device::Stream* stream)
    : config_(config),
      seq_(seq),
      rank_(rank),
      device_(device),
      stream_(stream),
      read_sums_(seq->reads().size(), 0),
      read_poisoned_(seq->reads().size(), false),
      update_poisoned_(seq->updates().size(), false) {}

size_t CheckedMode::ReadFloats(int32_t read) const {
  const RecordedAccess& a = seq_->reads()[read];
  return a.rows.size() * config_->tables[a.table].row_width;
}

size_t CheckedMode::UpdateFloats(int32_t update) const {
  const RecordedAccess& a = seq_->updates()[update];
  return a.rows.size() * config_->tables[a.table].row_width;
}

std::string CheckedMode::Where(const char* call, const char* kind, int32_t handle,
                               const RecordedAccess& a) const {
  return std::string(call) + "(" + kind + "#" + std::to_string(handle) + ") of table " +
         std::to_string(a.table) + " ('" + config_->tables[a.table].name + "') on worker " +
         std::to_string(rank_);
}

StatusOr<const float*> CheckedMode::HostView(const float* buffer, size_t floats) {
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
  if (const void* host = device_->HostAlias(buffer)) return static_cast<const float*>(host);
  if (scratch_.size() < floats) scratch_.resize(floats);
  GEEPS_RETURN_IF_ERROR(device_->Copy(scratch_.data(), buffer, floats * sizeof(float),
                                      device::CopyKind::kDeviceToHost, stream_));
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
  return static_cast<const float*>(scratch_.data());
}

Status CheckedMode::Poison(float* buffer, size_t floats) {
  float poison;
  std::memcpy(&poison, &kPoisonBits, sizeof(poison));
  GEEPS_RETURN_IF_ERROR(device_->Fill(buffer, poison, floats, stream_));
  return device_->Synchronize(stream_);
}

Status CheckedMode::CheckPoison(const float* buffer, size_t floats, const std::string& where,
                                const char* closed_by, const char* advice) {
  GEEPS_ASSIGN_OR_RETURN(const float* host, HostView(buffer, floats));
  const int64_t k = FirstUnpoisoned(host, floats);
  if (k < 0) return Status::OK();
  return FailedPreconditionError(where + ": checked mode: its buffer was written after its last " +
                                 closed_by + " (float " + std::to_string(k) + " of " +
                                 std::to_string(floats) + "); " + advice);
}

Status CheckedMode::BeforeGather(int32_t read, const float* buffer) {
  if (!read_poisoned_[read] || buffer == nullptr) return Status::OK();
  read_poisoned_[read] = false;
  return CheckPoison(buffer, ReadFloats(read), Where("Read", "read", read, seq_->reads()[read]),
                     "PostRead", "a Read pointer is invalid after PostRead");
}

Status CheckedMode::AfterRead(int32_t read, const float* rows) {
  const size_t floats = ReadFloats(read);
  GEEPS_ASSIGN_OR_RETURN(const float* host, HostView(rows, floats));
  read_sums_[read] = BufferChecksum(host, floats);
  return Status::OK();
}

Status CheckedMode::AtPostRead(int32_t read, const float* rows, float* own) {
  const size_t floats = ReadFloats(read);
  GEEPS_ASSIGN_OR_RETURN(const float* host, HostView(rows, floats));
  if (BufferChecksum(host, floats) != read_sums_[read])
    return FailedPreconditionError(
        Where("PostRead", "read", read, seq_->reads()[read]) +
        ": checked mode: the rows Read returned were written before this PostRead; a Read "
        "buffer is read-only (copy the rows to change them)");
  if (own == nullptr) return Status::OK();
  GEEPS_RETURN_IF_ERROR(Poison(own, floats));
  read_poisoned_[read] = true;
  return Status::OK();
}

Status CheckedMode::BeforePreUpdate(int32_t update, const float* own) {
  if (!update_poisoned_[update] || own == nullptr) return Status::OK();
  update_poisoned_[update] = false;
  return CheckPoison(own, UpdateFloats(update),
                     Where("PreUpdate", "update", update, seq_->updates()[update]), "Update",
                     "an update pointer is invalid after Update, and such a write is lost");
}

Status CheckedMode::AtUpdate(int32_t update, const float* deltas) {
  const size_t floats = UpdateFloats(update);
  GEEPS_ASSIGN_OR_RETURN(const float* host, HostView(deltas, floats));
  const int64_t k = FirstNonFinite(host, floats);
  if (k < 0) return Status::OK();
  const RecordedAccess& a = seq_->updates()[update];
  const uint32_t width = config_->tables[a.table].row_width;
  const size_t at = static_cast<size_t>(k);
  return InvalidArgumentError(
      Where("Update", "update", update, a) + ": checked mode: a non-finite delta (" +
      std::to_string(host[at]) + ") for row " + std::to_string(a.rows[at / width]) + ", column " +
      std::to_string(at % width) + " (the first); nothing of this update was sent");
}

Status CheckedMode::AfterUpdate(int32_t update, float* own) {
  if (own == nullptr) return Status::OK();
  GEEPS_RETURN_IF_ERROR(Poison(own, UpdateFloats(update)));
  update_poisoned_[update] = true;
  return Status::OK();
}

}  // namespace geeps::client
