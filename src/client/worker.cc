#include "client/worker.h"

#include "common/env_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/logging.h"
#include "transport/socket_util.h"

namespace geeps::client {
namespace {

using SteadyClock = std::chrono::steady_clock;

}  // namespace

Worker::Worker(const Config& config, int rank, zmq::context_t* zmq_context,
               std::vector<std::string> partition_endpoints,
               const transport::SecurityConfig* security)
    : config_(config),
      rank_(rank),
      zmq_context_(zmq_context),
      partition_endpoints_(std::move(partition_endpoints)),
      security_(security),
      seq_(&config_) {}

Worker::~Worker() {
  Shutdown().ok();
  if (wait_.wake_fd >= 0) ::close(wait_.wake_fd);
  swap_.reset();
  memory_.reset();  // its pool lives in device memory
  if (device_ && UpdateBuffersStillSending()) {
    // ZeroMQ still reads an update buffer in device (host) memory: leave
    // the device's memory allocated rather than free it under its reader.
    GEEPS_LOG(Warning) << "worker " << rank_
                       << ": an update buffer is still held by ZeroMQ at shutdown; its device "
                          "memory is not freed";
    (void)stream_.release();
    (void)device_.release();
    return;
  }
  if (device_) {
    for (void* p : allocations_) device_->Free(p);
    for (void* p : pinned_allocations_) device_->FreePinned(p);
    // Slots ZeroMQ still holds are leaked with a warning.
    if (oplog_) oplog_->FreeSlots(tables_, kReleaseWait);
  }
  stream_.reset();
  device_.reset();
}

bool Worker::UpdateBuffersStillSending() const {
  // As SlotsStillSending(): within ZeroMQ's linger time, and a little more.
  const auto deadline = SteadyClock::now() + kReleaseWait;
  for (const AccessBuffers& b : update_bufs_) {
    if (b.send_refs && !WaitReleased(*b.send_refs, deadline)) return true;
    if (b.alt_refs && !WaitReleased(*b.alt_refs, deadline)) return true;
  }
  return false;
}

// ---- Phase 1 ----------------------------------------------------------------

Status Worker::CheckRecording(const char* call) const {
  if (phase_ == Phase::kShutDown)
    return FailedPreconditionError(std::string(call) + ": the worker is shut down");
  if (phase_ != Phase::kRecording)
    return FailedPreconditionError(std::string(call) +
                                   ": the virtual iteration is already finished");
  return Status::OK();
}

StatusOr<ReadHandle> Worker::VirtualRead(TableId table, const std::vector<RowIndex>& rows,
                                         int slack) {
  std::lock_guard<std::mutex> lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualRead"));
  return seq_.AddRead(table, rows, slack);
}

Status Worker::VirtualPostRead(ReadHandle h) {
  std::lock_guard<std::mutex> lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualPostRead"));
  return seq_.AddPostRead(h);
}

StatusOr<UpdateHandle> Worker::VirtualPreUpdate(TableId table, const std::vector<RowIndex>& rows) {
  std::lock_guard<std::mutex> lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualPreUpdate"));
  return seq_.AddPreUpdate(table, rows);
}

Status Worker::VirtualUpdate(UpdateHandle h) {
  std::lock_guard<std::mutex> lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualUpdate"));
  return seq_.AddUpdate(h);
}

StatusOr<LocalHandle> Worker::VirtualLocalAccess(TableId table, const std::vector<RowIndex>& rows,
                                                 bool fetch) {
  std::lock_guard<std::mutex> lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualLocalAccess"));
  return seq_.AddLocalAccess(table, rows, fetch);
}

StatusOr<LocalHandle> Worker::VirtualLocalRead(TableId table, const std::vector<RowIndex>& rows) {
  std::lock_guard<std::mutex> lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualLocalRead"));
  return seq_.AddLocalAccess(table, rows, /*fetch=*/true, /*read_only=*/true);
}

Status Worker::VirtualPostLocalAccess(LocalHandle h, bool keep) {
  std::lock_guard<std::mutex> lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualPostLocalAccess"));
  return seq_.AddPostLocalAccess(h, keep);
}

Status Worker::VirtualClock() {
  std::lock_guard<std::mutex> lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualClock"));
  return seq_.AddClock();
}

uint64_t Worker::FixedDeviceBytes() const {
  uint64_t bytes = 0;  // the cache and oplogs are placed by the planner
  for (const auto* list : {&seq_.reads(), &seq_.updates()}) {
    for (const RecordedAccess& a : *list) bytes += a.rows.size() * sizeof(uint32_t);
  }
  for (const RecordedAccess& a : seq_.locals()) {
    if (ConsecutiveRows(a.rows)) continue;
    bytes += a.rows.size() * (sizeof(uint32_t) + config_.tables[a.table].row_width * sizeof(float));
  }
  return bytes;
}

StatusOr<float*> Worker::AllocFloats(size_t count) {
  if (count == 0) return static_cast<float*>(nullptr);
  GEEPS_ASSIGN_OR_RETURN(void* p, device_->Allocate(count * sizeof(float)));
  allocations_.push_back(p);
  return static_cast<float*>(p);
}

StatusOr<uint32_t*> Worker::UploadIndex(const std::vector<uint32_t>& index) {
  if (index.empty()) return static_cast<uint32_t*>(nullptr);
  const size_t bytes = index.size() * sizeof(uint32_t);
  GEEPS_ASSIGN_OR_RETURN(void* p, device_->Allocate(bytes));
  allocations_.push_back(p);
  GEEPS_RETURN_IF_ERROR(
      device_->Copy(p, index.data(), bytes, device::CopyKind::kHostToDevice, stream_.get()));
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_.get()));
  return static_cast<uint32_t*>(p);
}

