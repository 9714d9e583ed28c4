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
#include "common/mutex.h"
#include "transport/socket_util.h"

namespace geeps::client {
namespace {

using SteadyClock = std::chrono::steady_clock;

// `config`, in the checked mode if GEEPS_CHECKED=1 (a malformed value is
// reported by FinishVirtualIteration, with the other variables the worker
// reads by itself).
Config WithCheckedFromEnvironment(Config config) {
  StatusOr<bool> checked = CheckedFromEnvironment();
  if (checked.ok() && *checked) config.checked = true;
  return config;
}
}  // namespace

Worker::Worker(const Config& config, int rank, transport::Context* context,
               std::vector<std::string> partition_endpoints,
               const transport::SecurityConfig* security)
    : config_(WithCheckedFromEnvironment(config)),
      rank_(rank),
      context_(context),
      partition_endpoints_(std::move(partition_endpoints)),
      security_(security),
      seq_(&config_) {}

Worker::~Worker() {
  Shutdown().ok();
  if (wait_.wake_fd >= 0) ::close(wait_.wake_fd);
  if (data_) data_->DropManagers();
  if (device_ && data_ && data_->UpdateBuffersStillSending()) {
    // ZeroMQ still reads an update buffer in device (host) memory: leave
    // the device's memory allocated rather than free it under its reader.
    GEEPS_LOG(Warning) << "worker " << rank_
                       << ": an update buffer is still held by ZeroMQ at shutdown; its device "
                          "memory is not freed";
    (void)stream_.release();
    (void)device_.release();
    return;
  }
  if (device_ && data_) {
    data_->FreeMemory();
    // Slots ZeroMQ still holds are leaked with a warning.
    if (oplog_) oplog_->FreeSlots(data_->tables(), kReleaseWait);
  }
  stream_.reset();
  device_.reset();
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
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualRead"));
  GEEPS_ASSIGN_OR_RETURN(ReadHandle h, seq_.AddRead(table, rows, slack));
  return Stamp(h);
}

Status Worker::VirtualPostRead(ReadHandle h) {
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualPostRead"));
  GEEPS_RETURN_IF_ERROR(
      CheckHandleOwner("VirtualPostRead", "ReadHandle", h.id, OwnerOf(h), self()));
  return seq_.AddPostRead(h);
}

StatusOr<UpdateHandle> Worker::VirtualPreUpdate(TableId table, const std::vector<RowIndex>& rows,
                                                bool zeroed) {
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualPreUpdate"));
  GEEPS_ASSIGN_OR_RETURN(UpdateHandle h, seq_.AddPreUpdate(table, rows, zeroed));
  return Stamp(h);
}

Status Worker::VirtualUpdate(UpdateHandle h) {
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualUpdate"));
  GEEPS_RETURN_IF_ERROR(
      CheckHandleOwner("VirtualUpdate", "UpdateHandle", h.id, OwnerOf(h), self()));
  return seq_.AddUpdate(h);
}

StatusOr<LocalHandle> Worker::VirtualLocalAccess(TableId table, const std::vector<RowIndex>& rows,
                                                 bool fetch) {
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualLocalAccess"));
  GEEPS_ASSIGN_OR_RETURN(LocalHandle h, seq_.AddLocalAccess(table, rows, fetch));
  return Stamp(h);
}

StatusOr<LocalHandle> Worker::VirtualLocalRead(TableId table, const std::vector<RowIndex>& rows) {
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualLocalRead"));
  GEEPS_ASSIGN_OR_RETURN(LocalHandle h,
                         seq_.AddLocalAccess(table, rows, /*fetch=*/true, /*read_only=*/true));
  return Stamp(h);
}

Status Worker::VirtualPostLocalAccess(LocalHandle h, bool keep) {
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualPostLocalAccess"));
  GEEPS_RETURN_IF_ERROR(
      CheckHandleOwner("VirtualPostLocalAccess", "LocalHandle", h.id, OwnerOf(h), self()));
  return seq_.AddPostLocalAccess(h, keep);
}

Status Worker::VirtualClock() {
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("VirtualClock"));
  return seq_.AddClock();
}

