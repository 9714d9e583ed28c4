#include "server/shard_channel.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "common/machines.h"
#include "transport/fingerprint.h"
#include "transport/part_split.h"
#include "transport/routing_id.h"
#include "transport/socket_util.h"
#include "transport/sockets.h"
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

int NumPartitions(const Config& config) { return config.num_shards * config.num_channels; }

// Shared tables with rows in `partition`: the entries of its checkpoints.
int SavedTables(const Config& config, int partition) {
  int n = 0;
  for (const TableSpec& spec : config.tables)
    if (!spec.local &&
        common::PartitionRows(spec.num_rows, partition, NumPartitions(config)).size() > 0)
      ++n;
  return n;
}
}  // namespace

ShardChannel::ShardChannel(transport::Context* context, const Config& config, int partition,
                           std::string endpoint, transport::Socket bound,
                           std::vector<bool> participants)
    : context_(context),
      config_(config),
      partition_(partition),
      endpoint_(std::move(endpoint)),
      holds_pushes_(config.resend_after_connection_loss && endpoint_.rfind("inproc://", 0) != 0),
      socket_(std::move(bound)),
      checkpoints_(config.checkpoint_dir, config.checkpoint_every,
                   transport::JobFingerprint(config, transport::FingerprintScope::kCheckpoint),
                   partition, NumPartitions(config), SavedTables(config, partition)) {
  worker_fd_.assign(config_.num_workers, -1);
  worker_fd_ended_.assign(config_.num_workers, false);
  PartitionTable::Options options;
  options.num_workers = config_.num_workers;
  options.participants = std::move(participants);
  if (options.participants.empty() && config_.aggregate_per_machine) {
    for (int w = 0; w < config_.num_workers; ++w)
      options.participants.push_back(common::IsParticipant(config_, w));
  }
  options.deterministic = config_.deterministic_bsp;
  options.pipeline_part_bytes = config_.pipeline_part_bytes;
  options.holds_pushes = holds_pushes_;
  tables_.resize(config_.tables.size());
  for (size_t i = 0; i < config_.tables.size(); ++i) {
    const TableSpec& spec = config_.tables[i];
    if (spec.local) continue;
    tables_[i] = std::make_unique<PartitionTable>(
        common::PartitionRows(spec.num_rows, partition_, NumPartitions(config_)), spec.row_width,
        options, &counters_);
  }
}

Status ShardChannel::Restore(int64_t clock) {
  if (started_) return FailedPreconditionError("ShardChannel::Restore after Start");
  if (clock <= 0) return InvalidArgumentError("ShardChannel::Restore: clock must be > 0");
  std::vector<CheckpointShape> shapes(tables_.size());
  for (size_t i = 0; i < tables_.size(); ++i) {
    shapes[i].name = config_.tables[i].name;
    if (!tables_[i]) continue;
    shapes[i].saved = tables_[i]->span().size() > 0;
    shapes[i].width = tables_[i]->width();
    shapes[i].span = tables_[i]->span();
  }
  // The whole file and every entry are checked before any state changes.
  GEEPS_ASSIGN_OR_RETURN(CheckpointData d, checkpoints_.Read(clock, shapes));
  for (CheckpointTable& e : d.tables) tables_[e.table]->Restore(std::move(e.data), clock);
  checkpoints_.NoteRestored(clock);
  GEEPS_LOG(Info) << "shard partition " << partition_ << ": restored clock " << clock << " from "
                  << CheckpointPath(config_.checkpoint_dir, partition_, clock);
  return Status::OK();
}