Status Worker::BuildTables() {
  plan_ = std::make_unique<IterationPlan>(config_, seq_);
  tables_.resize(config_.tables.size());
  local_tables_.assign(config_.tables.size(), nullptr);
  for (TableId id = 0; id < config_.tables.size(); ++id) {
    const TablePlan& plan = plan_->table(id);
    if (!plan.shared) continue;
    auto t = std::make_unique<TableCache>();
    t->id = id;
    t->width = config_.tables[id].row_width;
    t->rows = plan.rows;
    t->slices = plan.slices;
    tables_[id] = std::move(t);
  }
  return Status::OK();
}

Status Worker::AllocateTables() {
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
      GEEPS_RETURN_IF_ERROR(device_->Fill(t->cache, 0.0f, dev_floats, stream_.get()));
      GEEPS_RETURN_IF_ERROR(device_->Fill(t->oplog, 0.0f, dev_floats, stream_.get()));
    }
    const size_t host_floats = static_cast<size_t>(t->host_rows) * t->width;
    if (host_floats > 0) {
      for (float** p : {&t->host_cache, &t->host_oplog}) {
        GEEPS_ASSIGN_OR_RETURN(void* host, device_->AllocatePinned(host_floats * sizeof(float)));
        pinned_allocations_.push_back(host);
        std::memset(host, 0, host_floats * sizeof(float));
        *p = static_cast<float*>(host);
      }
    }
  }
  local_on_host_.assign(config_.tables.size(), false);
  for (const RecordedAccess& a : seq_.locals()) {
    if (local_tables_[a.table]) continue;
    const TableSpec& spec = config_.tables[a.table];
    const size_t floats = spec.num_rows * spec.row_width;
    if (memory_ && !memory_->LocalOnDevice(a.table)) {
      GEEPS_ASSIGN_OR_RETURN(void* host, device_->AllocatePinned(floats * sizeof(float)));
      pinned_allocations_.push_back(host);
      std::memset(host, 0, floats * sizeof(float));
      local_tables_[a.table] = static_cast<float*>(host);
      local_on_host_[a.table] = true;
      continue;
    }
    GEEPS_ASSIGN_OR_RETURN(local_tables_[a.table], AllocFloats(floats));
    GEEPS_RETURN_IF_ERROR(device_->Fill(local_tables_[a.table], 0.0f, floats, stream_.get()));
  }
  return device_->Synchronize(stream_.get());
}

Status Worker::BuildCacheAccess(const RecordedAccess& a, const TableCache& t, AccessBuffers& b) {
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

Status Worker::GatherFromCache(TableCache& t, AccessBuffers& b, int handle) {
  const size_t w = t.width;
  for (const AccessRun& r : b.runs) {
    ClientCounters::Count(counters_.gather_bytes, r.count * w * sizeof(float));
    if (!r.on_device) continue;
    GEEPS_RETURN_IF_ERROR(device_->Gather(b.buffer + r.out * w, t.cache, b.index + r.index_at,
                                          r.count, w, stream_.get()));
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
                                          device::CopyKind::kHostToDevice, stream_.get()));
    }
    GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_.get()));
    memory_->AddCopy(true, b.host_count * w * sizeof(float));
    memory_->AddStall({MemoryManager::Kind::kRead, handle}, SteadyClock::now() - start);
    return Status::OK();
  }
  return device_->Synchronize(stream_.get());
}

Status Worker::ScatterToCache(TableCache& t, AccessBuffers& b, int handle) {
  const size_t w = t.width;
  // A resumed job's prologue updates are discarded (not applied anywhere).
  const bool rmw = config_.read_my_writes && !DiscardingPrologue();
  const auto start = SteadyClock::now();
  for (const AccessRun& r : b.runs) {
    ClientCounters::Count(counters_.scatter_add_bytes, (rmw ? 2 : 1) * r.count * w * sizeof(float));
    if (r.on_device) {
      for (float* dst : {t.oplog, rmw ? t.cache : nullptr}) {
        if (dst == nullptr) continue;
        GEEPS_RETURN_IF_ERROR(device_->ScatterAdd(dst, b.buffer + r.out * w, b.index + r.index_at,
                                                  r.count, w, stream_.get()));
      }
    } else {
      GEEPS_RETURN_IF_ERROR(device_->Copy(b.staging + r.index_at * w, b.buffer + r.out * w,
                                          r.count * w * sizeof(float),
                                          device::CopyKind::kDeviceToHost, stream_.get()));
    }
  }
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_.get()));
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
    memory_->AddStall({MemoryManager::Kind::kUpdate, handle}, SteadyClock::now() - start);
  }
  return Status::OK();
}