Status Worker::CheckNothingRecorded(const char* who) const {
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording(who));
  const size_t calls = seq_.ops(kPrologue).size() + seq_.ops(kRepeated).size();
  if (calls == 0 && !seq_.clocked()) return Status::OK();
  return FailedPreconditionError(std::string(who) + ": worker " + std::to_string(rank_) +
                                 " has already recorded " + std::to_string(calls) + " call(s)" +
                                 (seq_.clocked() ? " and a VirtualClock" : "") +
                                 " of its own; a Step records every call itself, so give it a "
                                 "worker that has recorded nothing");
}

Status Worker::FinishVirtualIteration() {
  common::MutexLock lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckRecording("FinishVirtualIteration"));
  GEEPS_RETURN_IF_ERROR(seq_.Finish());
  auto fail = [this](Status st) GEEPS_REQUIRES(api_mu_) {
    for (auto& c : channels_) c->Stop();
    phase_ = Phase::kShutDown;
    return st;
  };
  device::DeviceOptions options;
  options.ordinal = device_ordinal_;
  options.host_devices = config_.host_devices;
  options.memory_budget = config_.device_memory_budget;
  options.emulated_copy_bandwidth = config_.emulated_copy_bandwidth;
  {
    StatusOr<bool> async_env = AsyncHostStreamsFromEnvironment();
    if (!async_env.ok()) return fail(async_env.status());
    options.async_streams = config_.async_host_streams || *async_env;
    StatusOr<bool> opaque_env = HostOpaquePointersFromEnvironment();
    if (!opaque_env.ok()) return fail(opaque_env.status());
    options.opaque_pointers = config_.host_opaque_device_pointers || *opaque_env;
    StatusOr<bool> no_alias_env = HostNoAliasFromEnvironment();
    if (!no_alias_env.ok()) return fail(no_alias_env.status());
    options.no_host_alias = *no_alias_env;
    // GEEPS_HOST_AS_CUDA (read by CreateDevice for kAuto only) and
    // GEEPS_LOG_LEVEL: a malformed value is an error here whatever the
    // device.
    Status env = HostAsCudaFromEnvironment().status();
    if (env.ok()) env = CheckedFromEnvironment().status();
    if (env.ok()) env = CheckLogLevelEnvironment();
    if (!env.ok()) return fail(env);
  }
  auto device = device::CreateDevice(config_.device, options);
  if (!device.ok()) return fail(device.status());
  device_ = std::move(device).value();
  {
    common::MutexLock name_lock(&device_name_mu_);
    device_name_ = device_->name();
  }
  GEEPS_LOG(Info) << "worker " << rank_ << ": device " << device_->name();
  auto stream = device_->CreateStream();
  if (!stream.ok()) return fail(stream.status());
  stream_ = std::move(stream).value();

  // Plan the tables first, to check the budget before allocating anything.
  plan_ = std::make_unique<IterationPlan>(config_, seq_);
  data_ =
      std::make_unique<DataPath>(&config_, rank_, &seq_, device_.get(), stream_.get(), &counters_);
  Status st = data_->BuildTables(*plan_);
  if (st.ok()) st = data_->Allocate();
  if (!st.ok()) return fail(st);
  plan_->PlaceCaches(data_->CacheOnDevice());
  data_->PlanSendInPlace(*plan_);
  if (config_.checked)
    checked_ = std::make_unique<CheckedMode>(&config_, &seq_, rank_, device_.get(), stream_.get());

  oplog_ = std::make_unique<Oplog>(
      &config_, rank_, device_.get(), stream_.get(), &counters_,
      // Called by Oplog::Send, from AdvanceTable.
      [this](int channel, TableId table, OplogSlot* slot) GEEPS_REQUIRES(api_mu_) {
        return channels_[channel]->Send({CommTask::kSend, table, slot});
      });
  ClientContext ctx;
  ctx.config = &config_;
  ctx.rank = rank_;
  ctx.device = device_.get();
  ctx.tables = &data_->tables();
  ctx.counters = &counters_;
  ctx.security = security_;
  ctx.asks_read_order = &asks_read_order_;
  StatusOr<int> wake_fd = transport::NewWakeFd("worker " + std::to_string(rank_));
  if (!wake_fd.ok()) return fail(wake_fd.status());
  wait_.wake_fd = *wake_fd;
  wait_fds_.push_back({wait_.wake_fd, POLLIN, 0});
  // Over TCP/IPC a connection can be lost: keep each update until a push
  // acknowledges it (docs/architecture.md, "Connection loss and resend").
  const bool lossy =
      std::any_of(partition_endpoints_.begin(), partition_endpoints_.end(),
                  [](const std::string& ep) { return ep.rfind("inproc://", 0) != 0; });
  for (auto& t : data_->tables()) {
    if (t) t->retain_until_acked = lossy && config_.resend_after_connection_loss;
  }
  for (int k = 0; k < config_.num_channels; ++k) {
    std::vector<std::string> endpoints;
    for (int s = 0; s < config_.num_shards; ++s)
      endpoints.push_back(partition_endpoints_[s * config_.num_channels + k]);
    channels_.push_back(std::make_unique<CommChannel>(ctx, context_, k, endpoints, &wait_));
    st = channels_.back()->Start();
    if (!st.ok()) return fail(st);
    for (int fd : channels_.back()->poll_fds()) wait_fds_.push_back({fd, POLLIN, 0});
  }
  uint32_t next_rank = 0;
  const bool ordered = config_.push_in_read_order || config_.adapt_push_order;
  push_order_ = PushOrderPolicy(config_.push_in_read_order ? PushOrderPolicy::Mode::kReadOrder
                                : config_.adapt_push_order ? PushOrderPolicy::Mode::kAdaptive
                                                           : PushOrderPolicy::Mode::kAsReady);
  asks_read_order_.store(push_order_.asks());
  spin_ = SpinPolicy(int64_t{config_.spin_wait_us} * 1000);
  for (const Op& op : seq_.ops(kRepeated)) {
    if (!ordered || op.type != OpType::kRead) continue;
    auto& t = data_->tables()[seq_.reads()[op.handle].table];
    if (t && t->read_rank == 0) t->read_rank = ++next_rank;
  }
  for (const auto& t : data_->tables()) {
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
  common::MutexLock lock(&api_mu_);
  if (phase_ == Phase::kShutDown)
    return FailedPreconditionError("StartIterations: the worker is shut down");
  if (phase_ == Phase::kRecording)
    return FailedPreconditionError("StartIterations: call FinishVirtualIteration first");
  if (phase_ == Phase::kRunning) return FailedPreconditionError("StartIterations: already called");
  phase_ = Phase::kRunning;
  if (data_->swap()) GEEPS_RETURN_IF_ERROR(data_->swap()->Start());
  // Resumed: the prologue runs at the restored clock (its reads see the
  // restored rows) and its updates are discarded.
  if (resume_clock_ > 0) clock_.store(resume_clock_);
  if (seq_.ops(kPrologue).empty()) return EndPrologue();
  section_ = kPrologue;
  pos_ = 0;
  return Status::OK();
}