ShardChannel::~ShardChannel() {
  Stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status ShardChannel::Start() {
  if (started_) return FailedPreconditionError("shard channel already started");
  schedule_ = PushSchedule(tables_.size(), kMaxPushHold);
  if (!socket_) {
    auto socket =
        transport::BindShardSocket(*context_, endpoint_, transport::LargestFrameBytes(config_));
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
    auto monitor = transport::NewMonitorSocket(*context_, socket_, endpoint_);
    if (!monitor.ok()) {
      return Status(monitor.status().code(), "shard partition " + std::to_string(partition_) +
                                                 ": socket monitor: " + monitor.status().message());
    }
    monitor_ = std::move(monitor).value();
  }
  started_ = true;
  checkpoints_.Start();  // with a checkpoint_dir
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
  checkpoints_.Stop();
  transport::StopMonitor(socket_, monitor_);
  socket_.reset();
}

ShardStats ShardChannel::GetStats() const {
  ShardStats s;
  s.updates_applied = counters_.updates_applied.load();
  s.rows_applied = counters_.rows_applied.load();
  s.pushes_sent = pushes_sent_.load();
  s.apply_bytes = counters_.apply_bytes.load();
  s.fold_bytes = counters_.fold_bytes.load();
  s.push_copy_bytes = counters_.push_copy_bytes.load();
  s.push_zero_copy_bytes = counters_.push_zero_copy_bytes.load();
  s.early_push_parts = counters_.early_push_parts.load();
  s.repeated_rows_skipped = counters_.repeated_rows_skipped.load();
  s.connections_closed = connections_closed_.load();
  s.routing_id_handovers = routing_id_handovers_.load();
  s.resyncs_received = counters_.resyncs_received.load();
  s.repushes = counters_.repushes.load();
  s.pushes_deferred = pushes_deferred_.load();
  s.bytes_received = bytes_received_.load();
  s.bytes_sent = bytes_sent_.load();
  s.frames_dropped = frames_dropped_.load();
  return s;
}

std::vector<float> ShardChannel::RowsForTesting(TableId table) const {
  if (table >= tables_.size() || !tables_[table]) return {};
  return tables_[table]->values();
}

void ShardChannel::Run() {
  std::vector<transport::Frame> frames;
  // Polls the socket's ZMQ_FD (not zmq_poll, which costs a syscall per
  // socket per call to read its state): edge-triggered, so receive until
  // ZMQ_EVENTS shows nothing more before blocking again.
  pollfd fds[3] = {
      {socket_.fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}, {monitor_ ? monitor_.fd() : -1, POLLIN, 0}};
  auto next_stall_check = std::chrono::steady_clock::now();
  bool first_round = true;
  while (!stop_.load()) {
    try {
      // Its ZMQ_FD is edge-triggered too; pending hand-overs are reported
      // after a grace period, so those are looked at on every round. First:
      // what it does may send on the socket, which the loop below then reads.
      if (monitor_ && ((fds[2].revents & POLLIN) || first_round || !pending_handovers_.empty()))
        DrainMonitor();
      first_round = false;
      int budget = 0;
      // Receive until a receive finds nothing: that one reads the socket's
      // state (as ZMQ_EVENTS would, each costing ZeroMQ two system calls),
      // so the next arrival signals ZMQ_FD again.
      for (; budget < 256 && !stop_.load(); ++budget) {
        if (!socket_.TryReceive(context_, &frames)) break;
        HandleMessage(frames);
        // Close the message now: over inproc its payload may be the
        // sender's own buffer, which it waits to get back (zero-copy sends).
        frames.clear();
      }
      if (budget == 256) continue;  // more is queued: check stop_, go on
    } catch (const transport::Error& e) {
      if (e.context_closed()) break;
      GEEPS_LOG(Error) << "shard partition " << partition_ << ": " << e.what();
    }
    if (stop_.load()) break;
    // At most every kPollSafetyMs, not per message.
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_stall_check) {
      ReportStalls(now);
      SendReleased(&now);
      next_stall_check = now + std::chrono::milliseconds(kPollSafetyMs);
    }
    for (pollfd& f : fds) f.revents = 0;
    if (::poll(fds, 3, kPollSafetyMs) < 0 && errno != EINTR) {
      GEEPS_LOG(Error) << "shard partition " << partition_
                       << ": poll failed: " << std::strerror(errno);
      break;
    }
  }
}

void ShardChannel::ReportStalls(std::chrono::steady_clock::time_point now) {
  for (size_t id = 0; id < tables_.size(); ++id) {
    if (!tables_[id]) continue;
    std::chrono::steady_clock::duration waited{};
    const std::vector<int> missing =
        tables_[id]->TakeStalledWorkers(now, config_.timeout / 2, &waited);
    if (missing.empty()) continue;
    std::string who;
    for (int w : missing) who += (who.empty() ? "" : ", ") + std::to_string(w);
    GEEPS_LOG(Warning) << "shard partition " << partition_ << ", table " << id << " ('"
                       << config_.tables[id].name << "'): clock " << tables_[id]->min_clock()
                       << " has waited "
                       << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
                       << " ms for the update of worker" << (missing.size() > 1 ? "s " : " ") << who
                       << " (the others have sent theirs): is it stuck or gone, or was its "
                       << "update lost on the way?";
  }
}

void ShardChannel::Drop(DropReason reason, const std::string& what) {
  drops_.Drop(what, static_cast<unsigned>(reason));
}