Status Worker::BuildAccesses() {
  read_bufs_.resize(seq_.reads().size());
  for (size_t i = 0; i < seq_.reads().size(); ++i) {
    const RecordedAccess& a = seq_.reads()[i];
    TableCache& t = *tables_[a.table];
    AccessBuffers& b = read_bufs_[i];
    b.pooled = memory_ != nullptr;
    if (!b.pooled) {
      GEEPS_ASSIGN_OR_RETURN(b.buffer, AllocFloats(a.rows.size() * t.width));
    }
    GEEPS_RETURN_IF_ERROR(BuildCacheAccess(a, t, b));
  }
  update_bufs_.resize(seq_.updates().size());
  for (size_t i = 0; i < seq_.updates().size(); ++i) {
    const RecordedAccess& a = seq_.updates()[i];
    TableCache& t = *tables_[a.table];
    AccessBuffers& b = update_bufs_[i];
    b.pooled = memory_ != nullptr;
    if (!b.pooled) {
      GEEPS_ASSIGN_OR_RETURN(b.buffer, AllocFloats(a.rows.size() * t.width));
    }
    GEEPS_RETURN_IF_ERROR(BuildCacheAccess(a, t, b));
  }
  local_bufs_.resize(seq_.locals().size());
  for (size_t i = 0; i < seq_.locals().size(); ++i) {
    const RecordedAccess& a = seq_.locals()[i];
    const uint32_t width = config_.tables[a.table].row_width;
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

Status Worker::BuildSwapEngine() {
  if (!memory_ || config_.prefetch_depth == 0 ||
      memory_->plan().level < memory::Level::kDoubleBuffering)
    return Status::OK();  // no headroom to prefetch into: swap at the access
  std::vector<SwapEngine::Access> accesses(seq_.locals().size());
  bool any = false;
  for (size_t i = 0; i < accesses.size(); ++i) {
    const RecordedAccess& a = seq_.locals()[i];
    if (!local_on_host_[a.table]) continue;
    SwapEngine::Access& x = accesses[i];
    x.swapped = any = true;
    x.table = a.table;
    x.width = config_.tables[a.table].row_width;
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
    for (const Op& op : seq_.ops(static_cast<Section>(s))) {
      const bool open = op.type == OpType::kLocalAccess;
      if ((open || op.type == OpType::kPostLocalAccess) && accesses[op.handle].swapped)
        events[s].push_back({open, op.handle});
    }
  }
  swap_ = std::make_unique<SwapEngine>(device_.get(), memory_.get(), std::move(accesses),
                                       std::move(events[kPrologue]), std::move(events[kRepeated]),
                                       config_.prefetch_depth, config_.timeout);
  return Status::OK();
}

void Worker::PlanDirectPaths() {
  std::vector<bool> cache_on_device(config_.tables.size(), false);
  for (const auto& t : tables_) {
    if (t) cache_on_device[t->id] = t->host_rows == 0;
  }
  plan_->PlaceCaches(cache_on_device);
  for (size_t h = 0; h < update_bufs_.size(); ++h) {
    // A direct update is sent in place from a buffer of its own (not the
    // pool's, which another access may take while ZeroMQ still reads it)
    // that the host can read.
    AccessBuffers& b = update_bufs_[h];
    if (plan_->direct_update(static_cast<int32_t>(h)) && !b.pooled && b.buffer != nullptr &&
        device_->HostAlias(b.buffer) != nullptr)
      b.send_refs = std::make_shared<std::atomic<int>>(0);
  }
}

Status Worker::FinishVirtualIteration() {
  std::lock_guard<std::mutex> lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("FinishVirtualIteration"));
  GEEPS_RETURN_IF_ERROR(seq_.Finish());
  auto fail = [this](Status st) {
    for (auto& c : channels_) c->Stop();
    phase_ = Phase::kShutDown;
    return st;
  };
  device::DeviceOptions options;
  options.memory_budget = config_.device_memory_budget;
  options.emulated_copy_bandwidth = config_.emulated_copy_bandwidth;
  {
    StatusOr<bool> async_env = AsyncHostStreamsFromEnvironment();
    if (!async_env.ok()) return fail(async_env.status());
    options.async_streams = config_.async_host_streams || *async_env;
    StatusOr<bool> opaque_env = HostOpaquePointersFromEnvironment();
    if (!opaque_env.ok()) return fail(opaque_env.status());
    options.opaque_pointers = config_.host_opaque_device_pointers || *opaque_env;
  }
  auto device = device::CreateDevice(config_.device, options);
  if (!device.ok()) return fail(device.status());
  device_ = std::move(device).value();
  auto stream = device_->CreateStream();
  if (!stream.ok()) return fail(stream.status());
  stream_ = std::move(stream).value();

  // Plan the tables first, to check the budget before allocating anything.
  Status st = BuildTables();
  if (st.ok() && config_.device_memory_budget > 0) {
    auto mm =
        MemoryManager::Create(config_, rank_, seq_, tables_, FixedDeviceBytes(), device_.get());
    if (mm.ok()) {
      memory_ = std::move(mm).value();
    } else {
      st = mm.status();
    }
  }
  if (st.ok()) st = AllocateTables();
  if (st.ok()) st = BuildAccesses();
  if (st.ok()) st = BuildSwapEngine();
  if (!st.ok()) return fail(st);
  PlanDirectPaths();

  oplog_ =
      std::make_unique<Oplog>(&config_, rank_, device_.get(), stream_.get(), &counters_,
                              [this](int channel, TableId table, OplogSlot* slot) {
                                return channels_[channel]->Send({CommTask::kSend, table, slot});
                              });
  ClientContext ctx;
  ctx.config = &config_;
  ctx.rank = rank_;
  ctx.device = device_.get();
  ctx.tables = &tables_;
  ctx.counters = &counters_;
  ctx.security = security_;
  StatusOr<int> wake_fd = transport::NewWakeFd("worker " + std::to_string(rank_));
  if (!wake_fd.ok()) return fail(wake_fd.status());
  wait_.wake_fd = *wake_fd;
  wait_fds_.push_back({wait_.wake_fd, POLLIN, 0});
  // Over TCP/IPC a connection can be lost: keep each update until a push
  // acknowledges it (docs/architecture.md, "Connection loss and resend").
  const bool lossy =
      std::any_of(partition_endpoints_.begin(), partition_endpoints_.end(),
                  [](const std::string& ep) { return ep.rfind("inproc://", 0) != 0; });
  for (auto& t : tables_) {
    if (t) t->retain_until_acked = lossy && config_.resend_after_connection_loss;
  }
  for (int k = 0; k < config_.num_channels; ++k) {
    std::vector<std::string> endpoints;
    for (int s = 0; s < config_.num_shards; ++s)
      endpoints.push_back(partition_endpoints_[s * config_.num_channels + k]);
    channels_.push_back(std::make_unique<CommChannel>(ctx, zmq_context_, k, endpoints, &wait_));
    st = channels_.back()->Start();
    if (!st.ok()) return fail(st);
    for (int fd : channels_.back()->poll_fds()) wait_fds_.push_back({fd, POLLIN, 0});
  }
  for (const auto& t : tables_) {
    if (!t || t->rows.empty()) continue;
    for (auto& c : channels_) {
      st = c->Send({CommTask::kSubscribe, t->id, nullptr});
      if (!st.ok()) return fail(st);
    }
  }
  device_bytes_.store(device_->bytes_in_use());
  tables_ready_.store(true, std::memory_order_release);
  phase_ = Phase::kFinished;
  return Status::OK();
}

// ---- Phase 2 ----------------------------------------------------------------

Status Worker::StartIterations() {
  std::lock_guard<std::mutex> lock(api_mu_);
  if (phase_ == Phase::kShutDown)
    return FailedPreconditionError("StartIterations: the worker is shut down");
  if (phase_ == Phase::kRecording)
    return FailedPreconditionError("StartIterations: call FinishVirtualIteration first");
  if (phase_ == Phase::kRunning) return FailedPreconditionError("StartIterations: already called");
  phase_ = Phase::kRunning;
  if (swap_) GEEPS_RETURN_IF_ERROR(swap_->Start());
  // Resumed: the prologue runs at the restored clock (its reads see the
  // restored rows) and its updates are discarded.
  if (resume_clock_ > 0) clock_.store(resume_clock_);
  if (seq_.ops(kPrologue).empty()) return EndPrologue();
  section_ = kPrologue;
  pos_ = 0;
  return Status::OK();
}

Status Worker::Expect(OpType type, int32_t handle, size_t count, const char* call) {
  if (phase_ == Phase::kShutDown)
    return FailedPreconditionError(std::string(call) + ": the worker is shut down");
  if (phase_ != Phase::kRunning)
    return FailedPreconditionError(std::string(call) + ": called before StartIterations");
  if (peers_failed_.load()) return PeerFailure();
  if (type != OpType::kClock && (handle < 0 || static_cast<size_t>(handle) >= count))
    return InvalidArgumentError(std::string(call) + ": unknown handle #" + std::to_string(handle));
  const Op& expected = seq_.ops(section_)[pos_];
  if (expected.type != type || expected.handle != handle) {
    return FailedPreconditionError(
        OpSequence::Describe({type, handle}) + " is out of the recorded order: expected " +
        OpSequence::Describe(expected) + " at position " + std::to_string(pos_) + " of the " +
        (section_ == kPrologue ? "prologue" : "iteration") + " (clock " +
        std::to_string(clock_.load()) + ")");
  }
  return Status::OK();
}

void Worker::EmulateCompute() const {
  if (config_.emulated_compute_per_access.count() > 0)
    std::this_thread::sleep_for(config_.emulated_compute_per_access);
}

Status Worker::AdvanceTable(TableId id, int32_t direct_update) {
  TableCache& t = *tables_[id];
  // resumed: the servers already hold the prologue
  if (DiscardingPrologue()) return oplog_->Discard(t);
  // A direct Update of this table: its buffer holds the clock's deltas.
  DirectUpdate direct;
  const bool is_direct = direct_update >= 0 && seq_.updates()[direct_update].table == id;
  AccessBuffers* ub = is_direct ? &update_bufs_[direct_update] : nullptr;
  if (is_direct) {
    direct.buffer = ub->buffer;
    direct.floats = seq_.updates()[direct_update].rows.size() * t.width;
    direct.first_pos = plan_->direct_first_pos(direct_update);
    direct.send_refs = ub->send_refs.get();
  }
  const int64_t clock = clock_.load();
  GEEPS_ASSIGN_OR_RETURN(
      OplogSlot * slot,
      oplog_->Snapshot(t, clock, clock == checkpoint_flag_clock_, is_direct ? &direct : nullptr));
  // Sent in place: zeroed once ZeroMQ has released it.
  if (is_direct && ub->send_refs) ub->zeroing = AccessBuffers::Zeroing::kPending;
  return oplog_->Send(t, slot);
}

Status Worker::EndPrologue() {
  if (resume_clock_ == 0) {
    for (TableId id : plan_->prologue_end_tables()) GEEPS_RETURN_IF_ERROR(AdvanceTable(id, -1));
  }
  clock_.store(resume_clock_ > 0 ? resume_clock_ : 1);
  section_ = kRepeated;
  pos_ = 0;
  return Status::OK();
}

Status Worker::Advance(int32_t direct_update) {
  const std::vector<Op>& ops = seq_.ops(section_);
  const Op op = ops[pos_];
  for (TableId id : plan_->advance_after(section_, pos_))
    GEEPS_RETURN_IF_ERROR(AdvanceTable(id, direct_update));
  ++pos_;
  if (section_ == kRepeated && op.type == OpType::kClock) {
    clock_.fetch_add(1);
    iterations_.fetch_add(1);
    pos_ = 0;
  } else if (section_ == kPrologue && pos_ == ops.size()) {
    return EndPrologue();
  }
  return Status::OK();
}

int64_t Worker::RequiredAge(int slack) const {
  const int64_t c = clock_.load();
  if (c == 0) return 0;  // the prologue reads whatever is there
  if (slack == kUnboundedSlack) return 1;
  return std::max<int64_t>(1, c - slack);
}

Status Worker::AcquireBuffer(AccessBuffers& b, uint64_t bytes, MemoryManager::AccessRef who) {
  if (!b.pooled) return Status::OK();
  GEEPS_ASSIGN_OR_RETURN(b.buffer, memory_->Acquire(bytes, config_.timeout, &who));
  return Status::OK();
}

Status Worker::ReleaseBuffer(AccessBuffers& b) {
  if (!b.pooled || b.buffer == nullptr) return Status::OK();
  // The application's work on the buffer may still be queued on stream_:
  // the swap engine's copies into pool buffers wait for this point.
  Status st = swap_ ? swap_->NoteRelease(stream_.get()) : Status::OK();
  memory_->Release(b.buffer);
  b.buffer = nullptr;
  return st;
}

Status Worker::SwapLocal(const RecordedAccess& a, const AccessBuffers& b, bool to_device,
                         int handle) {
  const uint32_t width = config_.tables[a.table].row_width;
  const size_t floats = a.rows.size() * width;
  const size_t bytes = floats * sizeof(float);
  const auto start = SteadyClock::now();
  float* host = b.host_rows ? b.host_rows : b.staging;
  float* table = local_tables_[a.table];
  if (to_device && b.staging) {  // gather the scattered rows on the host
    for (size_t i = 0; i < a.rows.size(); ++i)
      std::memcpy(b.staging + i * width, table + a.rows[i] * width, width * sizeof(float));
  }
  GEEPS_RETURN_IF_ERROR(
      device_->Copy(to_device ? static_cast<void*>(b.buffer) : host,
                    to_device ? static_cast<const void*>(host) : b.buffer, bytes,
                    to_device ? device::CopyKind::kHostToDevice : device::CopyKind::kDeviceToHost,
                    stream_.get()));
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_.get()));
  if (!to_device && b.staging) {  // scatter them back
    for (size_t i = 0; i < a.rows.size(); ++i)
      std::memcpy(table + a.rows[i] * width, b.staging + i * width, width * sizeof(float));
  }
  memory_->AddCopy(to_device, bytes);
  memory_->AddStall({MemoryManager::Kind::kLocal, handle}, SteadyClock::now() - start);
  return Status::OK();
}