Status Worker::Expect(OpType type, int32_t handle, size_t count, const char* call,
                      HandleOwner owner) {
  if (phase_ == Phase::kShutDown)
    return FailedPreconditionError(std::string(call) + ": the worker is shut down");
  if (phase_ != Phase::kRunning)
    return FailedPreconditionError(std::string(call) + ": called before StartIterations");
  if (peers_failed_.load()) return PeerFailure();
  if (type != OpType::kClock) {
    const char* kind = type == OpType::kRead || type == OpType::kPostRead      ? "ReadHandle"
                       : type == OpType::kPreUpdate || type == OpType::kUpdate ? "UpdateHandle"
                                                                               : "LocalHandle";
    GEEPS_RETURN_IF_ERROR(CheckHandleOwner(call, kind, handle, owner, self()));
  }
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
  TableCache& t = data_->table(id);
  // resumed: the servers already hold the prologue
  if (DiscardingPrologue()) return oplog_->Discard(t);
  // A direct Update of this table: its buffer holds the clock's deltas.
  DirectUpdate direct;
  const bool is_direct = direct_update >= 0 && seq_.updates()[direct_update].table == id;
  AccessBuffers* ub = is_direct ? &data_->update_buf(direct_update) : nullptr;
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
    JudgePushOrder();
    clock_.fetch_add(1);
    iterations_.fetch_add(1);
    pos_ = 0;
  } else if (section_ == kPrologue && pos_ == ops.size()) {
    return EndPrologue();
  }
  return Status::OK();
}