void ShardChannel::HandleMessage(std::vector<transport::Frame>& frames) {
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
  if (monitor_) NoteConnection(worker, frames[1].source_fd());
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
  PartitionTable& t = *tables_[m.header.table];
  TableOutcome out;
  if (m.type == MsgType::kAck || m.type == MsgType::kResync) {
    out = t.AckOrResync(worker, m);  // no rows (DecodeFrames checked), any width
    if (out.unheld_resync && !logged_unheld_resync_) {
      logged_unheld_resync_ = true;
      GEEPS_LOG(Warning) << "shard partition " << partition_ << ", table " << m.header.table
                         << " ('" << config_.tables[m.header.table].name << "'): worker " << worker
                         << " resynced without the push of clock " << t.min_clock() << " (it has "
                         << m.header.aux << "), which is not held "
                         << (holds_pushes_ ? "(every subscriber had acknowledged it)"
                                           : "(resend_after_connection_loss is off, or inproc)")
                         << ": it cannot be pushed again; further cases are not logged";
    }
    return Carry(m.header.table, out);
  }
  if (m.type != MsgType::kSubscribe && m.type != MsgType::kUpdate)
    return Drop(kDropType, std::string("unexpected ") + transport::MsgTypeName(m.type));
  if (m.type != MsgType::kSubscribe && m.header.row_width != t.width())
    return Drop(kDropTable, "row width does not match the table");
  Status rows_ok = transport::ValidateRows(m, t.span().begin, t.span().end);
  if (!rows_ok.ok()) return Drop(kDropRows, rows_ok.message());
  // A subscription names the table's read rank (PushSchedule).
  if (m.type == MsgType::kSubscribe && m.header.aux > 0 &&
      m.header.aux <= static_cast<int64_t>(tables_.size()))
    schedule_.SetRank(m.header.table, static_cast<uint32_t>(m.header.aux));
  const bool unordered = m.type == MsgType::kUpdate &&
                         schedule_.Ask(worker, (m.header.flags & transport::kFlagReadOrder) != 0);
  out = m.type == MsgType::kSubscribe ? t.Subscribe(worker, m) : t.Update(worker, m);
  Carry(m.header.table, out);
  if (unordered) SendReleased(nullptr);  // no worker asks any more: the held go now
}

void ShardChannel::Carry(TableId table, const TableOutcome& out) {
  if (out.dropped) return Drop(out.drop_reason, out.drop_what);
  const PartitionTable& t = *tables_[table];
  if (out.checkpoint_request > 0) checkpoints_.Request(out.checkpoint_request);
  if (out.advanced_to > 0)
    checkpoints_.AddTable(table, t.width(), t.span(), t.values(), out.advanced_to);
  for (const PushOrder& order : out.pushes) Schedule(table, order);
}

void ShardChannel::Schedule(TableId table, const PushOrder& order) {
  if (!schedule_.MustWait(table, order.clock)) {
    SendPush(table, order, false);
    return SendReleased(nullptr);
  }
  // Held as a push in flight holds them: a write meanwhile (an update of
  // the next clock, under SSP) copies the rows aside, so the push still
  // sends exactly the clocks below its own.
  SharedRows& rows = *order.source;
  rows.in_flight.fetch_add(1, std::memory_order_relaxed);
  rows.held_end = std::max<uint64_t>(rows.held_end, tables_[table]->span().size());
  schedule_.Defer(table, order, std::chrono::steady_clock::now());
  pushes_deferred_.fetch_add(1, std::memory_order_relaxed);
}

void ShardChannel::SendPush(TableId table, const PushOrder& order, bool deferred) {
  PushRows(table, *tables_[table], order);
  if (order.final_part) schedule_.Sent(table, order.clock);
  if (deferred) order.source->in_flight.fetch_sub(1, std::memory_order_release);
}

void ShardChannel::SendReleased(const std::chrono::steady_clock::time_point* now) {
  if (now != nullptr) {
    while (auto d = schedule_.TakeOverdue(*now)) {
      if (!logged_overdue_push_) {
        logged_overdue_push_ = true;
        GEEPS_LOG(Warning) << "shard partition " << partition_ << ", table " << d->table
                           << ": a push of clock " << d->order.clock << " waited more than "
                           << kMaxPushHold.count()
                           << " ms for another table's (docs/architecture.md, \"Pushes in the "
                              "order of need\"); sent anyway. Further cases are not logged";
      }
      SendPush(d->table, d->order, true);
    }
  }
  while (auto d = schedule_.TakeReady()) SendPush(d->table, d->order, true);
}