StatusOr<const float*> Worker::Read(ReadHandle h) {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(Expect(OpType::kRead, h.id, read_bufs_.size(), "Read"));
  const RecordedAccess& a = seq_.reads()[h.id];
  AccessBuffers& b = read_bufs_[h.id];
  TableCache& t = *tables_[a.table];
  const int64_t required = RequiredAge(a.slack);
  {
    std::unique_lock<std::mutex> lock(t.mu);
    auto fresh = [&] {
      for (int si : plan_->read_slices(h.id))
        if (t.slices[si].age < required || t.slices[si].installing) return false;
      return true;
    };
    if (!fresh()) {
      reads_waited_.fetch_add(1);
      const auto start = SteadyClock::now();
      const bool ok = WaitForPushes(lock, start + config_.timeout, [&] {
        return fresh() || shutdown_requested_.load() || peers_failed_.load();
      });
      read_wait_ns_.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count());
      if (shutdown_requested_.load())
        return CancelledError("Read(read#" + std::to_string(h.id) +
                              "): the worker was shut down while the read waited");
      if (peers_failed_.load() && !fresh()) return PeerFailure();
      if (!ok) {
        int64_t lowest = required;
        int lowest_partition = -1;
        for (int si : plan_->read_slices(h.id)) {
          if (t.slices[si].age < lowest) {
            lowest = t.slices[si].age;
            lowest_partition = t.slices[si].partition;
          }
        }
        const std::string what = "Read(read#" + std::to_string(h.id) + ") of table " +
                                 std::to_string(a.table) + " ('" + config_.tables[a.table].name +
                                 "')";
        if (lowest_partition < 0) {
          for (int si : plan_->read_slices(h.id))
            if (t.slices[si].installing) lowest_partition = t.slices[si].partition;
          return DeadlineExceededError(
              what + " waited " + std::to_string(config_.timeout.count()) +
              " ms for the rest of a push in parts from server partition " +
              std::to_string(lowest_partition) + LossNote(lowest_partition) +
              " (its parts stopped coming, or one was dropped: the worker's log says which)");
        }
        const std::string loss = LossNote(lowest_partition);
        return DeadlineExceededError(
            what + " at clock " + std::to_string(clock_.load()) + " waited " +
            std::to_string(config_.timeout.count()) +
            " ms for rows of clock >= " + std::to_string(required) + "; server partition " +
            std::to_string(lowest_partition) + " is still at clock " + std::to_string(lowest) +
            (loss.empty() ? " (some worker's update of that clock has not reached it: a worker "
                            "is stuck, failed or shut down, or the update was lost on the way; "
                            "the shard logs which workers it waits for)"
                          : loss));
      }
    }
    if (section_ == kRepeated && plan_->read_in_place(h.id)) {
      // The cache rows themselves (PlanInPlaceReads): nothing to gather.
      const float* rows = t.cache + static_cast<size_t>(plan_->read_first_pos(h.id)) * t.width;
      reads_in_place_.fetch_add(1);
      ++t.open_in_place_reads;
      b.open_in_place = true;
      lock.unlock();
      GEEPS_RETURN_IF_ERROR(Advance());
      return rows;
    }
    GEEPS_RETURN_IF_ERROR(AcquireBuffer(b, a.rows.size() * t.width * sizeof(float),
                                        {MemoryManager::Kind::kRead, h.id}));
    GEEPS_RETURN_IF_ERROR(GatherFromCache(t, b, h.id));
  }
  GEEPS_RETURN_IF_ERROR(Advance());
  return static_cast<const float*>(b.buffer);
}

