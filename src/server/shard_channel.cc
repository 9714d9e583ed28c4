#include "server/shard_channel.h"

#include "server/row_ops.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "transport/security.h"
#include "transport/socket_util.h"
#include "transport/tsan.h"

namespace geeps::server {

using transport::DecodedMessage;
using transport::FrameView;
using transport::MsgType;
using transport::WireHeader;

namespace {
constexpr int kPollSafetyMs = 200;  // re-check stop_ at least this often
// How long after a worker's messages move to a new connection the shard
// waits to hear that the earlier one ended before it calls it a handover.
constexpr std::chrono::milliseconds kHandoverGrace{2000};
}  // namespace

ShardChannel::ShardChannel(zmq::context_t* context, const Config& config, int partition,
                           std::string endpoint, std::unique_ptr<zmq::socket_t> bound)
    : context_(context),
      config_(config),
      partition_(partition),
      endpoint_(std::move(endpoint)),
      holds_pushes_(config.resend_after_connection_loss && endpoint_.rfind("inproc://", 0) != 0),
      socket_(std::move(bound)),
      fingerprint_(JobFingerprint(config)) {
  const int num_partitions = config_.num_shards * config_.num_channels;
  worker_fd_.assign(config_.num_workers, -1);
  worker_fd_ended_.assign(config_.num_workers, false);
  tables_.resize(config_.tables.size());
  for (size_t i = 0; i < config_.tables.size(); ++i) {
    const TableSpec& spec = config_.tables[i];
    if (spec.local) continue;
    auto t = std::make_unique<TableState>();
    t->span = common::PartitionRows(spec.num_rows, partition_, num_partitions);
    t->width = spec.row_width;
    t->rows->values.assign(t->span.size() * spec.row_width, 0.0f);
    t->clocks.assign(config_.num_workers, 0);
    t->subscriptions.resize(config_.num_workers);
    t->subscribed.assign(config_.num_workers, false);
    t->parts.resize(config_.num_workers);
    t->acked.assign(config_.num_workers, 0);
    t->whole_next.assign(config_.num_workers, false);
    if (t->span.size() > 0) ++checkpoint_tables_;
    tables_[i] = std::move(t);
  }
}

Status ShardChannel::Restore(int64_t clock) {
  if (started_) return FailedPreconditionError("ShardChannel::Restore after Start");
  if (clock <= 0) return InvalidArgumentError("ShardChannel::Restore: clock must be > 0");
  std::vector<std::pair<uint64_t, uint32_t>> shape;
  for (const auto& t : tables_)
    if (t && t->span.size() > 0) shape.emplace_back(t->span.size(), t->width);
  GEEPS_ASSIGN_OR_RETURN(
      CheckpointData d,
      ReadCheckpointFile(config_.checkpoint_dir, fingerprint_, partition_, clock,
                         CheckpointFileBytes(shape, mac_key() != nullptr), mac_key()));
  const std::string what = CheckpointPath(config_.checkpoint_dir, partition_, clock);
  // Check every entry against this partition's tables before changing state.
  std::vector<const CheckpointTable*> by_table(tables_.size(), nullptr);
  for (const CheckpointTable& e : d.tables) {
    if (e.table >= tables_.size() || !tables_[e.table] || tables_[e.table]->span.size() == 0)
      return DataLossError("checkpoint " + what + ": entry for table " + std::to_string(e.table) +
                           ", which has no rows in partition " + std::to_string(partition_));
    if (by_table[e.table])
      return DataLossError("checkpoint " + what + ": table " + std::to_string(e.table) +
                           " appears twice");
    const TableState& t = *tables_[e.table];
    if (e.width != t.width || e.first_row != t.span.begin || e.row_count != t.span.size())
      return DataLossError("checkpoint " + what + ": table " + std::to_string(e.table) +
                           " holds rows [" + std::to_string(e.first_row) + ", " +
                           std::to_string(e.first_row + e.row_count) + ") of width " +
                           std::to_string(e.width) + ", the partition owns [" +
                           std::to_string(t.span.begin) + ", " + std::to_string(t.span.end) +
                           ") of width " + std::to_string(t.width));
    by_table[e.table] = &e;
  }
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (tables_[i] && tables_[i]->span.size() > 0 && !by_table[i])
      return DataLossError("checkpoint " + what + ": table " + std::to_string(i) + " ('" +
                           config_.tables[i].name + "') is missing");
  }
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (!by_table[i]) continue;
    TableState& t = *tables_[i];
    // Fresh rows: pushes of the old ones (if any) keep those alive.
    t.rows = std::make_shared<SharedRows>();
    t.rows->values = by_table[i]->data;
    std::fill(t.clocks.begin(), t.clocks.end(), clock);
    t.min_clock = clock;
    t.start_clock = clock;
  }
  last_checkpoint_clock_.store(clock);
  GEEPS_LOG(Info) << "shard partition " << partition_ << ": restored clock " << clock << " from "
                  << what;
  return Status::OK();
}