// One repeated iteration ended: its length and its reads' waits decide
// what the next updates ask for (PushOrderPolicy).
void Worker::JudgePushOrder() {
  const auto now = SteadyClock::now();
  const int64_t waited = read_wait_ns_.load();
  if (iterations_.load() > 0)
    push_order_.Observe(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_clock_at_).count(),
        waited - read_wait_at_last_clock_);
  last_clock_at_ = now;
  read_wait_at_last_clock_ = waited;
  asks_read_order_.store(push_order_.asks(), std::memory_order_relaxed);
  push_order_switches_.store(push_order_.switches(), std::memory_order_relaxed);
}

int64_t Worker::RequiredAge(int slack) const {
  const int64_t c = clock_.load();
  if (c == 0) return 0;  // the prologue reads whatever is there
  if (slack == kUnboundedSlack) return 1;
  return std::max<int64_t>(1, c - slack);
}

StatusOr<const float*> Worker::Read(ReadHandle h) {
  common::MutexLock api_lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(
      Expect(OpType::kRead, h.id, data_ ? data_->num_reads() : 0, "Read", OwnerOf(h)));
  const RecordedAccess& a = seq_.reads()[h.id];
  AccessBuffers& b = data_->read_buf(h.id);
  TableCache& t = data_->table(a.table);
  const int64_t required = RequiredAge(a.slack);
  {
    common::MutexLock lock(&t.mu);
    auto fresh = [&] {
      for (int si : plan_->read_slices(h.id))
        if (t.slices[si].age < required || t.slices[si].installing) return false;
      return true;
    };
    if (!fresh()) {
      reads_waited_.fetch_add(1);
      const auto start = SteadyClock::now();
      const bool ok = WaitForPushes(lock, start + config_.timeout, [&] {
        return fresh() || shutdown_requested_.load() || peers_failed_.load() ||
               required > ended_clock_.load();
      });
      read_wait_ns_.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count());
      if (shutdown_requested_.load())
        return CancelledError("Read(read#" + std::to_string(h.id) +
                              "): the worker was shut down while the read waited");
      if (peers_failed_.load() && !fresh()) return PeerFailure();
      if (!fresh())
        GEEPS_RETURN_IF_ERROR(EndedPeerBlocks(
            required, "Read(read#" + std::to_string(h.id) + ") of table " +
                          std::to_string(a.table) + " ('" + config_.tables[a.table].name + "')"));
      if (!ok) return ReadTimeout(h.id, t, required);
    }
    const std::vector<int>& slices = plan_->read_slices(h.id);
    if (section_ == kRepeated && plan_->read_in_place(h.id)) {
      // The cache rows themselves (PlanInPlaceReads), or the push's message
      // that holds them (AdoptedRows): nothing to gather.
      const size_t first = plan_->read_first_pos(h.id);
      const PartitionSlice* kept = slices.size() == 1 ? &t.slices[slices[0]] : nullptr;
      const float* rows = nullptr;
      if (kept != nullptr && kept->adopted != nullptr) {
        b.adopted = kept->adopted;
        rows = kept->adopted->rows() + (first - kept->cache_begin) * t.width;
      } else {
        GEEPS_RETURN_IF_ERROR(data_->Materialize(t, slices));
        rows = t.cache + first * t.width;
      }
      reads_in_place_.fetch_add(1);
      ++t.open_in_place_reads;
      b.open_in_place = true;
      lock.Unlock();
      GEEPS_RETURN_IF_ERROR(Advance());
      return rows;
    }
    GEEPS_RETURN_IF_ERROR(data_->AcquireBuffer(b, a.rows.size() * t.width * sizeof(float),
                                               {MemoryManager::Kind::kRead, h.id}));
    if (checked_) GEEPS_RETURN_IF_ERROR(checked_->BeforeGather(h.id, b.own()));
    GEEPS_RETURN_IF_ERROR(data_->Materialize(t, slices));
    GEEPS_RETURN_IF_ERROR(data_->Gather(h.id, t));
    if (checked_) GEEPS_RETURN_IF_ERROR(checked_->AfterRead(h.id, b.buffer));
  }
  GEEPS_RETURN_IF_ERROR(Advance());
  return static_cast<const float*>(b.buffer);
}