std::string Worker::LossNote(int partition) const {
  if (partition < 0) return "";
  const int channels = config_.num_channels;
  const size_t ch = static_cast<size_t>(partition % channels);
  if (ch >= channels_.size() || !channels_[ch]) return "";
  int64_t last_ns = 0;
  const int64_t n = channels_[ch]->ConnectionLosses(partition / channels, &last_ns);
  if (n == 0) return "";
  const double ago = static_cast<double>(WaitState::NowNs() - last_ns) / 1e9;
  char when[32];
  std::snprintf(when, sizeof(when), "%.1f", ago);
  return "; the connection from this worker to that partition was lost " + std::to_string(n) +
         " time(s), the last " + when + " s ago" +
         (config_.resend_after_connection_loss
              ? std::string(" (what it had not acknowledged was sent again after each loss)")
              : std::string(": an update or push in flight then was lost with it, and "
                            "resend_after_connection_loss is off")) +
         " (docs/reliability.md, \"A connection that resets mid-job\")";
}

Status Worker::PostRead(ReadHandle h) {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(Expect(OpType::kPostRead, h.id, read_bufs_.size(), "PostRead"));
  EmulateCompute();
  if (read_bufs_[h.id].open_in_place) {
    TableCache& t = *tables_[seq_.reads()[h.id].table];
    std::lock_guard<std::mutex> lock(t.mu);
    --t.open_in_place_reads;
    read_bufs_[h.id].open_in_place = false;
  }
  GEEPS_RETURN_IF_ERROR(ReleaseBuffer(read_bufs_[h.id]));
  return Advance();
}