ShardChannel::~ShardChannel() {
  Stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

StatusOr<std::unique_ptr<zmq::socket_t>> ShardChannel::BindSocket(
    zmq::context_t* context, const std::string& endpoint, std::string* actual,
    int64_t max_frame_bytes, const transport::SecurityConfig* security) {
  try {
    auto socket = std::make_unique<zmq::socket_t>(*context, zmq::socket_type::router);
    socket->set(zmq::sockopt::maxmsgsize, max_frame_bytes);
    socket->set(zmq::sockopt::sndhwm, 0);
    socket->set(zmq::sockopt::rcvhwm, 0);
    socket->set(zmq::sockopt::router_mandatory, 1);
    // A worker's routing id held by another connection (a stale one of the
    // same worker, or a stranger that claimed it first) passes to the
    // newest: otherwise ZeroMQ drops every message of the real worker.
    socket->set(zmq::sockopt::router_handover, 1);
    socket->set(zmq::sockopt::linger, 1000);
    transport::ConfigureCurveServer(*socket, security);  // CURVE (null: off)
    socket->bind(endpoint);
    if (actual) *actual = socket->get(zmq::sockopt::last_endpoint);
    return socket;
  } catch (const zmq::error_t& e) {
    return UnavailableError("shard: cannot bind " + endpoint + ": " + e.what());
  }
}

Status ShardChannel::Start() {
  if (started_) return FailedPreconditionError("shard channel already started");
  if (!socket_) {
    auto socket = BindSocket(context_, endpoint_, nullptr, transport::LargestFrameBytes(config_));
    if (!socket.ok()) {
      return Status(socket.status().code(), "shard partition " + std::to_string(partition_) + ": " +
                                                socket.status().message());
    }
    socket_ = std::move(socket).value();
  }
  if (wake_fd_ < 0) {
    GEEPS_ASSIGN_OR_RETURN(wake_fd_,
                           transport::NewWakeFd("shard partition " + std::to_string(partition_)));
  }
  if (!monitor_ && endpoint_.rfind("inproc://", 0) != 0) {
    // Connections that end (a worker that left, a stranger cut off for an
    // oversized frame or a failed handshake): counted.
    try {
      monitor_ = transport::MonitorDisconnects(*context_, *socket_);
    } catch (const zmq::error_t& e) {
      return UnavailableError("shard partition " + std::to_string(partition_) +
                              ": socket monitor: " + e.what());
    }
  }
  started_ = true;
  if (!config_.checkpoint_dir.empty()) {
    writer_stop_ = false;
    writer_ = std::thread([this] { RunWriter(); });
  }
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void ShardChannel::Stop() {
  if (!started_) return;
  started_ = false;
  stop_.store(true);
  transport::SignalWakeFd(wake_fd_);
  if (thread_.joinable()) thread_.join();
  // The writer finishes the checkpoints handed to it (complete ones only).
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writer_stop_ = true;
  }
  writer_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  transport::StopMonitor(*socket_, monitor_);
  socket_.reset();
}

void ShardChannel::RunWriter() {
  std::unique_lock<std::mutex> lock(writer_mu_);
  for (;;) {
    writer_cv_.wait(lock, [&] { return writer_stop_ || !to_write_.empty(); });
    if (to_write_.empty()) return;  // stopping, nothing left
    CheckpointData d = std::move(to_write_.front());
    to_write_.pop_front();
    lock.unlock();
    writer_cv_.notify_all();  // room in the queue
    const Status st = WriteCheckpointFile(config_.checkpoint_dir, d, /*keep=*/2, mac_key());
    if (st.ok()) {
      checkpoints_written_.fetch_add(1);
      last_checkpoint_clock_.store(d.clock);
    } else {
      GEEPS_LOG(Error) << "shard partition " << partition_ << ": checkpoint of clock " << d.clock
                       << " not written: " << st.message();
    }
    lock.lock();
  }
}

void ShardChannel::MaybeSnapshot(TableId table, const TableState& t, int64_t clock) {
  if (config_.checkpoint_dir.empty() || t.span.size() == 0) return;
  const bool periodic = config_.checkpoint_every > 0 && clock % config_.checkpoint_every == 0;
  if (!periodic && requested_.count(clock) == 0) return;
  CheckpointData& d = assembling_[clock];
  CheckpointTable e;
  e.table = table;
  e.width = t.width;
  e.first_row = t.span.begin;
  e.row_count = t.span.size();
  e.data = t.data();  // the rows hold exactly the updates of clocks < clock
  d.tables.push_back(std::move(e));
  if (static_cast<int>(d.tables.size()) < checkpoint_tables_) return;
  d.fingerprint = fingerprint_;
  d.partition = static_cast<uint32_t>(partition_);
  d.num_partitions = static_cast<uint32_t>(config_.num_shards * config_.num_channels);
  d.clock = clock;
  std::sort(d.tables.begin(), d.tables.end(),
            [](const CheckpointTable& a, const CheckpointTable& b) { return a.table < b.table; });
  {
    // At most two checkpoints wait for the writer; beyond that this
    // partition waits (a disk slower than the training).
    std::unique_lock<std::mutex> lock(writer_mu_);
    writer_cv_.wait(lock, [&] { return to_write_.size() < 2 || writer_stop_; });
    to_write_.push_back(std::move(d));
  }
  writer_cv_.notify_all();
  assembling_.erase(clock);
  requested_.erase(requested_.begin(), requested_.upper_bound(clock));
}

ShardStats ShardChannel::GetStats() const {
  ShardStats s;
  s.updates_applied = updates_applied_.load();
  s.rows_applied = rows_applied_.load();
  s.pushes_sent = pushes_sent_.load();
  s.apply_bytes = apply_bytes_.load();
  s.fold_bytes = fold_bytes_.load();
  s.push_copy_bytes = push_copy_bytes_.load();
  s.push_zero_copy_bytes = push_zero_copy_bytes_.load();
  s.early_push_parts = early_push_parts_.load();
  s.repeated_rows_skipped = repeated_rows_skipped_.load();
  s.connections_closed = connections_closed_.load();
  s.routing_id_handovers = routing_id_handovers_.load();
  s.resyncs_received = resyncs_received_.load();
  s.repushes = repushes_.load();
  s.bytes_received = bytes_received_.load();
  s.bytes_sent = bytes_sent_.load();
  s.frames_dropped = frames_dropped_.load();
  return s;
}

std::vector<float> ShardChannel::RowsForTesting(TableId table) const {
  if (table >= tables_.size() || !tables_[table]) return {};
  return tables_[table]->data();
}

void ShardChannel::Run() {
  std::vector<zmq::message_t> frames;
  // Polls the socket's ZMQ_FD (not zmq_poll, which costs a syscall per
  // socket per call to read its state): edge-triggered, so receive until
  // ZMQ_EVENTS shows nothing more before blocking again.
  pollfd fds[3] = {{static_cast<int>(socket_->get(zmq::sockopt::fd)), POLLIN, 0},
                   {wake_fd_, POLLIN, 0},
                   {monitor_ ? static_cast<int>(monitor_->get(zmq::sockopt::fd)) : -1, POLLIN, 0}};
  auto next_stall_check = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    try {
      int budget = 0;
      for (; budget < 256 && !stop_.load(); ++budget) {
        if (!(socket_->get(zmq::sockopt::events) & ZMQ_POLLIN)) break;
        if (!transport::TryRecvMultipart(*socket_, context_, &frames)) break;
        HandleMessage(frames);
        // Close the message now: over inproc its payload may be the
        // sender's own buffer, which it waits to get back (zero-copy sends).
        frames.clear();
      }
      if (monitor_) DrainMonitor();  // its ZMQ_FD is edge-triggered too
      if (budget == 256) continue;   // more is queued: check stop_, go on
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      GEEPS_LOG(Error) << "shard partition " << partition_ << ": " << e.what();
    }
    if (stop_.load()) break;
    // At most every kPollSafetyMs, not per message.
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_stall_check) {
      ReportStalls(now);
      next_stall_check = now + std::chrono::milliseconds(kPollSafetyMs);
    }
    if (::poll(fds, 3, kPollSafetyMs) < 0 && errno != EINTR) {
      GEEPS_LOG(Error) << "shard partition " << partition_
                       << ": poll failed: " << std::strerror(errno);
      break;
    }
  }
}