Status Worker::PostRead(ReadHandle h) {
  common::MutexLock api_lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(
      Expect(OpType::kPostRead, h.id, data_ ? data_->num_reads() : 0, "PostRead", OwnerOf(h)));
  EmulateCompute();
  AccessBuffers& b = data_->read_buf(h.id);
  if (checked_ && !b.open_in_place)
    GEEPS_RETURN_IF_ERROR(checked_->AtPostRead(h.id, b.buffer, b.own()));
  if (b.open_in_place) {
    TableCache& t = data_->table(seq_.reads()[h.id].table);
    common::MutexLock lock(&t.mu);
    GEEPS_RETURN_IF_ERROR(data_->CloseInPlaceRead(t, b));
  }
  GEEPS_RETURN_IF_ERROR(data_->ReleaseBuffer(b));
  return Advance();
}

StatusOr<float*> Worker::PreUpdate(UpdateHandle h) {
  common::MutexLock api_lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(
      Expect(OpType::kPreUpdate, h.id, data_ ? data_->num_updates() : 0, "PreUpdate", OwnerOf(h)));
  if (checked_) {
    GEEPS_RETURN_IF_ERROR(checked_->BeforePreUpdate(h.id, data_->update_buf(h.id).own()));
  }
  // A lost peer ends the wait for a buffer ZeroMQ still sends to it.
  GEEPS_ASSIGN_OR_RETURN(float* buffer,
                         data_->PrepareUpdate(h.id, *oplog_, config_.timeout, [this] {
                           return peers_failed_.load() ? PeerFailure() : Status::OK();
                         }));
  GEEPS_RETURN_IF_ERROR(Advance());
  return buffer;
}

Status Worker::Update(UpdateHandle h) {
  common::MutexLock api_lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(
      Expect(OpType::kUpdate, h.id, data_ ? data_->num_updates() : 0, "Update", OwnerOf(h)));
  EmulateCompute();
  AccessBuffers& b = data_->update_buf(h.id);
  float* own = b.own();  // the checked mode poisons it once copied
  if (checked_) GEEPS_RETURN_IF_ERROR(checked_->AtUpdate(h.id, b.buffer));
  if (plan_->direct_update(h.id)) {
    // The buffer is the table's whole clock of deltas: Advance (which
    // advances this table now) sends it from there.
    Status st = Advance(h.id);
    if (st.ok()) updates_direct_.fetch_add(1);
    if (st.ok() && checked_) st = checked_->AfterUpdate(h.id, own);
    Status released = data_->ReleaseBuffer(b);
    return st.ok() ? released : st;
  }
  // A resumed job's prologue updates are discarded (not applied anywhere).
  GEEPS_RETURN_IF_ERROR(data_->Scatter(h.id, config_.read_my_writes && !DiscardingPrologue()));
  if (checked_) GEEPS_RETURN_IF_ERROR(checked_->AfterUpdate(h.id, own));
  return Advance();
}

StatusOr<float*> Worker::LocalAccess(LocalHandle h) { return OpenLocal(h, /*read_only=*/false); }

StatusOr<const float*> Worker::LocalRead(LocalHandle h) {
  GEEPS_ASSIGN_OR_RETURN(float* rows, OpenLocal(h, /*read_only=*/true));
  return static_cast<const float*>(rows);
}

StatusOr<float*> Worker::OpenLocal(LocalHandle h, bool read_only) {
  common::MutexLock api_lock(&api_mu_);
  const char* call = read_only ? "LocalRead" : "LocalAccess";
  GEEPS_RETURN_IF_ERROR(
      Expect(OpType::kLocalAccess, h.id, data_ ? data_->num_locals() : 0, call, OwnerOf(h)));
  const RecordedAccess& a = seq_.locals()[h.id];
  if (a.read_only != read_only) {
    return FailedPreconditionError(std::string(call) + ": local#" + std::to_string(h.id) +
                                   " was recorded by " +
                                   (a.read_only ? "VirtualLocalRead (read-only): use LocalRead"
                                                : "VirtualLocalAccess: use LocalAccess"));
  }
  GEEPS_ASSIGN_OR_RETURN(float* result, data_->OpenLocal(h.id));
  GEEPS_RETURN_IF_ERROR(Advance());
  return result;
}