StatusOr<float*> Worker::PreUpdate(UpdateHandle h) {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(Expect(OpType::kPreUpdate, h.id, update_bufs_.size(), "PreUpdate"));
  const RecordedAccess& a = seq_.updates()[h.id];
  AccessBuffers& b = update_bufs_[h.id];
  const size_t floats = a.rows.size() * config_.tables[a.table].row_width;
  GEEPS_RETURN_IF_ERROR(
      AcquireBuffer(b, floats * sizeof(float), {MemoryManager::Kind::kUpdate, h.id}));
  if (b.send_refs && tables_[a.table]->retain_until_acked)
    GEEPS_RETURN_IF_ERROR(FreeKeptBuffer(b, *tables_[a.table], floats));
  // Unless a Read zeroed it while it waited (ZeroReleasedUpdateBuffers).
  if (b.zeroing != AccessBuffers::Zeroing::kDone) {
    // The previous clock's update may still be leaving from this buffer
    // (under SSP the application can get here first): wait for ZeroMQ.
    if (b.send_refs && !WaitReleased(*b.send_refs, SteadyClock::now() + config_.timeout))
      return DeadlineExceededError("PreUpdate(update#" + std::to_string(h.id) +
                                   "): the previous update is still being sent from its "
                                   "buffer after " +
                                   std::to_string(config_.timeout.count()) +
                                   " ms (is the network stuck?)");
    b.zeroing = AccessBuffers::Zeroing::kNone;
    GEEPS_RETURN_IF_ERROR(ZeroBuffer(b.buffer, floats));
  }
  b.zeroing = AccessBuffers::Zeroing::kNone;
  GEEPS_RETURN_IF_ERROR(Advance());
  return b.buffer;
}

Status Worker::FreeKeptBuffer(AccessBuffers& b, TableCache& t, size_t floats) {
  std::lock_guard<std::mutex> lock(t.mu);
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
  oplog_->CopyIn(t, b.send_refs.get(), static_cast<const float*>(device_->HostAlias(b.buffer)),
                 floats);
  return Status::OK();
}

Status Worker::Update(UpdateHandle h) {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(Expect(OpType::kUpdate, h.id, update_bufs_.size(), "Update"));
  EmulateCompute();
  const RecordedAccess& a = seq_.updates()[h.id];
  AccessBuffers& b = update_bufs_[h.id];
  TableCache& t = *tables_[a.table];
  if (plan_->direct_update(h.id)) {
    // The buffer is the table's whole clock of deltas: Advance (which
    // advances this table now) sends it from there.
    Status st = Advance(h.id);
    if (st.ok()) updates_direct_.fetch_add(1);
    Status released = ReleaseBuffer(b);
    return st.ok() ? released : st;
  }
  {
    std::lock_guard<std::mutex> lock(t.mu);
    GEEPS_RETURN_IF_ERROR(ScatterToCache(t, b, h.id));
    t.oplog_dirty = true;
  }
  GEEPS_RETURN_IF_ERROR(ReleaseBuffer(b));
  return Advance();
}

StatusOr<float*> Worker::LocalAccess(LocalHandle h) { return OpenLocal(h, /*read_only=*/false); }

StatusOr<const float*> Worker::LocalRead(LocalHandle h) {
  GEEPS_ASSIGN_OR_RETURN(float* rows, OpenLocal(h, /*read_only=*/true));
  return static_cast<const float*>(rows);
}

StatusOr<float*> Worker::OpenLocal(LocalHandle h, bool read_only) {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  const char* call = read_only ? "LocalRead" : "LocalAccess";
  GEEPS_RETURN_IF_ERROR(Expect(OpType::kLocalAccess, h.id, local_bufs_.size(), call));
  const RecordedAccess& a = seq_.locals()[h.id];
  if (a.read_only != read_only) {
    return FailedPreconditionError(std::string(call) + ": local#" + std::to_string(h.id) +
                                   " was recorded by " +
                                   (a.read_only ? "VirtualLocalRead (read-only): use LocalRead"
                                                : "VirtualLocalAccess: use LocalAccess"));
  }
  AccessBuffers& b = local_bufs_[h.id];
  float* result = b.direct;
  if (b.pooled) {
    const uint32_t width = config_.tables[a.table].row_width;
    if (swap_) {
      GEEPS_ASSIGN_OR_RETURN(b.buffer, swap_->Open(h.id));
    } else {
      GEEPS_RETURN_IF_ERROR(AcquireBuffer(b, a.rows.size() * width * sizeof(float),
                                          {MemoryManager::Kind::kLocal, h.id}));
      if (a.fetch) GEEPS_RETURN_IF_ERROR(SwapLocal(a, b, /*to_device=*/true, h.id));
    }
    result = b.buffer;
  } else if (!b.contiguous) {
    if (a.fetch) {
      GEEPS_RETURN_IF_ERROR(device_->Gather(b.buffer, local_tables_[a.table], b.index,
                                            a.rows.size(), config_.tables[a.table].row_width,
                                            stream_.get()));
      GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_.get()));
    }
    result = b.buffer;
  }
  GEEPS_RETURN_IF_ERROR(Advance());
  return result;
}

Status Worker::PostLocalAccess(LocalHandle h) {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(
      Expect(OpType::kPostLocalAccess, h.id, local_bufs_.size(), "PostLocalAccess"));
  EmulateCompute();
  const RecordedAccess& a = seq_.locals()[h.id];
  AccessBuffers& b = local_bufs_[h.id];
  if (b.pooled && swap_) {
    float* buffer = b.buffer;
    b.buffer = nullptr;
    GEEPS_RETURN_IF_ERROR(swap_->Close(h.id, buffer, stream_.get()));
  } else if (b.pooled) {
    if (a.writes_back()) GEEPS_RETURN_IF_ERROR(SwapLocal(a, b, /*to_device=*/false, h.id));
    GEEPS_RETURN_IF_ERROR(ReleaseBuffer(b));
  } else if (!b.contiguous && a.writes_back()) {
    GEEPS_RETURN_IF_ERROR(device_->Scatter(local_tables_[a.table], b.buffer, b.index, a.rows.size(),
                                           config_.tables[a.table].row_width, stream_.get()));
    GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_.get()));
  }
  return Advance();
}