void ShardChannel::DrainMonitor() {
  std::vector<int> ended;
  connections_closed_.fetch_add(transport::CountDisconnects(monitor_, &ended, security_),
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

void ShardChannel::ReleaseRows(void* /*data*/, void* hint) {
  auto* hold = static_cast<std::shared_ptr<SharedRows>*>(hint);
  (*hold)->in_flight.fetch_sub(1, std::memory_order_release);
  delete hold;
}

ShardChannel::PushPart ShardChannel::MakePushPart(PartitionTable& t, const PushOrder& order,
                                                  const transport::Part& part, size_t row_bytes) {
  const uint64_t first = part.first, n = part.count;
  PushPart p;
  // Small: the header and the rows copied into one frame (wire.h,
  // kFlagPacked), which is then the message's only frame.
  p.packed = transport::Packs(0, n * row_bytes, config_.pack_below_bytes);
  p.header = p.packed ? transport::PackedFrame(part.header, nullptr, 0, nullptr, n * row_bytes)
                      : transport::HeaderFrame(part.header);
  // Consecutive rows: every receiver gets a message over the rows
  // themselves (each its own, so that each release goes through
  // ReleaseRows rather than ZeroMQ's internal reference count, which
  // ThreadSanitizer cannot see).
  p.in_place = p.packed ? nullptr : t.PartInPlace(order, first, n);
  const auto bytes = static_cast<int64_t>(n * row_bytes);
  if (p.in_place != nullptr) {
    counters_.push_zero_copy_bytes.fetch_add(bytes, std::memory_order_relaxed);
    return p;
  }
  if (!p.packed) p.payload = transport::Frame(n * row_bytes);
  counters_.push_copy_bytes.fetch_add(bytes, std::memory_order_relaxed);
  t.CopyPart(
      order, first, n,
      p.packed ? transport::PackedPayload(p.header, 0) : static_cast<char*>(p.payload.data()));
  return p;
}

void ShardChannel::PushRows(TableId table, PartitionTable& t, const PushOrder& order) {
  const std::vector<int>& workers = order.workers;
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kPush);
  h.sender = static_cast<uint32_t>(partition_);
  h.table = table;
  h.clock = order.clock;
  h.aux = order.clock;  // the rows hold exactly the clocks < clock
  h.row_width = t.width();
  const size_t row_bytes = static_cast<size_t>(t.width()) * sizeof(float);
  const uint64_t per = transport::RowsPerPart(t.width(), false, config_.max_message_bytes);
  std::vector<bool> failed(workers.size(), false);
  transport::PartSplit split(h, order.from, order.to, per, !order.final_part);
  transport::Part part;
  while (split.Next(&part)) {
    const uint64_t n = part.count;
    PushPart p = MakePushPart(t, order, part, row_bytes);
    transport::Frame& header = p.header;
    transport::Frame& payload = p.payload;
    float* const in_place = p.in_place;
    const bool packed = p.packed;
    const bool zero_copy = in_place != nullptr;
    transport::ReleaseBeforeSend(context_);
    // The push's last message completes it for its receiver.
    const bool completes = (part.header.flags & transport::kFlagMore) == 0;
    const auto sent_bytes = static_cast<int64_t>(transport::kHeaderBytes + n * row_bytes);
    for (size_t k = 0; k < workers.size(); ++k) {
      if (failed[k]) continue;
      // The last receiver takes the messages; the others get copies that
      // share the payload's buffer. Zero-copy: a message over the rows per
      // receiver, each holding them (and the rows alive) until ReleaseRows.
      const bool last = k + 1 == workers.size();
      transport::Frame header_copy, payload_copy;
      if (!last) header_copy.Share(header);
      if (zero_copy) {
        order.source->in_flight.fetch_add(1, std::memory_order_relaxed);
        (last ? payload : payload_copy) = transport::Frame::Lend(
            in_place, n * row_bytes, ReleaseRows, new std::shared_ptr<SharedRows>(order.source));
      } else if (!last && n > 0 && !packed) {
        payload_copy.Share(payload);
      }
      transport::Frame& hdr = last ? header : header_copy;
      transport::Frame& pay = last ? payload : payload_copy;
      // Counted before it leaves, and taken back if it does not: a receiver
      // that has the push and then looks at the counters sees it.
      bytes_sent_.fetch_add(sent_bytes);
      if (completes) pushes_sent_.fetch_add(1);
      try {
        const std::string id = transport::WorkerRoutingId(workers[k]);
        socket_.Send(id, /*more=*/true);
        if (n == 0 || packed) {
          socket_.Send(hdr, /*more=*/false);
        } else {
          socket_.Send(hdr, /*more=*/true);
          socket_.Send(pay, /*more=*/false);
        }
      } catch (const transport::Error& e) {
        bytes_sent_.fetch_sub(sent_bytes);
        if (completes) pushes_sent_.fetch_sub(1);
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
  }
}

}  // namespace geeps::server
