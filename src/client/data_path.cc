#include "client/data_path.h"

#include <algorithm>
#include <cstring>

#include "common/mutex.h"

namespace geeps::client {
namespace {

using SteadyClock = std::chrono::steady_clock;

}  // namespace

DataPath::DataPath(const Config* config, int rank, const OpSequence* seq, device::Device* device,
                   device::Stream* stream, ClientCounters* counters)
    : config_(config),
      rank_(rank),
      seq_(seq),
      device_(device),
      stream_(stream),
      counters_(counters) {}

// ---- Setup --------------------------------------------------------------------

Status DataPath::BuildTables(const IterationPlan& plan) {
  tables_.resize(config_->tables.size());
  local_tables_.assign(config_->tables.size(), nullptr);
  for (TableId id = 0; id < config_->tables.size(); ++id) {
    const TablePlan& tp = plan.table(id);
    if (!tp.shared) continue;
    auto t = std::make_unique<TableCache>();
    t->id = id;
    t->width = config_->tables[id].row_width;
    t->rows = tp.rows;
    t->slices = tp.slices;
    tables_[id] = std::move(t);
  }
  if (config_->device_memory_budget == 0) return Status::OK();
  GEEPS_ASSIGN_OR_RETURN(
      memory_, MemoryManager::Create(*config_, rank_, *seq_, tables_, FixedDeviceBytes(), device_));
  return Status::OK();
}

uint64_t DataPath::FixedDeviceBytes() const {
  uint64_t bytes = 0;  // the cache and oplogs are placed by the planner
  for (const auto* list : {&seq_->reads(), &seq_->updates()}) {
    for (const RecordedAccess& a : *list) bytes += a.rows.size() * sizeof(uint32_t);
  }
  for (const RecordedAccess& a : seq_->locals()) {
    if (ConsecutiveRows(a.rows)) continue;
    bytes +=
        a.rows.size() * (sizeof(uint32_t) + config_->tables[a.table].row_width * sizeof(float));
  }
  return bytes;
}

StatusOr<float*> DataPath::AllocFloats(size_t count) {
  if (count == 0) return static_cast<float*>(nullptr);
  GEEPS_ASSIGN_OR_RETURN(void* p, device_->Allocate(count * sizeof(float)));
  allocations_.push_back(p);
  return static_cast<float*>(p);
}

StatusOr<float*> DataPath::AllocPinned(size_t floats) {
  GEEPS_ASSIGN_OR_RETURN(void* host, device_->AllocatePinned(floats * sizeof(float)));
  pinned_allocations_.push_back(host);
  std::memset(host, 0, floats * sizeof(float));
  return static_cast<float*>(host);
}

StatusOr<uint32_t*> DataPath::UploadIndex(const std::vector<uint32_t>& index) {
  if (index.empty()) return static_cast<uint32_t*>(nullptr);
  const size_t bytes = index.size() * sizeof(uint32_t);
  GEEPS_ASSIGN_OR_RETURN(void* p, device_->Allocate(bytes));
  allocations_.push_back(p);
  GEEPS_RETURN_IF_ERROR(
      device_->Copy(p, index.data(), bytes, device::CopyKind::kHostToDevice, stream_));
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
  return static_cast<uint32_t*>(p);
}

Status DataPath::Allocate() {
  GEEPS_RETURN_IF_ERROR(AllocateTables());
  GEEPS_RETURN_IF_ERROR(BuildAccesses());
  return BuildSwapEngine();
}

Status DataPath::AllocateTables() {
  for (auto& t : tables_) {
    if (!t) continue;
    // Runs of consecutive positions on one side; each side indexed in order.
    const uint32_t n = static_cast<uint32_t>(t->rows.size());
    for (uint32_t p = 0; p < n; ++p) {
      const bool on_device = !memory_ || memory_->CacheRowsOnDevice(t->id)[p];
      if (t->runs.empty() || t->runs.back().on_device != on_device) {
        t->runs.push_back({p, 0, on_device, on_device ? t->device_rows : t->host_rows});
      }
      ++t->runs.back().count;
      ++(on_device ? t->device_rows : t->host_rows);
    }
    const size_t dev_floats = static_cast<size_t>(t->device_rows) * t->width;
    GEEPS_ASSIGN_OR_RETURN(t->cache, AllocFloats(dev_floats));
    GEEPS_ASSIGN_OR_RETURN(t->oplog, AllocFloats(dev_floats));
    if (dev_floats > 0) {
      GEEPS_RETURN_IF_ERROR(device_->Fill(t->cache, 0.0f, dev_floats, stream_));
      GEEPS_RETURN_IF_ERROR(device_->Fill(t->oplog, 0.0f, dev_floats, stream_));
    }
    const size_t host_floats = static_cast<size_t>(t->host_rows) * t->width;
    if (host_floats > 0) {
      GEEPS_ASSIGN_OR_RETURN(t->host_cache, AllocPinned(host_floats));
      GEEPS_ASSIGN_OR_RETURN(t->host_oplog, AllocPinned(host_floats));
    }
  }
  local_on_host_.assign(config_->tables.size(), false);
  for (const RecordedAccess& a : seq_->locals()) {
    if (local_tables_[a.table]) continue;
    const TableSpec& spec = config_->tables[a.table];
    const size_t floats = spec.num_rows * spec.row_width;
    if (memory_ && !memory_->LocalOnDevice(a.table)) {
      GEEPS_ASSIGN_OR_RETURN(local_tables_[a.table], AllocPinned(floats));
      local_on_host_[a.table] = true;
      continue;
    }
    GEEPS_ASSIGN_OR_RETURN(local_tables_[a.table], AllocFloats(floats));
    GEEPS_RETURN_IF_ERROR(device_->Fill(local_tables_[a.table], 0.0f, floats, stream_));
  }
  return device_->Synchronize(stream_);
}

Status DataPath::BuildCacheAccess(const RecordedAccess& a, const TableCache& t, AccessBuffers& b) {
  // Each requested row's side and index there, from its cached position.
  std::vector<uint32_t> device_index;
  const std::vector<uint32_t> pos = CachedPositions(t.rows, a.rows);
  for (uint32_t i = 0; i < pos.size(); ++i) {
    const CacheRun where = t.Locate(pos[i]);
    std::vector<uint32_t>& index = where.on_device ? device_index : b.host_index;
    if (b.runs.empty() || b.runs.back().on_device != where.on_device)
      b.runs.push_back({i, 0, where.on_device, static_cast<uint32_t>(index.size())});
    ++b.runs.back().count;
    index.push_back(where.at);
  }
  b.host_count = static_cast<uint32_t>(b.host_index.size());
  GEEPS_ASSIGN_OR_RETURN(b.index, UploadIndex(device_index));
  if (b.host_count > 0) {
    GEEPS_ASSIGN_OR_RETURN(void* staging,
                           device_->AllocatePinned(b.host_count * t.width * sizeof(float)));
    pinned_allocations_.push_back(staging);
    b.staging = static_cast<float*>(staging);
  }
  return Status::OK();
}

Status DataPath::BuildAccesses() {
  for (auto* which : {&read_bufs_, &update_bufs_}) {
    const std::vector<RecordedAccess>& list =
        which == &read_bufs_ ? seq_->reads() : seq_->updates();
    which->resize(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const RecordedAccess& a = list[i];
      TableCache& t = *tables_[a.table];
      AccessBuffers& b = (*which)[i];
      b.pooled = memory_ != nullptr;
      if (!b.pooled) {
        GEEPS_ASSIGN_OR_RETURN(b.buffer, AllocFloats(a.rows.size() * t.width));
      }
      GEEPS_RETURN_IF_ERROR(BuildCacheAccess(a, t, b));
    }
  }
  local_bufs_.resize(seq_->locals().size());
  for (size_t i = 0; i < seq_->locals().size(); ++i) {
    const RecordedAccess& a = seq_->locals()[i];
    const uint32_t width = config_->tables[a.table].row_width;
    AccessBuffers& b = local_bufs_[i];
    if (local_on_host_[a.table]) {
      // In host memory: a pool buffer while open, filled from / written back
      // to the rows in place (consecutive) or through a pinned staging buffer.
      b.pooled = true;
      if (ConsecutiveRows(a.rows)) {
        b.host_rows = local_tables_[a.table] + a.rows[0] * width;
      } else {
        GEEPS_ASSIGN_OR_RETURN(void* staging,
                               device_->AllocatePinned(a.rows.size() * width * sizeof(float)));
        pinned_allocations_.push_back(staging);
        b.staging = static_cast<float*>(staging);
      }
      continue;
    }
    if (ConsecutiveRows(a.rows)) {
      b.contiguous = true;
      b.direct = local_tables_[a.table] + a.rows[0] * width;
      continue;
    }
    GEEPS_ASSIGN_OR_RETURN(b.buffer, AllocFloats(a.rows.size() * width));
    std::vector<uint32_t> index(a.rows.begin(), a.rows.end());
    GEEPS_ASSIGN_OR_RETURN(b.index, UploadIndex(index));
  }
  return Status::OK();
}

Status DataPath::BuildSwapEngine() {
  if (!memory_ || config_->prefetch_depth == 0 ||
      memory_->plan().level < memory::Level::kDoubleBuffering)
    return Status::OK();  // no headroom to prefetch into: swap at the access
  std::vector<SwapEngine::Access> accesses(seq_->locals().size());
  bool any = false;
  for (size_t i = 0; i < accesses.size(); ++i) {
    const RecordedAccess& a = seq_->locals()[i];
    if (!local_on_host_[a.table]) continue;
    SwapEngine::Access& x = accesses[i];
    x.swapped = any = true;
    x.table = a.table;
    x.width = config_->tables[a.table].row_width;
    x.rows = a.rows;
    x.table_base = local_tables_[a.table];
    x.host_rows = local_bufs_[i].host_rows;
    x.staging = local_bufs_[i].staging;
    x.fetch = a.fetch;
    x.keep = a.writes_back();  // a read-only access has nothing to write back
  }
  if (!any) return Status::OK();
  std::vector<SwapEngine::Event> events[2];
  for (int s = 0; s < 2; ++s) {
    for (const Op& op : seq_->ops(static_cast<Section>(s))) {
      const bool open = op.type == OpType::kLocalAccess;
      if ((open || op.type == OpType::kPostLocalAccess) && accesses[op.handle].swapped)
        events[s].push_back({open, op.handle});
    }
  }
  swap_ = std::make_unique<SwapEngine>(device_, memory_.get(), std::move(accesses),
                                       std::move(events[kPrologue]), std::move(events[kRepeated]),
                                       config_->prefetch_depth, config_->timeout);
  return Status::OK();
}

std::vector<bool> DataPath::CacheOnDevice() const {
  std::vector<bool> on_device(config_->tables.size(), false);
  for (const auto& t : tables_) {
    if (t) on_device[t->id] = t->host_rows == 0;
  }
  return on_device;
}

void DataPath::PlanSendInPlace(const IterationPlan& plan) {
  // Not isolated (a write after Update would reach the servers): only when
  // asked for, and never in the checked mode (which poisons the buffer).
  if (!config_->send_updates_in_place || config_->checked) return;
  for (size_t h = 0; h < update_bufs_.size(); ++h) {
    // Sent in place: a buffer of its own (not the pool's, which another
    // access may take while ZeroMQ still reads it) that the host can read.
    AccessBuffers& b = update_bufs_[h];
    if (plan.direct_update(static_cast<int32_t>(h)) && !b.pooled && b.buffer != nullptr &&
        device_->HostAlias(b.buffer) != nullptr)
      b.send_refs = std::make_shared<std::atomic<int>>(0);
  }
}

// ---- Reads and updates ---------------------------------------------------------

Status DataPath::AcquireBuffer(AccessBuffers& b, uint64_t bytes, MemoryManager::AccessRef who) {
  if (!b.pooled) return Status::OK();
  GEEPS_ASSIGN_OR_RETURN(b.buffer, memory_->Acquire(bytes, config_->timeout, &who));
  return Status::OK();
}

Status DataPath::ReleaseBuffer(AccessBuffers& b) {
  if (!b.pooled || b.buffer == nullptr) return Status::OK();
  // The application's work on the buffer may still be queued on the
  // stream: the swap engine's copies into pool buffers wait for this point.
  Status st = swap_ ? swap_->NoteRelease(stream_) : Status::OK();
  memory_->Release(b.buffer);
  b.buffer = nullptr;
  return st;
}

Status DataPath::Materialize(TableCache& t, const std::vector<int>& slices) {
  bool copied = false;
  for (int si : slices) {
    const PartitionSlice& s = t.slices[si];
    if (s.adopted == nullptr) continue;
    const size_t floats = static_cast<size_t>(s.cache_count) * t.width;
    ClientCounters::Count(counters_->install_bytes, floats * sizeof(float));
    // Kept only where the slice's rows are one piece of device memory.
    const CacheRun at = t.Locate(s.cache_begin);
    GEEPS_RETURN_IF_ERROR(device_->Copy(t.cache + static_cast<size_t>(at.at) * t.width,
                                        s.adopted->rows(), floats * sizeof(float),
                                        device::CopyKind::kDeviceToDevice, stream_));
    copied = true;
  }
  if (!copied) return Status::OK();
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
  for (int si : slices) t.slices[si].adopted.reset();
  return Status::OK();
}

Status DataPath::Gather(int32_t h, TableCache& t) {
  AccessBuffers& b = read_bufs_[h];
  const size_t w = t.width;
  for (const AccessRun& r : b.runs) {
    ClientCounters::Count(counters_->gather_bytes, r.count * w * sizeof(float));
    if (!r.on_device) continue;
    GEEPS_RETURN_IF_ERROR(
        device_->Gather(b.buffer + r.out * w, t.cache, b.index + r.index_at, r.count, w, stream_));
  }
  if (b.host_count > 0) {
    // Rows in host memory: gathered on the host, copied in behind the
    // device gathers (the same stream).
    const auto start = SteadyClock::now();
    for (uint32_t i = 0; i < b.host_count; ++i)
      std::memcpy(b.staging + i * w, t.host_cache + b.host_index[i] * w, w * sizeof(float));
    for (const AccessRun& r : b.runs) {
      if (r.on_device) continue;
      GEEPS_RETURN_IF_ERROR(device_->Copy(b.buffer + r.out * w, b.staging + r.index_at * w,
                                          r.count * w * sizeof(float),
                                          device::CopyKind::kHostToDevice, stream_));
    }
    GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
    memory_->AddCopy(true, b.host_count * w * sizeof(float));
    memory_->AddStall({MemoryManager::Kind::kRead, h}, SteadyClock::now() - start);
    return Status::OK();
  }
  return device_->Synchronize(stream_);
}

Status DataPath::CloseInPlaceRead(TableCache& t, AccessBuffers& b) {
  --t.open_in_place_reads;
  b.open_in_place = false;
  if (b.adopted != nullptr) {
    std::shared_ptr<const AdoptedRows> rows = std::move(b.adopted);
    return device_->HostFunction([rows]() mutable { rows.reset(); }, stream_);
  }
  if (t.in_place_reads_done == nullptr) {
    GEEPS_ASSIGN_OR_RETURN(t.in_place_reads_done, device_->CreateEvent());
  }
  GEEPS_RETURN_IF_ERROR(device_->Record(t.in_place_reads_done.get(), stream_));
  t.in_place_reads_recorded = true;
  return Status::OK();
}

Status DataPath::Scatter(int32_t h, bool read_my_writes) {
  AccessBuffers& b = update_bufs_[h];
  TableCache& t = *tables_[seq_->updates()[h].table];
  {
    common::MutexLock lock(&t.mu);
    const size_t w = t.width;
    const bool rmw = read_my_writes;
    const auto start = SteadyClock::now();
    for (const AccessRun& r : b.runs) {
      ClientCounters::Count(counters_->scatter_add_bytes,
                            (rmw ? 2 : 1) * r.count * w * sizeof(float));
      if (r.on_device) {
        for (float* dst : {t.oplog, rmw ? t.cache : nullptr}) {
          if (dst == nullptr) continue;
          GEEPS_RETURN_IF_ERROR(device_->ScatterAdd(dst, b.buffer + r.out * w, b.index + r.index_at,
                                                    r.count, w, stream_));
        }
      } else {
        GEEPS_RETURN_IF_ERROR(device_->Copy(b.staging + r.index_at * w, b.buffer + r.out * w,
                                            r.count * w * sizeof(float),
                                            device::CopyKind::kDeviceToHost, stream_));
      }
    }
    GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
    if (b.host_count > 0) {
      // Deltas of rows in host memory are added there, on the host.
      for (uint32_t i = 0; i < b.host_count; ++i) {
        const float* d = b.staging + i * w;
        for (float* dst : {t.host_oplog, rmw ? t.host_cache : nullptr}) {
          if (dst == nullptr) continue;
          float* row = dst + b.host_index[i] * w;
          for (size_t j = 0; j < w; ++j) row[j] += d[j];
        }
      }
      memory_->AddCopy(false, b.host_count * w * sizeof(float));
      memory_->AddStall({MemoryManager::Kind::kUpdate, h}, SteadyClock::now() - start);
    }
    t.oplog_dirty = true;
  }
  return ReleaseBuffer(b);
}

StatusOr<float*> DataPath::PrepareUpdate(int32_t h, Oplog& oplog, std::chrono::milliseconds timeout,
                                         const std::function<Status()>& peer_failure) {
  const RecordedAccess& a = seq_->updates()[h];
  AccessBuffers& b = update_bufs_[h];
  const size_t floats = a.rows.size() * config_->tables[a.table].row_width;
  GEEPS_RETURN_IF_ERROR(
      AcquireBuffer(b, floats * sizeof(float), {MemoryManager::Kind::kUpdate, h}));
  if (b.send_refs && tables_[a.table]->retain_until_acked)
    GEEPS_RETURN_IF_ERROR(FreeKeptBuffer(b, *tables_[a.table], oplog, floats));
  // Unless a Read zeroed it while it waited (ZeroReleasedUpdateBuffers).
  if (b.zeroing != AccessBuffers::Zeroing::kDone) {
    // The previous clock's update may still be leaving from this buffer
    // (under SSP the application can get here first): wait for ZeroMQ.
    Status failed;
    const auto peers_failed = [&] {
      if (peer_failure) failed = peer_failure();
      return !failed.ok();
    };
    if (b.send_refs && !WaitReleased(*b.send_refs, SteadyClock::now() + timeout, peers_failed)) {
      if (!failed.ok()) return failed;
      return DeadlineExceededError("PreUpdate(update#" + std::to_string(h) +
                                   "): the previous update is still being sent from its "
                                   "buffer after " +
                                   std::to_string(timeout.count()) + " ms (is the network stuck?)");
    }
    b.zeroing = AccessBuffers::Zeroing::kNone;
    if (a.zeroed) GEEPS_RETURN_IF_ERROR(ZeroBuffer(b.buffer, floats));
  }
  b.zeroing = AccessBuffers::Zeroing::kNone;
  return b.buffer;
}

Status DataPath::FreeKeptBuffer(AccessBuffers& b, TableCache& t, Oplog& oplog, size_t floats) {
  common::MutexLock lock(&t.mu);
  if (!Oplog::Names(t, b.send_refs.get())) return Status::OK();
  if (b.alt == nullptr && memory_ == nullptr) {
    GEEPS_ASSIGN_OR_RETURN(b.alt, AllocFloats(floats));
    if (device_->HostAlias(b.alt) == nullptr)
      return InternalError("an update buffer of the host backend is not host-readable");
    b.alt_refs = std::make_shared<std::atomic<int>>(0);
    b.alt_zeroing = AccessBuffers::Zeroing::kNone;
  }
  if (b.alt != nullptr && !Oplog::Names(t, b.alt_refs.get())) {
    std::swap(b.buffer, b.alt);
    std::swap(b.send_refs, b.alt_refs);
    std::swap(b.zeroing, b.alt_zeroing);
    return Status::OK();
  }
  // Both are kept (more clocks in flight than two, under SSP): the slots
  // take a copy of this one's update.
  oplog.CopyIn(t, b.send_refs.get(), static_cast<const float*>(device_->HostAlias(b.buffer)),
               floats);
  return Status::OK();
}

Status DataPath::ZeroBuffer(float* buffer, size_t floats) {
  GEEPS_RETURN_IF_ERROR(device_->Fill(buffer, 0.0f, floats, stream_));
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
  ClientCounters::Count(counters_->zero_bytes, floats * sizeof(float));
  return Status::OK();
}

bool DataPath::ZeroReleasedUpdateBuffers() {
  bool held = false;
  for (size_t h = 0; h < update_bufs_.size(); ++h) {
    AccessBuffers& b = update_bufs_[h];
    const RecordedAccess& a = seq_->updates()[h];
    if (!a.zeroed) continue;  // PreUpdate waits for the buffer itself
    const size_t floats = a.rows.size() * config_->tables[a.table].row_width;
    // The buffer PreUpdate hands out next, and the other one (resend).
    struct Side {
      float* buffer;
      std::atomic<int>* refs;
      AccessBuffers::Zeroing* zeroing;
    };
    for (const Side& side : {Side{b.buffer, b.send_refs.get(), &b.zeroing},
                             Side{b.alt, b.alt_refs.get(), &b.alt_zeroing}}) {
      if (side.buffer == nullptr || *side.zeroing != AccessBuffers::Zeroing::kPending) continue;
      if (side.refs->load(std::memory_order_acquire) > 0) {
        held = true;
        continue;
      }
      TableCache& t = *tables_[a.table];
      if (t.retain_until_acked) {
        // Kept for resending until a push acknowledges it: that push is
        // what this thread waits for, so no need to look again sooner.
        common::MutexLock lock(&t.mu);
        if (Oplog::Names(t, side.refs)) continue;
      }
      // On an error PreUpdate zeroes it again, and reports the error then.
      *side.zeroing = ZeroBuffer(side.buffer, floats).ok() ? AccessBuffers::Zeroing::kDone
                                                           : AccessBuffers::Zeroing::kNone;
    }
  }
  return held;
}

// ---- Local data --------------------------------------------------------------

Status DataPath::SwapLocal(const RecordedAccess& a, const AccessBuffers& b, bool to_device,
                           int handle) {
  const uint32_t width = config_->tables[a.table].row_width;
  const size_t floats = a.rows.size() * width;
  const size_t bytes = floats * sizeof(float);
  const auto start = SteadyClock::now();
  float* host = b.host_rows ? b.host_rows : b.staging;
  float* table = local_tables_[a.table];
  if (to_device && b.staging) {  // gather the scattered rows on the host
    for (size_t i = 0; i < a.rows.size(); ++i)
      std::memcpy(b.staging + i * width, table + a.rows[i] * width, width * sizeof(float));
  }
  GEEPS_RETURN_IF_ERROR(device_->Copy(
      to_device ? static_cast<void*>(b.buffer) : host,
      to_device ? static_cast<const void*>(host) : b.buffer, bytes,
      to_device ? device::CopyKind::kHostToDevice : device::CopyKind::kDeviceToHost, stream_));
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
  if (!to_device && b.staging) {  // scatter them back
    for (size_t i = 0; i < a.rows.size(); ++i)
      std::memcpy(table + a.rows[i] * width, b.staging + i * width, width * sizeof(float));
  }
  memory_->AddCopy(to_device, bytes);
  memory_->AddStall({MemoryManager::Kind::kLocal, handle}, SteadyClock::now() - start);
  return Status::OK();
}

StatusOr<float*> DataPath::OpenLocal(int32_t h) {
  const RecordedAccess& a = seq_->locals()[h];
  AccessBuffers& b = local_bufs_[h];
  const uint32_t width = config_->tables[a.table].row_width;
  if (b.pooled) {
    if (swap_) {
      GEEPS_ASSIGN_OR_RETURN(b.buffer, swap_->Open(h));
    } else {
      GEEPS_RETURN_IF_ERROR(AcquireBuffer(b, a.rows.size() * width * sizeof(float),
                                          {MemoryManager::Kind::kLocal, h}));
      if (a.fetch) GEEPS_RETURN_IF_ERROR(SwapLocal(a, b, /*to_device=*/true, h));
    }
    return b.buffer;
  }
  if (b.contiguous) return b.direct;
  if (a.fetch) {
    GEEPS_RETURN_IF_ERROR(
        device_->Gather(b.buffer, local_tables_[a.table], b.index, a.rows.size(), width, stream_));
    GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_));
  }
  return b.buffer;
}