void ShardChannel::ReportStalls(std::chrono::steady_clock::time_point now) {
  const auto after = config_.timeout / 2;
  for (size_t id = 0; id < tables_.size(); ++id) {
    if (!tables_[id]) continue;
    TableState& t = *tables_[id];
    if (t.min_clock == t.stall_reported || now - t.last_advance < after) continue;
    // Workers that have not delivered clock min_clock while another has.
    std::vector<int> missing;
    bool someone_ahead = false;
    for (int w = 0; w < config_.num_workers; ++w) {
      if (t.clocks[w] > t.min_clock)
        someone_ahead = true;
      else
        missing.push_back(w);
    }
    if (!someone_ahead || missing.empty()) continue;
    t.stall_reported = t.min_clock;
    std::string who;
    for (int w : missing) who += (who.empty() ? "" : ", ") + std::to_string(w);
    GEEPS_LOG(Warning)
        << "shard partition " << partition_ << ", table " << id << " ('" << config_.tables[id].name
        << "'): clock " << t.min_clock << " has waited "
        << std::chrono::duration_cast<std::chrono::milliseconds>(now - t.last_advance).count()
        << " ms for the update of worker" << (missing.size() > 1 ? "s " : " ") << who
        << " (the others have sent theirs): is it stuck or gone, or was its "
        << "update lost on the way?";
  }
}

void ShardChannel::Drop(DropReason reason, const std::string& what) {
  frames_dropped_.fetch_add(1);
  if (!(logged_drop_reasons_ & (1u << reason))) {
    logged_drop_reasons_ |= 1u << reason;
    GEEPS_LOG(Warning) << "shard partition " << partition_ << ": dropped a frame (" << what
                       << "); further drops of this kind are only counted";
  }
}