Status Worker::CheckDeviceReady(const char* call) const {
  if (phase_ == Phase::kShutDown)
    return FailedPreconditionError(std::string(call) + ": the worker is shut down");
  if (!device_ || !stream_)
    return FailedPreconditionError(std::string(call) +
                                   ": only after FinishVirtualIteration (there is no device yet)");
  return Status::OK();
}

Status Worker::CopyBuffer(const char* call, void* dst, const void* src, size_t floats,
                          bool to_host) {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckDeviceReady(call));
  if (floats == 0) return Status::OK();
  if (dst == nullptr || src == nullptr)
    return InvalidArgumentError(std::string(call) + ": a pointer is null");
  if (floats > SIZE_MAX / sizeof(float))
    return InvalidArgumentError(std::string(call) + ": " + std::to_string(floats) +
                                " floats overflow a byte count");
  GEEPS_RETURN_IF_ERROR(device_->Copy(
      dst, src, floats * sizeof(float),
      to_host ? device::CopyKind::kDeviceToHost : device::CopyKind::kHostToDevice, stream_.get()));
  ClientCounters::Count(counters_.app_copy_bytes, floats * sizeof(float));
  return device_->Synchronize(stream_.get());
}

Status Worker::CopyToHost(float* host, const float* device_buffer, size_t floats) {
  return CopyBuffer("CopyToHost", host, device_buffer, floats, /*to_host=*/true);
}

Status Worker::CopyFromHost(float* device_buffer, const float* host, size_t floats) {
  return CopyBuffer("CopyFromHost", device_buffer, host, floats, /*to_host=*/false);
}

Status Worker::EnqueueHostWork(std::function<void()> work) {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckDeviceReady("EnqueueHostWork"));
  if (!work) return InvalidArgumentError("EnqueueHostWork: work is empty");
  return device_->HostFunction(std::move(work), stream_.get());
}

Status Worker::SynchronizeComputeStream() {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckDeviceReady("SynchronizeComputeStream"));
  return device_->Synchronize(stream_.get());
}

Status Worker::Clock() {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  GEEPS_RETURN_IF_ERROR(Expect(OpType::kClock, -1, 0, "Clock"));
  return Advance();
}

// ---- Between iterations -------------------------------------------------------

Status Worker::Sync() {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  if (phase_ != Phase::kRunning)
    return FailedPreconditionError("Sync: only after StartIterations and before Shutdown");
  if (pos_ != 0)
    return FailedPreconditionError("Sync: only between iterations (the iteration is at position " +
                                   std::to_string(pos_) + ")");
  const int64_t target = clock_.load();
  const auto deadline = SteadyClock::now() + config_.timeout;
  for (auto& tp : tables_) {
    if (!tp) continue;
    TableCache& t = *tp;
    std::unique_lock<std::mutex> lock(t.mu);
    auto done = [&] {
      for (const PartitionSlice& s : t.slices)
        if (s.cache_count > 0 && s.age < target) return false;
      return true;
    };
    if (!WaitForPushes(lock, deadline, [&] {
          return done() || shutdown_requested_.load() || peers_failed_.load();
        }))
      return DeadlineExceededError("Sync: table " + std::to_string(t.id) + " did not reach clock " +
                                   std::to_string(target) + " within " +
                                   std::to_string(config_.timeout.count()) + " ms");
    if (shutdown_requested_.load()) return CancelledError("Sync: the worker was shut down");
    if (peers_failed_.load() && !done()) return PeerFailure();
  }
  return Status::OK();
}

Status Worker::CopyRows(TableId table, const std::vector<RowIndex>& rows, float* out) {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  if (phase_ != Phase::kRunning && phase_ != Phase::kFinished)
    return FailedPreconditionError(
        "CopyRows: only after FinishVirtualIteration and before Shutdown");
  if (pos_ != 0 && phase_ == Phase::kRunning)
    return FailedPreconditionError("CopyRows: only between iterations");
  if (table >= config_.tables.size())
    return OutOfRangeError("CopyRows: table " + std::to_string(table) + " does not exist");
  const TableSpec& spec = config_.tables[table];
  for (RowIndex r : rows) {
    if (r >= spec.num_rows)
      return OutOfRangeError("CopyRows: row " + std::to_string(r) + " is out of range for table " +
                             std::to_string(table) + " with " + std::to_string(spec.num_rows) +
                             " rows");
  }
  if (out == nullptr && !rows.empty()) return InvalidArgumentError("CopyRows: out is null");
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
      GEEPS_RETURN_IF_ERROR(
          device_->Copy(out + i * spec.row_width, local_tables_[table] + rows[i] * spec.row_width,
                        row_bytes, device::CopyKind::kDeviceToHost, stream_.get()));
    }
    return device_->Synchronize(stream_.get());
  }
  TableCache& t = *tables_[table];
  std::lock_guard<std::mutex> lock(t.mu);
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
                                        device::CopyKind::kDeviceToHost, stream_.get()));
  }
  return device_->Synchronize(stream_.get());
}

WorkerStats Worker::GetStats() const {
  WorkerStats s;
  s.rank = rank_;
  s.clock = clock_.load();
  s.iterations = iterations_.load();
  s.read_wait_seconds = static_cast<double>(read_wait_ns_.load()) * 1e-9;
  s.reads_waited = reads_waited_.load();
  s.messages_sent = counters_.messages_sent.load();
  s.messages_received = counters_.messages_received.load();
  s.bytes_sent = counters_.bytes_sent.load();
  s.bytes_received = counters_.bytes_received.load();
  s.pushes_installed = counters_.pushes_installed.load();
  s.pushes_installed_by_app = counters_.pushes_installed_by_app.load();
  s.updates_direct = updates_direct_.load();
  s.reads_in_place = reads_in_place_.load();
  s.frames_dropped = counters_.frames_dropped.load();
  s.connection_losses = counters_.connection_losses.load();
  s.reconnects = counters_.reconnects.load();
  s.updates_resent = counters_.updates_resent.load();
  s.pushes_repeated = counters_.pushes_repeated.load();
  s.data_path.gather = counters_.gather_bytes.load();
  s.data_path.zero = counters_.zero_bytes.load();
  s.data_path.scatter_add = counters_.scatter_add_bytes.load();
  s.data_path.to_slot = counters_.to_slot_bytes.load();
  s.data_path.pack = counters_.pack_bytes.load();
  s.data_path.install = counters_.install_bytes.load();
  s.data_path.app_copies = counters_.app_copy_bytes.load();
  s.device_bytes_in_use = device_bytes_.load();
  if (tables_ready_.load(std::memory_order_acquire) && memory_) memory_->FillStats(&s);
  return s;
}