Status Worker::PostLocalAccess(LocalHandle h) {
  common::MutexLock api_lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(Expect(OpType::kPostLocalAccess, h.id, data_ ? data_->num_locals() : 0,
                               "PostLocalAccess", OwnerOf(h)));
  EmulateCompute();
  GEEPS_RETURN_IF_ERROR(data_->CloseLocal(h.id));
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
  common::MutexLock api_lock(&api_mu_);
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
  common::MutexLock api_lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckDeviceReady("EnqueueHostWork"));
  if (!work) return InvalidArgumentError("EnqueueHostWork: work is empty");
  return device_->HostFunction(std::move(work), stream_.get());
}

Status Worker::SynchronizeComputeStream() {
  common::MutexLock api_lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(CheckDeviceReady("SynchronizeComputeStream"));
  return device_->Synchronize(stream_.get());
}

const float* Worker::HostAddress(const float* buffer) {
  common::MutexLock api_lock(&api_mu_);
  if (buffer == nullptr || !CheckDeviceReady("HostAddress").ok()) return nullptr;
  return static_cast<const float*>(device_->HostAlias(buffer));
}

Status Worker::Clock() {
  common::MutexLock api_lock(&api_mu_);
  GEEPS_RETURN_IF_ERROR(Expect(OpType::kClock, -1, 0, "Clock", self()));
  return Advance();
}

// ---- Between iterations -------------------------------------------------------

Status Worker::Sync() {
  common::MutexLock api_lock(&api_mu_);
  if (phase_ != Phase::kRunning)
    return FailedPreconditionError("Sync: only after StartIterations and before Shutdown");
  if (pos_ != 0)
    return FailedPreconditionError("Sync: only between iterations (the iteration is at position " +
                                   std::to_string(pos_) + ")");
  const int64_t target = clock_.load();
  const auto deadline = SteadyClock::now() + config_.timeout;
  for (auto& tp : data_->tables()) {
    if (!tp) continue;
    TableCache& t = *tp;
    common::MutexLock lock(&t.mu);
    auto done = [&] {
      for (const PartitionSlice& s : t.slices)
        if (s.cache_count > 0 && s.age < target) return false;
      return true;
    };
    const bool ok = WaitForPushes(lock, deadline, [&] {
      return done() || shutdown_requested_.load() || peers_failed_.load() ||
             target > ended_clock_.load();
    });
    if (!done()) GEEPS_RETURN_IF_ERROR(EndedPeerBlocks(target, "Sync"));
    if (!ok)
      return DeadlineExceededError("Sync: table " + std::to_string(t.id) + " did not reach clock " +
                                   std::to_string(target) + " within " +
                                   std::to_string(config_.timeout.count()) + " ms");
    if (shutdown_requested_.load()) return CancelledError("Sync: the worker was shut down");
    if (peers_failed_.load() && !done()) return PeerFailure();
  }
  return Status::OK();
}

Status Worker::CopyRows(TableId table, const std::vector<RowIndex>& rows, float* out) {
  common::MutexLock api_lock(&api_mu_);
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
  return data_->CopyRows(table, rows, out);
}

StatusOr<int64_t> Worker::RequestCheckpoint() {
  common::MutexLock api_lock(&api_mu_);
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

Status Worker::Shutdown() {
  shutdown_requested_.store(true);
  WakeWaiters();  // reads blocked on fresh rows hold api_mu_
  common::MutexLock api_lock(&api_mu_);
  if (phase_ == Phase::kShutDown && channels_.empty()) return Status::OK();
  for (auto& c : channels_) c->Stop();
  channels_.clear();
  phase_ = Phase::kShutDown;
  Status st = stream_ ? device_->Synchronize(stream_.get()) : Status::OK();
  if (data_ && data_->swap()) data_->swap()->Stop();  // writes back what was handed over
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