void ShardChannel::HandleMessage(std::vector<zmq::message_t>& frames) {
  size_t total = 0;
  for (const auto& f : frames) total += f.size();
  bytes_received_.fetch_add(static_cast<int64_t>(total));
  if (frames.size() < 2) return Drop(kDropFraming, "no routing id or header");
  const int worker =
      transport::ParseWorkerRoutingId(frames[0].data(), frames[0].size(), config_.num_workers);
  if (worker < 0) return Drop(kDropSender, "unknown sender routing id");
  // The descriptor of the connection it came on (ZeroMQ sets it on the
  // frames read from a TCP/IPC connection, not on the routing id it adds;
  // -1 otherwise).
  if (monitor_) NoteConnection(worker, zmq_msg_get(frames[1].handle(), ZMQ_SRCFD));
  FrameView views[4];
  const size_t count = std::min<size_t>(frames.size() - 1, 4);
  if (frames.size() - 1 > 3) return Drop(kDropFraming, "too many frames");
  for (size_t i = 0; i < count; ++i) views[i] = {frames[i + 1].data(), frames[i + 1].size()};
  StatusOr<DecodedMessage> decoded = transport::DecodeFrames(views, count);
  if (!decoded.ok()) return Drop(kDropFraming, decoded.status().message());
  const DecodedMessage& m = *decoded;
  if (m.header.sender != static_cast<uint32_t>(worker))
    return Drop(kDropSender, "header sender does not match routing id");
  if (m.header.table >= tables_.size() || !tables_[m.header.table])
    return Drop(kDropTable, "unknown or local table " + std::to_string(m.header.table));
  if (m.type == MsgType::kAck || m.type == MsgType::kResync)
    return HandleAckOrResync(worker, m);  // no rows (DecodeFrames checked), any width
  if (m.type != MsgType::kSubscribe && m.type != MsgType::kUpdate)
    return Drop(kDropType, std::string("unexpected ") + transport::MsgTypeName(m.type));
  TableState& t = *tables_[m.header.table];
  if (m.type != MsgType::kSubscribe && m.header.row_width != t.width)
    return Drop(kDropTable, "row width does not match the table");
  Status rows_ok = transport::ValidateRows(m, t.span.begin, t.span.end);
  if (!rows_ok.ok()) return Drop(kDropRows, rows_ok.message());
  switch (m.type) {
    case MsgType::kSubscribe:
      return HandleSubscribe(worker, m);
    case MsgType::kUpdate:
      return HandleUpdate(worker, m);
    default:
      return Drop(kDropType, std::string("unexpected ") + transport::MsgTypeName(m.type));
  }
}