StatusOr<int64_t> Worker::RequestCheckpoint() {
  std::lock_guard<std::mutex> api_lock(api_mu_);
  if (config_.checkpoint_dir.empty())
    return FailedPreconditionError("RequestCheckpoint: Config::checkpoint_dir is empty");
  if (phase_ == Phase::kShutDown)
    return FailedPreconditionError("RequestCheckpoint: the worker is shut down");
  // The first clock none of whose updates has left yet.
  int64_t c = clock_.load() + 1;
  if (phase_ != Phase::kRunning)
    c = resume_clock_;
  else if (section_ == kRepeated && pos_ == 0)
    c = clock_.load();
  checkpoint_flag_clock_ = c;
  return c + 1;
}

Status Worker::PeerFailure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return peer_failure_;
}

void Worker::FailPeers(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (!peer_failure_.ok()) return;
    peer_failure_ = reason.ok() ? InternalError("FailPeers with an OK status") : reason;
  }
  peers_failed_.store(true);
  WakeWaiters();
}

bool Worker::WaitForPushes(std::unique_lock<std::mutex>& lock, SteadyClock::time_point deadline,
                           const std::function<bool()>& done) {
  if (done()) return true;
  // This thread receives the pushes while it waits; the channel threads
  // leave the sockets to it (CommChannel::Run).
  wait_.last_wait_ns.store(WaitState::NowNs());
  wait_.app_waiting.store(true);
  // app_waiting is set under the table's mutex, which installing a push of
  // this table takes too: a channel thread that installs one after the
  // check above sees it and writes wake_fd. Every thread that uses a
  // channel's sockets ends by draining them (CommChannel::PumpLocked), so
  // any other push that arrives from now on makes a descriptor readable:
  // poll first, then receive.
  bool result = false;
  for (;;) {
    const auto now = SteadyClock::now();
    if (now >= deadline) break;
    const int64_t left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    lock.unlock();
    // Idle until a push comes: zero the update buffers ZeroMQ has released
    // (PreUpdate then skips them); while one is still held, look again in
    // 1 ms.
    const bool held = ZeroReleasedUpdateBuffers();
    for (pollfd& f : wait_fds_) f.revents = 0;
    // Readable: a push may have arrived, a channel thread installed one,
    // or the worker is shutting down (wake_fd).
    const int ready = ::poll(wait_fds_.data(), wait_fds_.size(),
                             static_cast<int>(std::min<int64_t>(left_ms, held ? 1 : 200)));
    if (ready > 0 && (wait_fds_[0].revents & POLLIN)) transport::ClearWakeFd(wait_.wake_fd);
    for (auto& c : channels_) c->Pump();
    lock.lock();
    if (done()) {
      result = true;
      break;
    }
  }
  wait_.app_waiting.store(false);
  wait_.last_wait_ns.store(WaitState::NowNs());
  for (auto& c : channels_) c->ResumeBackground();
  return result;
}

Status Worker::ZeroBuffer(float* buffer, size_t floats) {
  GEEPS_RETURN_IF_ERROR(device_->Fill(buffer, 0.0f, floats, stream_.get()));
  GEEPS_RETURN_IF_ERROR(device_->Synchronize(stream_.get()));
  ClientCounters::Count(counters_.zero_bytes, floats * sizeof(float));
  return Status::OK();
}

bool Worker::ZeroReleasedUpdateBuffers() {
  bool held = false;
  for (size_t h = 0; h < update_bufs_.size(); ++h) {
    AccessBuffers& b = update_bufs_[h];
    const RecordedAccess& a = seq_.updates()[h];
    const size_t floats = a.rows.size() * config_.tables[a.table].row_width;
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
        std::lock_guard<std::mutex> lock(t.mu);
        if (Oplog::Names(t, side.refs)) continue;
      }
      // On an error PreUpdate zeroes it again, and reports the error then.
      *side.zeroing = ZeroBuffer(side.buffer, floats).ok() ? AccessBuffers::Zeroing::kDone
                                                           : AccessBuffers::Zeroing::kNone;
    }
  }
  return held;
}

void Worker::WakeWaiters() {
  // tables_ and wait_.wake_fd are fixed once tables_ready_ is set; before
  // that nobody waits.
  if (!tables_ready_.load(std::memory_order_acquire)) return;
  wait_.Wake();
  for (auto& t : tables_) {
    if (!t) continue;
    { std::lock_guard<std::mutex> lock(t->mu); }
    t->cv.notify_all();
  }
}

Status Worker::Shutdown() {
  shutdown_requested_.store(true);
  WakeWaiters();  // reads blocked on fresh rows hold api_mu_
  std::lock_guard<std::mutex> api_lock(api_mu_);
  if (phase_ == Phase::kShutDown && channels_.empty()) return Status::OK();
  for (auto& c : channels_) c->Stop();
  channels_.clear();
  phase_ = Phase::kShutDown;
  Status st = stream_ ? device_->Synchronize(stream_.get()) : Status::OK();
  if (swap_) swap_->Stop();  // writes back what was handed over, then joins
  if (!config_.stats_file.empty()) {
    std::string path = config_.stats_file;
    for (size_t at; (at = path.find("%r")) != std::string::npos;)
      path.replace(at, 2, std::to_string(rank_));
    std::ofstream out(path);
    out << GetStats().ToJson() << "\n";
    if (!out && st.ok()) st = UnavailableError("cannot write the stats file " + path);
  }
  return st;
}

}  // namespace geeps::client
