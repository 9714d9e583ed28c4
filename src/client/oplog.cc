#include "client/oplog.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "client/comm_channel.h"
#include "client/table_cache.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "device/device.h"

namespace geeps::client {
namespace {

using SteadyClock = std::chrono::steady_clock;

bool AllIncluded(const TableCache& t, int64_t clock) {
  for (const PartitionSlice& s : t.slices) {
    if (s.cache_count > 0 && s.included <= clock) return false;
  }
  return true;
}

}  // namespace

bool WaitReleased(const std::atomic<int>& refs, SteadyClock::time_point deadline,
                  const std::function<bool()>& stop) {
  auto last = SteadyClock::now();
  for (int spin = 0; refs.load(std::memory_order_acquire) > 0; ++spin) {
    const auto now = SteadyClock::now();
    if (now - last > kFrozenGap) deadline += now - last;  // each look is 50 us apart
    last = now;
    if (now >= deadline || (stop && stop())) return false;
    if (spin < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return true;
}

Oplog::Oplog(const Config* config, int rank, device::Device* device, device::Stream* stream,
             ClientCounters* counters, SendFn send)
    : config_(config),
      rank_(rank),
      device_(device),
      stream_(stream),
      counters_(counters),
      send_(std::move(send)) {}

StatusOr<OplogSlot*> Oplog::Snapshot(TableCache& t, int64_t clock, bool checkpoint,
                                     const DirectUpdate* direct) {
  common::MutexLock lock(&t.mu);
  GEEPS_ASSIGN_OR_RETURN(OplogSlot * slot, Acquire(t));
  GEEPS_RETURN_IF_ERROR(Fill(t, *slot, clock, checkpoint, direct));
  return slot;
}

Status Oplog::Send(const TableCache& t, OplogSlot* slot) {
  for (int k : Channels(t, config_->num_channels)) GEEPS_RETURN_IF_ERROR(send_(k, t.id, slot));
  return Status::OK();
}

Status Oplog::Discard(TableCache& t) {
  common::MutexLock lock(&t.mu);
  if (t.oplog_dirty) {
    GEEPS_RETURN_IF_ERROR(Clear(t));
    t.oplog_dirty = false;
  }
  return Status::OK();
}

StatusOr<OplogSlot*> Oplog::Acquire(TableCache& t) {
  for (auto& s : t.slots) {
    // A slot ZeroMQ still sends from (zero-copy) waits.
    if (!s->in_use && s->transport_refs.load(std::memory_order_acquire) == 0) return s.get();
  }
  auto fresh = std::make_unique<OplogSlot>();
  if (t.floats() > 0) {
    GEEPS_ASSIGN_OR_RETURN(void* host, device_->AllocatePinned(t.floats() * sizeof(float)));
    slot_memory_.push_back(host);
    fresh->host = static_cast<float*>(host);
  }
  t.slots.push_back(std::move(fresh));
  return t.slots.back().get();
}

Status Oplog::Fill(TableCache& t, OplogSlot& slot, int64_t clock, bool checkpoint,
                   const DirectUpdate* direct) {
  slot.in_use = true;
  slot.clock = clock;
  slot.checkpoint = checkpoint;
  slot.dirty = t.oplog_dirty || direct != nullptr;
  slot.pending_sends = static_cast<int>(Channels(t, config_->num_channels).size());
  slot.send_from = nullptr;
  slot.send_refs = nullptr;
  const size_t w = t.width;
  if (direct != nullptr && direct->send_refs != nullptr) {
    // Host-readable device memory: the channels send the update from the
    // buffer itself once the application's writes to it are done.
    GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
    slot.send_from = static_cast<const float*>(device_->HostAlias(direct->buffer));
    slot.send_first_pos = direct->first_pos;
    slot.send_refs = direct->send_refs;
  } else if (direct != nullptr) {
    // The update's rows are the slot's positions first..first+n-1, all in
    // device memory (IterationPlan::direct_update); the oplog stays clean.
    GEEPS_RETURN_IF_ERROR(device_->Copy(slot.host + static_cast<size_t>(direct->first_pos) * w,
                                        direct->buffer, direct->floats * sizeof(float),
                                        device::CopyKind::kDeviceToHost, stream_));
    GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
    ClientCounters::Count(counters_->to_slot_bytes, direct->floats * sizeof(float));
  } else if (t.oplog_dirty) {
    // The slot holds the deltas by cached position, whichever side.
    ClientCounters::Count(counters_->to_slot_bytes, t.floats() * sizeof(float));
    for (const CacheRun& r : t.runs) {
      if (r.on_device) {
        GEEPS_RETURN_IF_ERROR(device_->Copy(slot.host + r.begin * w, t.oplog + r.at * w,
                                            r.count * w * sizeof(float),
                                            device::CopyKind::kDeviceToHost, stream_));
      } else {
        std::memcpy(slot.host + r.begin * w, t.host_oplog + r.at * w, r.count * w * sizeof(float));
      }
    }
    GEEPS_RETURN_IF_ERROR(Clear(t));
    t.oplog_dirty = false;
    if (config_->read_my_writes) {
      slot.retained = true;
      t.retained.push_back(&slot);
    }
  }
  return Status::OK();
}

Status Oplog::Clear(TableCache& t) {
  const size_t w = t.width;
  ClientCounters::Count(counters_->zero_bytes, (t.device_rows + t.host_rows) * w * sizeof(float));
  if (t.device_rows > 0)
    GEEPS_RETURN_IF_ERROR(device_->Fill(t.oplog, 0.0f, t.device_rows * w, stream_));
  if (t.host_rows > 0) std::memset(t.host_oplog, 0, t.host_rows * w * sizeof(float));
  return device_->Synchronize(stream_);
}

std::vector<int> Oplog::Channels(const TableCache& t, int num_channels) {
  std::vector<bool> seen(num_channels, false);
  std::vector<int> channels;
  for (const PartitionSlice& s : t.slices) {
    const int k = s.partition % num_channels;
    if (seen[k]) continue;
    seen[k] = true;
    channels.push_back(k);
  }
  return channels;
}

void Oplog::Release(TableCache& t, bool read_my_writes) {
  for (auto& slot : t.slots) {
    if (!slot->in_use || slot->pending_sends > 0) continue;
    if (t.retain_until_acked && !AllIncluded(t, slot->clock)) continue;
    if (slot->retained) {
      if (!read_my_writes || !AllIncluded(t, slot->clock)) continue;
      slot->retained = false;
      t.retained.erase(std::find(t.retained.begin(), t.retained.end(), slot.get()));
    }
    slot->in_use = false;
  }
}

bool Oplog::Names(const TableCache& t, const std::atomic<int>* refs) {
  for (const auto& slot : t.slots) {
    if (slot->in_use && slot->send_from != nullptr && slot->send_refs == refs) return true;
  }
  return false;
}

void Oplog::CopyIn(TableCache& t, const std::atomic<int>* refs, const float* from, size_t floats) {
  for (const auto& slot : t.slots) {
    if (!slot->in_use || slot->send_from == nullptr || slot->send_refs != refs) continue;
    std::memcpy(slot->host + static_cast<size_t>(slot->send_first_pos) * t.width, from,
                floats * sizeof(float));
    ClientCounters::Count(counters_->to_slot_bytes, floats * sizeof(float));
    slot->send_from = nullptr;
    slot->send_refs = nullptr;  // its own transport_refs from now on
  }
}

size_t Oplog::FreeSlots(const std::vector<std::unique_ptr<TableCache>>& tables,
                        std::chrono::milliseconds wait) {
  // The channels' sockets are closed; ZeroMQ sends what they queued within
  // their linger time (1 s) or drops it, and releases each zero-copy
  // message then. Wait a little longer than that.
  const auto deadline = SteadyClock::now() + wait;
  std::vector<void*> busy;
  for (const auto& t : tables) {
    if (!t) continue;
    for (const auto& slot : t->slots) {
      if (!WaitReleased(slot->transport_refs, deadline)) busy.push_back(slot->host);
    }
  }
  if (!busy.empty()) {
    GEEPS_LOG(Warning) << "worker " << rank_ << ": " << busy.size()
                       << " update buffer(s) still held by ZeroMQ at shutdown; not freed";
  }
  for (void* p : slot_memory_) {
    if (std::find(busy.begin(), busy.end(), p) == busy.end()) device_->FreePinned(p);
  }
  slot_memory_.clear();
  return busy.size();
}

}  // namespace geeps::client