Status DataPath::CloseLocal(int32_t h) {
  const RecordedAccess& a = seq_->locals()[h];
  AccessBuffers& b = local_bufs_[h];
  if (b.pooled && swap_) {
    float* buffer = b.buffer;
    b.buffer = nullptr;
    return swap_->Close(h, buffer, stream_);
  }
  if (b.pooled) {
    if (a.writes_back()) GEEPS_RETURN_IF_ERROR(SwapLocal(a, b, /*to_device=*/false, h));
    return ReleaseBuffer(b);
  }
  if (!b.contiguous && a.writes_back()) {
    GEEPS_RETURN_IF_ERROR(device_->Scatter(local_tables_[a.table], b.buffer, b.index, a.rows.size(),
                                           config_->tables[a.table].row_width, stream_));
    return device_->Synchronize(stream_);
  }
  return Status::OK();
}

// ---- Between iterations ------------------------------------------------------

Status DataPath::CopyRows(TableId table, const std::vector<RowIndex>& rows, float* out) {
  const TableSpec& spec = config_->tables[table];
  const size_t row_bytes = spec.row_width * sizeof(float);
  if (spec.local && swap_) GEEPS_RETURN_IF_ERROR(swap_->Drain());
  if (spec.local) {
    for (size_t i = 0; i < rows.size(); ++i) {
      if (local_tables_[table] == nullptr) {
        std::fill(out + i * spec.row_width, out + (i + 1) * spec.row_width, 0.0f);
        continue;
      }
      if (local_on_host_[table]) {
        std::memcpy(out + i * spec.row_width, local_tables_[table] + rows[i] * spec.row_width,
                    row_bytes);
        continue;
      }
      GEEPS_RETURN_IF_ERROR(device_->Copy(out + i * spec.row_width,
                                          local_tables_[table] + rows[i] * spec.row_width,
                                          row_bytes, device::CopyKind::kDeviceToHost, stream_));
    }
    return device_->Synchronize(stream_);
  }
  TableCache& t = *tables_[table];
  common::MutexLock lock(&t.mu);
  std::vector<int> all(t.slices.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  GEEPS_RETURN_IF_ERROR(Materialize(t, all));
  for (size_t i = 0; i < rows.size(); ++i) {
    auto it = std::lower_bound(t.rows.begin(), t.rows.end(), rows[i]);
    if (it == t.rows.end() || *it != rows[i])
      return InvalidArgumentError("CopyRows: row " + std::to_string(rows[i]) + " of table " +
                                  std::to_string(table) +
                                  " is not in this worker's cache (it neither reads nor "
                                  "updates it)");
    const CacheRun where = t.Locate(static_cast<uint32_t>(it - t.rows.begin()));
    float* dst = out + i * spec.row_width;
    if (!where.on_device) {
      std::memcpy(dst, t.host_cache + where.at * spec.row_width, row_bytes);
      continue;
    }
    GEEPS_RETURN_IF_ERROR(device_->Copy(dst, t.cache + where.at * spec.row_width, row_bytes,
                                        device::CopyKind::kDeviceToHost, stream_));
  }
  return device_->Synchronize(stream_);
}

// ---- The end -----------------------------------------------------------------

bool DataPath::UpdateBuffersStillSending() const {
  // As Oplog::FreeSlots: within ZeroMQ's linger time, and a little more.
  const auto deadline = SteadyClock::now() + kReleaseWait;
  for (const AccessBuffers& b : update_bufs_) {
    if (b.send_refs && !WaitReleased(*b.send_refs, deadline)) return true;
    if (b.alt_refs && !WaitReleased(*b.alt_refs, deadline)) return true;
  }
  return false;
}

void DataPath::DropManagers() {
  swap_.reset();
  memory_.reset();  // its pool lives in device memory
}

void DataPath::FreeMemory() {
  // Pushes kept in their messages are mapped into the device: unmapped
  // here, while it lives.
  for (AccessBuffers& b : read_bufs_) b.adopted.reset();
  for (auto& t : tables_) {
    if (t == nullptr) continue;
    common::MutexLock lock(&t->mu);
    for (PartitionSlice& s : t->slices) s.adopted.reset();
  }
  for (void* p : allocations_) device_->Free(p);
  allocations_.clear();
  for (void* p : pinned_allocations_) device_->FreePinned(p);
  pinned_allocations_.clear();
}

}  // namespace geeps::client