void ShardChannel::DrainMonitor() {
  std::vector<int> ended;
  connections_closed_.fetch_add(transport::CountDisconnects(*monitor_, &ended),
                                std::memory_order_relaxed);
  for (int fd : ended) ConnectionEnded(fd);
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < pending_handovers_.size();) {
    if (now - pending_handovers_[i].since < kHandoverGrace) {
      ++i;
      continue;
    }
    ReportHandover(pending_handovers_[i].worker);
    pending_handovers_.erase(pending_handovers_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void ShardChannel::ConnectionEnded(int fd) {
  for (int w = 0; w < config_.num_workers; ++w)
    if (worker_fd_[w] == fd) worker_fd_ended_[w] = true;
  pending_handovers_.erase(std::remove_if(pending_handovers_.begin(), pending_handovers_.end(),
                                          [fd](const PendingHandover& p) { return p.fd == fd; }),
                           pending_handovers_.end());
}

void ShardChannel::NoteConnection(int worker, int fd) {
  if (fd < 0 || !monitor_ || worker_fd_[worker] == fd) return;  // inproc, or as before
  DrainMonitor();
  // A descriptor's number is reused only once its connection has ended:
  // whoever used it last, or waits to hear of its end, has seen that.
  ConnectionEnded(fd);
  const int before = worker_fd_[worker];
  const bool ended = worker_fd_ended_[worker];
  worker_fd_[worker] = fd;
  worker_fd_ended_[worker] = false;
  if (before < 0 || ended) return;  // its first connection, or a reconnect
  // The shard may hear of the earlier connection's end after the new one's
  // first message (a reset it learns of late): judged kHandoverGrace later.
  pending_handovers_.push_back({worker, before, std::chrono::steady_clock::now()});
}

void ShardChannel::ReportHandover(int worker) {
  routing_id_handovers_.fetch_add(1, std::memory_order_relaxed);
  if (logged_handover_) return;
  logged_handover_ = true;
  GEEPS_LOG(Warning) << "shard partition " << partition_ << ": messages of worker " << worker
                     << " (routing id " << transport::WorkerRoutingId(worker)
                     << ") came from a new connection while the one they came from stayed "
                        "open: the newest connection takes the id over "
                        "(ZMQ_ROUTER_HANDOVER); the other is a stale connection of that "
                        "worker, or another process using its id (docs/reliability.md, "
                        "\"A worker's routing id claimed by another connection\"); "
                        "further handovers are only counted";
}

bool ShardChannel::AcceptPart(TableState& t, int worker, const DecodedMessage& m) {
  PartState& p = t.parts[worker];
  const bool continues = m.header.offset > 0;
  if (continues != (p.type != 0) ||
      (continues &&
       (p.type != m.header.type || p.clock != m.header.clock || p.next != m.header.offset ||
        (m.header.row_count > 0 && m.RowAt(0) <= p.last_row)))) {
    Drop(kDropFraming, "message part out of sequence");
    return false;
  }
  if (m.header.flags & transport::kFlagMore) {
    p.type = m.header.type;
    p.clock = m.header.clock;
    p.next = m.header.offset + m.header.row_count;
    if (m.header.row_count > 0) p.last_row = m.RowAt(m.header.row_count - 1);
  } else {
    p = PartState{};
  }
  return true;
}

void ShardChannel::HandleSubscribe(int worker, const DecodedMessage& m) {
  TableState& t = *tables_[m.header.table];
  // A subscription cut off by a lost connection is sent again whole.
  if (m.header.offset == 0 && t.parts[worker].type == m.header.type) t.parts[worker] = PartState{};
  if (!AcceptPart(t, worker, m)) return;
  std::vector<uint64_t>& rows = t.subscriptions[worker];
  if (t.subscribed[worker]) {
    // A worker that lost its connection before a push reached it sends its
    // subscription again (CommChannel::ResendLocked): the same rows again
    // are harmless; different ones are not allowed.
    bool same = m.header.offset + m.header.row_count <= rows.size();
    for (uint64_t i = 0; same && i < m.header.row_count; ++i)
      same = rows[m.header.offset + i] == m.RowAt(i);
    if (same && !(m.header.flags & transport::kFlagMore))
      same = m.header.offset + m.header.row_count == rows.size();
    if (!same) {
      t.parts[worker] = PartState{};
      return Drop(kDropDuplicateSubscribe, "second subscription, not the same as the first");
    }
    return;
  }
  if (m.header.offset == 0) rows.clear();
  for (uint64_t i = 0; i < m.header.row_count; ++i) rows.push_back(m.RowAt(i));
  if (m.header.flags & transport::kFlagMore) return;
  // A worker subscribes before its first update, so the minimum is still the
  // start clock (0, or a resumed checkpoint's): push at once if it is not 0.
  // Past it, `data` may hold deltas of the current clock (see TableState).
  if (t.min_clock > t.start_clock) {
    t.parts[worker] = PartState{};
    return Drop(kDropLateSubscribe, "subscription after the minimum clock passed the start");
  }
  t.subscribed[worker] = true;
  auto group =
      std::find_if(t.push_groups.begin(), t.push_groups.end(),
                   [&](const std::vector<int>& g) { return t.subscriptions[g[0]] == rows; });
  if (group != t.push_groups.end()) {
    group->push_back(worker);
  } else {
    t.push_groups.push_back({worker});
    t.pushed_early.push_back(0);
  }
  if (t.min_clock > 0) {
    PushRows({worker}, m.header.table, t, 0, rows.size(), /*final_part=*/true, t.min_clock, t.rows);
    HoldPush(t, t.min_clock);  // the rows stay as they are until the minimum passes it
  }
}

void ShardChannel::HandleUpdate(int worker, const DecodedMessage& m) {
  TableState& t = *tables_[m.header.table];
  // `aux` acknowledges the last push the worker had installed (0: none).
  // One above the minimum was never sent: the whole update is dropped.
  if (m.header.aux > t.min_clock)
    return Drop(kDropClock, "update acknowledging push " + std::to_string(m.header.aux) +
                                " from worker " + std::to_string(worker) +
                                ", past the minimum clock " + std::to_string(t.min_clock));
  if (m.header.clock < t.clocks[worker]) {
    // A clock this worker completed here, sent again (a resend after a
    // connection reset): already applied, so harmless; not an error.
    repeated_rows_skipped_.fetch_add(static_cast<int64_t>(m.header.row_count),
                                     std::memory_order_relaxed);
    Acknowledge(t, worker, m.header.aux, m.type);
    return;
  }
  if (m.header.clock != t.clocks[worker])
    return Drop(kDropClock, "update for clock " + std::to_string(m.header.clock) + " from worker " +
                                std::to_string(worker) + ", expected " +
                                std::to_string(t.clocks[worker]));
  PartState& p = t.parts[worker];
  if (m.header.offset == 0 && p.type == m.header.type && p.clock == m.header.clock) {
    // The message restarts: it was cut off and is sent again whole. Rows
    // below the furthest offset reached were applied; they are skipped.
    const uint64_t applied = std::max(p.applied_before, p.next);
    p = PartState{};
    p.applied_before = applied;
  }
  const uint64_t applied_before = p.applied_before;
  if (!AcceptPart(t, worker, m)) return;
  // Before any row is written: the last acknowledgement of the held push
  // releases it, and the write needs no copy.
  Acknowledge(t, worker, m.header.aux, m.type);
  // Rows of this part not applied before (all of them but after a restart).
  const uint64_t skip =
      applied_before > m.header.offset
          ? std::min<uint64_t>(applied_before - m.header.offset, m.header.row_count)
          : 0;
  if (skip > 0)
    repeated_rows_skipped_.fetch_add(static_cast<int64_t>(skip), std::memory_order_relaxed);
  // A worker asks for a checkpoint at the end of this clock. Every
  // partition gets this worker's update of the clock, for every table,
  // before any table's minimum can pass it.
  if (m.header.flags & transport::kFlagCheckpoint) requested_.insert(m.header.clock + 1);
  const uint32_t w = t.width;
  const bool direct =
      !config_.deterministic_bsp && m.header.clock == t.min_clock && t.min_clock > t.start_clock;
  if (direct) {
    // Rows arrive in ascending order: this part writes from its first row
    // up, above anything an early push part still holds.
    float* rows =
        Writable(t, m.header.row_count > skip ? m.RowAt(skip) - t.span.begin : t.span.size())
            .data();
    for (uint64_t i = skip; i < m.header.row_count; ++i)
      AddRow(rows + (m.RowAt(i) - t.span.begin) * w, m.payload + i * w * sizeof(float), w);
  } else if (m.header.row_count > skip) {
    // Deterministic mode keeps each worker's deltas apart, so that they are
    // added in rank order whatever order they arrived in.
    const int64_t key =
        m.header.clock * config_.num_workers + (config_.deterministic_bsp ? worker : 0);
    std::vector<float>& acc = t.pending[key];
    if (acc.empty()) {
      if (!t.spare.empty()) {
        acc = std::move(t.spare.back());
        t.spare.pop_back();
      } else {
        acc.assign(t.data().size(), 0.0f);
      }
    }
    for (uint64_t i = skip; i < m.header.row_count; ++i)
      AddRow(acc.data() + (m.RowAt(i) - t.span.begin) * w, m.payload + i * w * sizeof(float), w);
  }
  rows_applied_.fetch_add(static_cast<int64_t>(m.header.row_count - skip));
  apply_bytes_.fetch_add(static_cast<int64_t>((m.header.row_count - skip) * w * sizeof(float)),
                         std::memory_order_relaxed);
  if (m.header.flags & transport::kFlagMore) {  // the clock ends with the last part
    if (direct) MaybePushEarly(m.header.table, t);
    return;
  }
  updates_applied_.fetch_add(1);
  t.clocks[worker] = m.header.clock + 1;
  const int64_t new_min = *std::min_element(t.clocks.begin(), t.clocks.end());
  if (new_min <= t.min_clock) {
    if (direct) MaybePushEarly(m.header.table, t);
    return;
  }
  // Fold in the deltas of the clocks the minimum passed.
  while (!t.pending.empty() && t.pending.begin()->first / config_.num_workers < new_min) {
    std::vector<float>& acc = t.pending.begin()->second;
    FoldAndClear(Writable(t).data(), acc.data(), acc.size());
    fold_bytes_.fetch_add(static_cast<int64_t>(acc.size() * sizeof(float)),
                          std::memory_order_relaxed);
    if (t.spare.size() < 4) t.spare.push_back(std::move(acc));
    t.pending.erase(t.pending.begin());
  }
  t.min_clock = new_min;
  t.last_advance = std::chrono::steady_clock::now();
  MaybeSnapshot(m.header.table, t, new_min);
  // The rest of each push (all of it unless early parts went out: those
  // were of this push, new_min being the old minimum + 1). A member that
  // resynced since its early parts went out gets the push whole.
  for (size_t g = 0; g < t.push_groups.size(); ++g) {
    const uint64_t size = t.subscriptions[t.push_groups[g].front()].size();
    const std::vector<int> rest = GroupMembers(t, g, false);
    if (!rest.empty())
      PushRows(rest, m.header.table, t, t.pushed_early[g], size, /*final_part=*/true, new_min,
               t.rows);
    for (int w : GroupMembers(t, g, true)) {
      PushRows({w}, m.header.table, t, 0, size, /*final_part=*/true, new_min, t.rows);
      t.whole_next[w] = false;
    }
    t.pushed_early[g] = 0;
  }
  // The rows now are exactly this push (of every group): held until every
  // subscriber has it, since the next direct writes move them on.
  if (!t.push_groups.empty()) HoldPush(t, new_min);
}

std::vector<int> ShardChannel::GroupMembers(const TableState& t, size_t g, bool whole_next) const {
  std::vector<int> out;
  for (int w : t.push_groups[g])
    if (t.whole_next[w] == whole_next) out.push_back(w);
  return out;
}

bool ShardChannel::Acknowledge(TableState& t, int worker, int64_t clock, MsgType type) {
  if (clock > t.min_clock) {
    Drop(kDropClock, std::string(transport::MsgTypeName(type)) + " acknowledging push " +
                         std::to_string(clock) + " from worker " + std::to_string(worker) +
                         ", past the minimum clock " + std::to_string(t.min_clock));
    return false;
  }
  if (clock > t.acked[worker]) {
    t.acked[worker] = clock;
    if (t.held && clock >= t.held_clock) MaybeReleaseHold(t);
  }
  return true;
}

void ShardChannel::HoldPush(TableState& t, int64_t clock) {
  if (!holds_pushes_) return;
  if (t.held != t.rows) {
    ReleaseHold(t);  // the last push's: this one supersedes it
    // One more hold on the rows, taken and let go on this thread only.
    t.rows->in_flight.fetch_add(1, std::memory_order_relaxed);
    t.held = t.rows;
  }
  // Unchanged rows held again (nothing was written since the last push):
  // they are this push's values too.
  t.rows->held_end = t.span.size();
  t.held_clock = clock;
  MaybeReleaseHold(t);
}

void ShardChannel::MaybeReleaseHold(TableState& t) {
  if (!t.held) return;
  for (int w = 0; w < config_.num_workers; ++w)
    if (t.subscribed[w] && t.acked[w] < t.held_clock) return;
  ReleaseHold(t);
}

void ShardChannel::ReleaseHold(TableState& t) {
  if (!t.held) return;
  // As ZeroMQ's free function does: a later write (MutableRows, acquire)
  // that sees the count at 0 writes the rows in place.
  t.held->in_flight.fetch_sub(1, std::memory_order_release);
  t.held.reset();
}

void ShardChannel::HandleAckOrResync(int worker, const DecodedMessage& m) {
  const TableId table = m.header.table;
  TableState& t = *tables_[table];
  const int64_t installed = m.header.aux;
  // A message the worker may be sending in parts is left as it is: a
  // resent update restarts at offset 0 (HandleUpdate).
  if (!Acknowledge(t, worker, installed, m.type)) return;
  if (m.type == MsgType::kAck) return;
  resyncs_received_.fetch_add(1, std::memory_order_relaxed);
  if (!t.subscribed[worker]) return;  // nothing was pushed to it
  // Early parts of the next push went to its group before the connection
  // came back (some may be lost): it gets that push whole.
  for (size_t g = 0; g < t.push_groups.size(); ++g) {
    const std::vector<int>& group = t.push_groups[g];
    if (t.pushed_early[g] > 0 && std::find(group.begin(), group.end(), worker) != group.end())
      t.whole_next[worker] = true;
  }
  if (t.held && installed < t.held_clock) {
    // Counted before it leaves, so a receiver that looks sees it.
    repushes_.fetch_add(1, std::memory_order_relaxed);
    PushRows({worker}, table, t, 0, t.subscriptions[worker].size(), /*final_part=*/true,
             t.held_clock, t.held);
  } else if (!t.held && installed < t.min_clock && !logged_unheld_resync_) {
    logged_unheld_resync_ = true;
    GEEPS_LOG(Warning) << "shard partition " << partition_ << ", table " << table << " ('"
                       << config_.tables[table].name << "'): worker " << worker
                       << " resynced without the push of clock " << t.min_clock << " (it has "
                       << installed << "), which is not held "
                       << (holds_pushes_ ? "(every subscriber had acknowledged it)"
                                         : "(resend_after_connection_loss is off, or inproc)")
                       << ": it cannot be pushed again; further cases are not logged";
  }
}

void ShardChannel::MaybePushEarly(TableId table, TableState& t) {
  const int64_t c = t.min_clock;
  if (config_.pipeline_part_bytes == 0 || config_.deterministic_bsp || c <= t.start_clock ||
      t.push_groups.empty())
    return;
  // Deltas of clock c still pending (a worker sent them ahead of the
  // minimum, under SSP) are not in the rows yet: nothing of clock c + 1's
  // push may leave before the advance folds them in.
  if (!t.pending.empty() && t.pending.begin()->first / config_.num_workers <= c) return;
  // The frontier: no worker will write a row below it for clock c.
  uint64_t frontier = UINT64_MAX;
  for (int w = 0; w < config_.num_workers; ++w) {
    if (t.clocks[w] > c) continue;  // done with clock c
    const PartState& p = t.parts[w];
    const uint64_t next = p.type == static_cast<uint16_t>(MsgType::kUpdate) && p.clock == c
                              ? p.last_row + 1
                              : t.span.begin;  // has not started clock c
    frontier = std::min(frontier, next);
  }
  const uint64_t min_part_bytes = config_.pipeline_part_bytes;
  const uint64_t row_bytes = static_cast<uint64_t>(t.width) * sizeof(float);
  for (size_t g = 0; g < t.push_groups.size(); ++g) {
    const std::vector<uint64_t>& rows = t.subscriptions[t.push_groups[g].front()];
    if (rows.size() < 2) continue;
    // Never the last row: the advance sends at least one part, the push's
    // last.
    const uint64_t below = std::min<uint64_t>(
        rows.size() - 1,
        static_cast<uint64_t>(std::lower_bound(rows.begin(), rows.end(), frontier) - rows.begin()));
    if (below <= t.pushed_early[g] || (below - t.pushed_early[g]) * row_bytes < min_part_bytes)
      continue;
    // Not to members that resynced since the push's first early part: they
    // get it whole at the advance.
    const std::vector<int> members = GroupMembers(t, g, false);
    if (!members.empty()) {
      // Counted before it leaves, so a receiver that looks sees it.
      early_push_parts_.fetch_add(1, std::memory_order_relaxed);
      PushRows(members, table, t, t.pushed_early[g], below, /*final_part=*/false, c + 1, t.rows);
    }
    t.pushed_early[g] = below;
  }
}

void ShardChannel::ReleaseRows(void* /*data*/, void* hint) {
  auto* hold = static_cast<std::shared_ptr<SharedRows>*>(hint);
  (*hold)->in_flight.fetch_sub(1, std::memory_order_release);
  delete hold;
}

std::vector<float>& ShardChannel::TableState::MutableRows(uint64_t first, size_t* copied) {
  *copied = 0;
  if (rows->in_flight.load(std::memory_order_acquire) == 0) {
    rows->held_end = 0;
  } else if (first < rows->held_end) {
    // A push still reads the rows: write a copy; the push keeps the old.
    auto fresh = std::make_shared<SharedRows>();
    fresh->values = rows->values;
    *copied = fresh->values.size() * sizeof(float);
    rows = std::move(fresh);
  }
  return rows->values;
}

std::vector<float>& ShardChannel::Writable(TableState& t, uint64_t first) {
  size_t copied = 0;
  std::vector<float>& rows = t.MutableRows(first, &copied);
  if (copied > 0)
    push_copy_bytes_.fetch_add(static_cast<int64_t>(copied), std::memory_order_relaxed);
  return rows;
}

void ShardChannel::PushRows(const std::vector<int>& workers, TableId table, TableState& t,
                            uint64_t from, uint64_t to, bool final_part, int64_t clock,
                            const std::shared_ptr<SharedRows>& source) {
  const std::vector<uint64_t>& rows = t.subscriptions[workers.front()];
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kPush);
  h.sender = static_cast<uint32_t>(partition_);
  h.table = table;
  h.clock = clock;
  h.aux = clock;  // the rows hold exactly the clocks < clock
  h.row_width = t.width;
  const size_t row_bytes = static_cast<size_t>(t.width) * sizeof(float);
  const uint64_t per = transport::RowsPerPart(t.width, false, config_.max_message_bytes);
  std::vector<bool> failed(workers.size(), false);
  uint64_t first = from;
  do {
    const uint64_t n = std::min<uint64_t>(per, to - first);
    h.offset = first;
    h.row_count = n;
    h.flags = first + n < to || !final_part ? transport::kFlagMore : 0;
    zmq::message_t header(transport::kHeaderBytes);
    transport::EncodeHeader(h, header.data());
    zmq::message_t payload;
    // Subscribed rows are sorted and distinct: consecutive iff they span n.
    // Then every receiver gets a message over the rows themselves (each its
    // own, so that each release goes through ReleaseRows rather than
    // ZeroMQ's internal reference count, which ThreadSanitizer cannot see).
    const bool zero_copy = n > 0 && rows[first + n - 1] - rows[first] == n - 1;
    float* const from =
        zero_copy ? source->values.data() + (rows[first] - t.span.begin) * t.width : nullptr;
    if (zero_copy) {
      push_zero_copy_bytes_.fetch_add(static_cast<int64_t>(n * row_bytes),
                                      std::memory_order_relaxed);
      source->held_end =
          std::max<uint64_t>(source->held_end, rows[first + n - 1] - t.span.begin + 1);
    } else {
      payload.rebuild(n * row_bytes);
      char* out = static_cast<char*>(payload.data());
      push_copy_bytes_.fetch_add(static_cast<int64_t>(n * row_bytes), std::memory_order_relaxed);
      // Copy runs of consecutive rows at once.
      uint64_t i = first;
      while (i < first + n) {
        uint64_t j = i + 1;
        while (j < first + n && rows[j] == rows[j - 1] + 1) ++j;
        std::memcpy(out + (i - first) * row_bytes,
                    source->values.data() + (rows[i] - t.span.begin) * t.width,
                    (j - i) * row_bytes);
        i = j;
      }
    }
    transport::ReleaseBeforeSend(context_);
    for (size_t k = 0; k < workers.size(); ++k) {
      if (failed[k]) continue;
      // The last receiver takes the messages; the others get copies that
      // share the payload's buffer. Zero-copy: a message over the rows per
      // receiver, each holding them (and `t.rows` alive) until ReleaseRows.
      const bool last = k + 1 == workers.size();
      zmq::message_t header_copy, payload_copy;
      if (!last) header_copy.copy(header);
      if (zero_copy) {
        source->in_flight.fetch_add(1, std::memory_order_relaxed);
        (last ? payload : payload_copy)
            .rebuild(from, n * row_bytes, ReleaseRows, new std::shared_ptr<SharedRows>(source));
      } else if (!last && n > 0) {
        payload_copy.copy(payload);
      }
      zmq::message_t& hdr = last ? header : header_copy;
      zmq::message_t& pay = last ? payload : payload_copy;
      try {
        const std::string id = transport::WorkerRoutingId(workers[k]);
        socket_->send(zmq::buffer(id), zmq::send_flags::sndmore);
        if (n == 0) {
          socket_->send(hdr, zmq::send_flags::none);
        } else {
          socket_->send(hdr, zmq::send_flags::sndmore);
          socket_->send(pay, zmq::send_flags::none);
        }
        bytes_sent_.fetch_add(static_cast<int64_t>(transport::kHeaderBytes + n * row_bytes));
      } catch (const zmq::error_t& e) {
        // EHOSTUNREACH (router_mandatory): the worker's connection is gone
        // (it shut down, or it was lost: the worker resyncs when it is
        // back). Not fatal; its message (a zero-copy payload's hold with
        // it) is closed unsent. Logged once per error.
        failed[k] = true;
        if (logged_send_errors_.insert(e.num()).second) {
          GEEPS_LOG(Info) << "shard partition " << partition_ << ": push to worker " << workers[k]
                          << " failed: " << e.what()
                          << "; further failures of this kind are not logged";
        }
      }
    }
    first += n;
  } while (first < to);
  if (!final_part) return;
  for (size_t k = 0; k < workers.size(); ++k) {
    if (!failed[k]) pushes_sent_.fetch_add(1);
  }
}

}  // namespace geeps::server
