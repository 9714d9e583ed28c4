#include "client/comm_channel.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>

#include "client/adopted_rows.h"
#include "client/oplog.h"
#include "client/push_receipt.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "transport/part_split.h"
#include "transport/socket_util.h"
#include "transport/sockets.h"
#include "transport/tsan.h"
#include "transport/wire.h"

namespace geeps::client {

using transport::DecodedMessage;
using transport::FrameView;
using transport::MsgType;
using transport::WireHeader;

namespace {
constexpr int kPollSafetyMs = 200;
// A push of fewer bytes than this is not acknowledged on its own: a message
// costs both ends system calls and a wake-up (tens of microseconds on a
// loaded machine), more than the partition's copy aside of that many bytes
// when another worker's update reaches it first (docs/architecture.md,
// "Connection loss and resend").
constexpr uint64_t kAckMinBytes = 256 * 1024;

// The release of a frame lent from an oplog slot (transport::Frame::Lend).
void ReleaseZeroCopy(void* /*data*/, void* hint) {
  static_cast<std::atomic<int>*>(hint)->fetch_sub(1, std::memory_order_release);
}

// A push older than what the slice holds: its clock was installed, or it
// does not include updates the slice's rows already include.
bool Older(const WireHeader& h, const PartitionSlice& s) {
  return h.clock <= s.age || h.aux < s.included;
}

}  // namespace

int64_t WaitState::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void WaitState::Wake() const {
  if (wake_fd >= 0) transport::SignalWakeFd(wake_fd);
}

CommChannel::CommChannel(const ClientContext& ctx, transport::Context* context, int channel,
                         std::vector<std::string> endpoints, WaitState* wait)
    : ctx_(ctx),
      context_(context),
      channel_(channel),
      endpoints_(std::move(endpoints)),
      wait_(wait),
      drops_("worker " + std::to_string(ctx.rank) + " channel " + std::to_string(channel),
             &ctx.counters->frames_dropped) {}

CommChannel::~CommChannel() {
  Stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status CommChannel::Start() {
  // No other thread uses the channel yet; the lock is for the analysis.
  common::MutexLock lock(&io_mu_);
  auto stream = ctx_.device->CreateStream();
  if (!stream.ok()) return stream.status();
  stream_ = std::move(stream).value();
  GEEPS_ASSIGN_OR_RETURN(wake_fd_, transport::NewWakeFd("worker " + std::to_string(ctx_.rank) +
                                                        " channel " + std::to_string(channel_)));
  const std::string where =
      "worker " + std::to_string(ctx_.rank) + " channel " + std::to_string(channel_);
  auto failed = [&where](const Status& why) {
    return Status(why.code(), where + ": socket setup failed: " + why.message());
  };
  for (const std::string& ep : endpoints_) {
    auto s = transport::ConnectWorkerSocket(*context_, ep, ctx_.rank,
                                            transport::LargestFrameBytes(*ctx_.config),
                                            ctx_.security);  // CURVE unless inproc (null: off)
    if (!s.ok()) return failed(s.status());
    const int fd = s->fd();
    if (fd < 0) return failed(UnavailableError("cannot read the socket descriptor of " + ep));
    socket_fds_.push_back(fd);
    transport::Socket monitor;
    if (ep.rfind("inproc://", 0) != 0) {
      // Connection losses (a reset, a peer that closed): counted, and
      // named by a Read that times out on this partition's rows.
      auto m = transport::NewMonitorSocket(*context_, *s, ep);
      if (!m.ok()) return failed(m.status());
      monitor = std::move(m).value();
      const int monitor_fd = monitor.fd();
      if (monitor_fd < 0)
        return failed(UnavailableError("cannot read the monitor descriptor of " + ep));
      monitor_fds_.push_back(monitor_fd);
    }
    monitors_.push_back(std::move(monitor));
    shards_.push_back(std::move(s).value());
  }
  poll_fd_list_ = socket_fds_;
  for (auto& m : monitors_) poll_fd_list_.push_back(m ? m.fd() : -1);
  for (int fd : poll_fd_list_) pump_fds_.push_back({fd, POLLIN, 0});
  unchecked_.assign(shards_.size(), 1);
  monitor_read_.assign(monitors_.size(), 0);
  resend_ = ctx_.config->resend_after_connection_loss;
  losses_ = std::make_unique<Losses[]>(shards_.size());
  num_losses_ = shards_.size();
  receipts_.assign(shards_.size(), std::vector<PushReceipt>(ctx_.tables->size()));
  lock.Unlock();
  started_.store(true);
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

Status CommChannel::Send(const CommTask& task) {
  common::MutexLock lock(&io_mu_);
  if (!started_.load() || stop_.load() || shards_.empty())
    return FailedPreconditionError("communication channel is stopped");
  try {
    RunTask(task);
    // The sends may have taken their sockets' wake-up signal (ZMQ_FD is
    // edge-triggered): receive what came there, or no one would be woken
    // for it. The other sockets' signals are intact.
    PumpLocked(/*app=*/true, PumpScope::kSentOn);
  } catch (const transport::Error& e) {
    return InternalError(std::string("worker channel send failed: ") + e.what());
  }
  return Status::OK();
}

void CommChannel::PumpPolled(const pollfd* polled, bool failed) {
  common::MutexLock lock(&io_mu_);
  for (size_t i = 0; i < pump_fds_.size(); ++i)
    pump_fds_[i].revents = failed ? POLLIN : polled[i].revents;
  PumpOrLog(/*app=*/true, PumpScope::kPolled);
  if (unchecked_left_.load() && polling_all_.load()) transport::SignalWakeFd(wake_fd_);
}

int CommChannel::ProbeUnchecked() {
  if (!unchecked_left_.load()) return 0;
  common::MutexLock lock(&io_mu_);
  return std::max(0, PumpOrLog(/*app=*/true, PumpScope::kSentOn));
}

int CommChannel::PumpOrLog(bool app, PumpScope scope) {
  try {
    return PumpLocked(app, scope);
  } catch (const transport::Error& e) {
    if (e.context_closed()) return -1;
    GEEPS_LOG(Error) << "worker " << ctx_.rank << " channel " << channel_ << ": " << e.what();
  }
  return 0;
}

int CommChannel::PumpLocked(bool app, PumpScope scope) {
  // One poll of every descriptor, not a read of each socket's state (which
  // costs ZeroMQ two system calls per socket, and a worker has a socket per
  // shard).
  if (scope == PumpScope::kSentOn) {
    for (pollfd& f : pump_fds_) f.revents = 0;
  } else if (scope == PumpScope::kPoll) {
    for (pollfd& f : pump_fds_) f.revents = 0;
    if (::poll(pump_fds_.data(), pump_fds_.size(), 0) < 0) {
      for (pollfd& f : pump_fds_) f.revents = POLLIN;  // EINTR: read them all
    }
  }
  int installed = 0;
  std::vector<transport::Frame> frames;
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (!unchecked_[s] && !(pump_fds_[s].revents & POLLIN)) continue;
    unchecked_[s] = 0;
    // Receive until a receive finds nothing: that one reads the socket's
    // state (as ZMQ_EVENTS would), so the next arrival signals ZMQ_FD.
    // A waiting thread stops at a push installed (what it waits for, most
    // likely) and leaves that read to its next call (ProbeUnchecked).
    while (shards_[s].TryReceive(context_, &frames)) {
      if (!HandlePush(static_cast<int>(s), frames)) continue;
      ++installed;
      if (scope == PumpScope::kPolled) {
        unchecked_[s] = 1;
        break;
      }
    }
  }
  if (app && installed > 0) ctx_.counters->pushes_installed_by_app.fetch_add(installed);
  if (scope != PumpScope::kSentOn) DrainMonitorsLocked();
  unchecked_left_.store(
      std::any_of(unchecked_.begin(), unchecked_.end(), [](uint8_t u) { return u != 0; }));
  return installed;
}

void CommChannel::DrainMonitorsLocked() {
  for (size_t s = 0; s < monitors_.size(); ++s) {
    if (!monitors_[s]) continue;
    // Read until then: before its first read the descriptor may not signal.
    if (monitor_read_[s] && !(pump_fds_[shards_.size() + s].revents & POLLIN)) continue;
    monitor_read_[s] = 1;
    const int lost = transport::CountDisconnects(monitors_[s], nullptr, ctx_.security);
    if (lost == 0) continue;
    const int64_t before = losses_[s].count.fetch_add(lost);
    losses_[s].last_ns.store(WaitState::NowNs());
    ctx_.counters->connection_losses.fetch_add(lost);
    if (before == 0) {
      GEEPS_LOG(Warning) << "worker " << ctx_.rank << ": the connection to server partition "
                         << s * ctx_.config->num_channels + channel_ << " (" << endpoints_[s]
                         << ") was lost; ZeroMQ reconnects, and "
                         << (resend_ ? "this worker sends again what was not acknowledged"
                                     : "an update or push in flight is lost with it "
                                       "(resend_after_connection_loss is off)")
                         << "; further losses are only counted";
    }
    if (resend_) ResendLocked(static_cast<int>(s));
  }
}

void CommChannel::ResendLocked(int shard) {
  // What ZeroMQ still queued goes out after the reconnect, ahead of this.
  const int partition = shard * ctx_.config->num_channels + channel_;
  ctx_.counters->reconnects.fetch_add(1);
  for (const auto& tp : *ctx_.tables) {
    if (!tp) continue;
    TableCache& t = *tp;
    common::MutexLock lock(&t.mu);
    for (const PartitionSlice& s : t.slices) {
      if (s.partition != partition || s.cache_count == 0) continue;
      if (!s.push_installed) SendSubscribe(t, s);
      SendControl(shard, MsgType::kResync, t.id, s.age);
      std::vector<OplogSlot*> unacked;
      for (const auto& slot : t.slots) {
        if (slot->in_use && slot->clock >= s.included) unacked.push_back(slot.get());
      }
      std::sort(unacked.begin(), unacked.end(),
                [](const OplogSlot* a, const OplogSlot* b) { return a->clock < b->clock; });
      for (OplogSlot* slot : unacked) {
        SendUpdate(t, s, *slot);
        ctx_.counters->updates_resent.fetch_add(1);
      }
    }
  }
}

void CommChannel::SendControl(int shard, MsgType type, uint32_t table, int64_t aux) {
  WireHeader h;
  h.type = static_cast<uint16_t>(type);
  h.sender = static_cast<uint32_t>(ctx_.rank);
  h.table = table;
  h.aux = aux;
  transport::Frame frame = transport::HeaderFrame(h);
  SendFrames(shard, &frame, 1);
}

int64_t CommChannel::ConnectionLosses(int shard, int64_t* last_ns) const {
  if (!losses_ || shard < 0 || static_cast<size_t>(shard) >= num_losses_) {
    if (last_ns != nullptr) *last_ns = 0;
    return 0;
  }
  if (last_ns != nullptr) *last_ns = losses_[shard].last_ns.load();
  return losses_[shard].count.load();
}

void CommChannel::Stop() {
  common::MutexLock lock(&stop_mu_);
  if (!started_.exchange(false)) return;
  stop_.store(true);
  transport::SignalWakeFd(wake_fd_);
  if (thread_.joinable()) thread_.join();
  common::MutexLock io(&io_mu_);
  for (size_t s = 0; s < monitors_.size(); ++s) transport::StopMonitor(shards_[s], monitors_[s]);
  shards_.clear();  // linger: what was sent is still delivered
}

void CommChannel::Run() {
  std::vector<pollfd> fds;
  fds.push_back({wake_fd_, POLLIN, 0});
  for (int fd : socket_fds_) fds.push_back({fd, POLLIN, 0});
  for (int fd : monitor_fds_) fds.push_back({fd, POLLIN, 0});
  constexpr int64_t kSafetyNs = int64_t{kPollSafetyMs} * 1000000;
  while (!stop_.load()) {
    // While an application thread waits for pushes, or waited within the
    // hand-off, it receives them itself: watch only the wake-up descriptor,
    // and while it waits, look again every kStepAsideNs (no application
    // thread wakes this one when its wait ends: in a tight loop that would
    // cost a switch to this thread per clock).
    int64_t now = WaitState::NowNs();
    nfds_t watched = static_cast<nfds_t>(fds.size());
    int64_t until = now + kSafetyNs;
    if (wait_ != nullptr) {
      if (wait_->app_waiting.load()) {
        watched = 1;
        until = now + kStepAsideNs;
      } else {
        const int64_t window_end = wait_->last_wait_ns.load() + kHandOffNs;
        if (window_end > now) {
          watched = 1;
          until = window_end;
        }
      }
    }
    // Watching every descriptor: first read the sockets whose descriptor
    // may not signal (unchecked_left_).
    polling_all_.store(watched > 1);
    if (watched > 1 && unchecked_left_.load()) {
      polling_all_.store(false);
      common::MutexLock lock(&io_mu_);
      if (PumpOrLog(/*app=*/false, PumpScope::kSentOn) < 0) break;
      continue;
    }
    const int64_t wait_ns = std::max<int64_t>(0, until - now);
    timespec ts{static_cast<time_t>(wait_ns / 1000000000), static_cast<long>(wait_ns % 1000000000)};
    const int ready = ::ppoll(fds.data(), watched, &ts, nullptr);
    polling_all_.store(false);
    if (ready < 0 && errno != EINTR) {
      GEEPS_LOG(Error) << "worker " << ctx_.rank << " channel " << channel_
                       << ": poll failed: " << std::strerror(errno);
      break;
    }
    if (fds[0].revents & POLLIN) transport::ClearWakeFd(wake_fd_);
    if (stop_.load()) break;
    bool readable = false;
    for (nfds_t i = 1; i < watched; ++i) readable |= (fds[i].revents & POLLIN) != 0;
    // A push installed here may be the one an application thread that just
    // began waiting needs: wake it (it no longer sees the edge).
    if (readable || (ready == 0 && watched > 1)) {
      common::MutexLock lock(&io_mu_);
      const int installed = PumpOrLog(/*app=*/false);
      if (installed < 0) break;
      if (installed > 0 && wait_ != nullptr && wait_->app_waiting.load()) wait_->Wake();
    }
  }
}

void CommChannel::RunTask(const CommTask& task) {
  const int channels = ctx_.config->num_channels;
  if (task.table >= ctx_.tables->size() || !(*ctx_.tables)[task.table]) return;
  TableCache& t = *(*ctx_.tables)[task.table];
  for (const PartitionSlice& s : t.slices) {
    if (s.partition % channels != channel_) continue;
    if (task.kind == CommTask::kSubscribe) {
      SendSubscribe(t, s);
    } else if (task.kind == CommTask::kSend) {
      SendUpdate(t, s, *task.slot);
    }
  }
  if (task.kind == CommTask::kSend) {
    common::MutexLock lock(&t.mu);
    --task.slot->pending_sends;
    Oplog::Release(t, ctx_.config->read_my_writes);
  }
}

void CommChannel::SendFrames(int shard, transport::Frame* frames, size_t count) {
  size_t bytes = 0;
  transport::ReleaseBeforeSend(context_);
  unchecked_[shard] = 1;  // a send may take the socket's ZMQ_FD signal
  try {
    for (size_t i = 0; i < count; ++i) {
      bytes += frames[i].size();
      shards_[shard].Send(frames[i], i + 1 < count);
    }
  } catch (const transport::Error& e) {
    GEEPS_LOG(Error) << "worker " << ctx_.rank << ": send to shard " << shard
                     << " failed: " << e.what();
    return;
  }
  ctx_.counters->messages_sent.fetch_add(1);
  ctx_.counters->bytes_sent.fetch_add(static_cast<int64_t>(bytes));
}

void CommChannel::SendInParts(int shard, const WireHeader& h, const uint64_t* rows, uint64_t total,
                              const Payload& payload, uint64_t max_bytes) {
  const size_t row_bytes = static_cast<size_t>(h.row_width) * sizeof(float);
  transport::PartSplit split(h, 0, total,
                             transport::RowsPerPart(h.row_width, rows != nullptr, max_bytes));
  transport::Part part;
  while (split.Next(&part)) {
    const uint64_t first = part.first, n = part.count;
    const size_t rows_bytes = rows != nullptr ? n * sizeof(uint64_t) : 0;
    const size_t payload_bytes =
        payload.base != nullptr || payload.fill ? static_cast<size_t>(n) * row_bytes : 0;
    if (transport::Packs(rows_bytes, payload_bytes, ctx_.config->pack_below_bytes)) {
      transport::Frame packed = transport::PackedFrame(
          part.header, rows != nullptr ? rows + first : nullptr, rows_bytes,
          payload.base != nullptr ? payload.base + first * row_bytes : nullptr, payload_bytes);
      if (payload.base == nullptr && payload.fill)
        payload.fill(transport::PackedPayload(packed, rows_bytes), first, n);  // counts itself
      else if (payload.base != nullptr)
        ClientCounters::Count(ctx_.counters->pack_bytes, payload_bytes);
      SendFrames(shard, &packed, 1);
      continue;
    }
    transport::Frame frames[3];
    frames[0] = transport::HeaderFrame(part.header);
    size_t count = 1;
    if (n > 0 && rows != nullptr)
      frames[count++] = transport::Frame(rows + first, n * sizeof(uint64_t));
    if (n > 0 && payload.base != nullptr) {
      payload.refs->fetch_add(1, std::memory_order_relaxed);
      frames[count++] = transport::Frame::Lend(const_cast<char*>(payload.base) + first * row_bytes,
                                               n * row_bytes, &ReleaseZeroCopy, payload.refs);
    } else if (n > 0 && payload.fill) {
      frames[count] = transport::Frame(n * row_bytes);
      payload.fill(static_cast<char*>(frames[count].data()), first, n);
      ++count;
    }
    SendFrames(shard, frames, count);
  }
}

void CommChannel::SendSubscribe(TableCache& t, const PartitionSlice& s) {
  if (s.cache_count == 0) return;
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kSubscribe);
  h.sender = static_cast<uint32_t>(ctx_.rank);
  h.table = t.id;
  h.aux = t.read_rank;  // the order of the partition's pushes (PushSchedule)
  h.row_width = t.width;
  SendInParts(s.partition / ctx_.config->num_channels, h, t.rows.data() + s.cache_begin,
              s.cache_count, Payload{}, ctx_.config->max_message_bytes);
}

void CommChannel::SendUpdate(TableCache& t, const PartitionSlice& s, OplogSlot& slot) {
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kUpdate);
  h.sender = static_cast<uint32_t>(ctx_.rank);
  h.table = t.id;
  h.clock = slot.clock;
  h.aux = s.age;  // acknowledges that push (the partition may stop holding it)
  h.row_width = t.width;
  if (slot.checkpoint) h.flags = transport::kFlagCheckpoint;
  if (ctx_.asks_read_order != nullptr && ctx_.asks_read_order->load(std::memory_order_relaxed))
    h.flags |= transport::kFlagReadOrder;
  const uint64_t total = slot.dirty ? s.update_rows.size() : 0;
  const size_t row_bytes = t.width * sizeof(float);
  // The deltas of cached position p: in the slot, or in the update buffer
  // the slot names (sent in place: its first row is position
  // send_first_pos).
  auto row_at = [&](uint32_t pos) {
    return slot.send_from != nullptr
               ? slot.send_from + static_cast<size_t>(pos - slot.send_first_pos) * t.width
               : slot.host + static_cast<size_t>(pos) * t.width;
  };
  Payload payload;
  if (total > 0 && s.update_pos.back() - s.update_pos.front() + 1 == total) {
    // The updated rows are consecutive cached positions (positions are
    // sorted and distinct): send them from where they are.
    payload.base = reinterpret_cast<const char*>(row_at(s.update_pos.front()));
    payload.refs = slot.send_refs != nullptr ? slot.send_refs : &slot.transport_refs;
  } else {
    payload.fill = [&](char* out, uint64_t first, uint64_t n) {
      ClientCounters::Count(ctx_.counters->pack_bytes, n * row_bytes);
      for (uint64_t i = 0; i < n; ++i)
        std::memcpy(out + i * row_bytes, row_at(s.update_pos[first + i]), row_bytes);
    };
  }
  // Pipelined: parts in row order, so the shard can push the rows every
  // worker has updated before the last part arrives.
  const uint64_t pipeline = ctx_.config->pipeline_part_bytes;
  const uint64_t max_bytes = pipeline > 0 ? std::min(pipeline, ctx_.config->max_message_bytes)
                                          : ctx_.config->max_message_bytes;
  SendInParts(s.partition / ctx_.config->num_channels, h, s.update_rows.data(), total, payload,
              max_bytes);
}

bool CommChannel::Stale(int shard, const DecodedMessage& m, const PartitionSlice& s) {
  // After a lost connection the partition may push again what reached this
  // worker anyway (its Resync crossed the push): harmless, counted apart.
  if (resend_ && m.header.clock <= s.age && ConnectionLosses(shard, nullptr) > 0) {
    ctx_.counters->pushes_repeated.fetch_add(1);
    return false;
  }
  return Drop("stale or repeated push");
}

bool CommChannel::Drop(const std::string& what) { return drops_.Drop(what); }

bool CommChannel::HandlePush(int shard, std::vector<transport::Frame>& frames) {
  size_t total = 0;
  for (const auto& f : frames) total += f.size();
  ctx_.counters->messages_received.fetch_add(1);
  ctx_.counters->bytes_received.fetch_add(static_cast<int64_t>(total));
  if (frames.size() > 3) return Drop("too many frames");
  FrameView views[3];
  for (size_t i = 0; i < frames.size(); ++i) views[i] = {frames[i].data(), frames[i].size()};
  StatusOr<DecodedMessage> decoded = transport::DecodeFrames(views, frames.size());
  if (!decoded.ok()) return Drop(decoded.status().message());
  const DecodedMessage& m = *decoded;
  const int partition = shard * ctx_.config->num_channels + channel_;
  if (m.type != MsgType::kPush) return Drop("unexpected message type");
  if (m.header.sender != static_cast<uint32_t>(partition)) return Drop("wrong sender");
  if (m.header.table >= ctx_.tables->size() || !(*ctx_.tables)[m.header.table])
    return Drop("unknown or local table");
  TableCache& t = *(*ctx_.tables)[m.header.table];
  auto it = std::find_if(t.slices.begin(), t.slices.end(),
                         [&](const PartitionSlice& s) { return s.partition == partition; });
  if (it == t.slices.end()) return Drop("push for a partition without rows");
  PartitionSlice& s = *it;
  if (m.header.row_width != t.width || s.cache_count == 0 ||
      m.header.offset + m.header.row_count > s.cache_count)
    return Drop("push shape does not match the subscription");
  // Parts of one push arrive in order on this shard's socket (pipelined
  // pushes may interleave with other tables' pushes): PushReceipt says
  // where each goes (push_receipt.h); this does the copies and the locking.
  PushReceipt& receipt = receipts_[shard][m.header.table];
  const bool rmw = ctx_.config->read_my_writes;
  if (receipt.Starts(m.header)) {
    common::MutexLock lock(&t.mu);
    if (Older(m.header, s)) return Stale(shard, m, s);
    receipt.Start(!rmw && t.open_in_place_reads == 0);
    if (receipt.in_cache()) {
      s.installing = true;
      s.adopted.reset();  // the cache holds the slice's rows again
    }
  }
  const auto* payload = reinterpret_cast<const float*>(m.payload);
  const PushReceipt::Verdict v = receipt.Accept(m.header, s.cache_count, t.width, payload);
  const size_t part_bytes = static_cast<size_t>(m.header.row_count) * t.width * sizeof(float);
  if (v.step == PushReceipt::Step::kDrop) return Drop(v.why);
  if (v.step != PushReceipt::Step::kWhole)
    ClientCounters::Count(ctx_.counters->install_bytes, part_bytes);
  if (v.step == PushReceipt::Step::kWriteToCache) {
    common::MutexLock lock(&t.mu);
    if (!InstallRows(t, s, static_cast<uint32_t>(m.header.offset),
                     static_cast<uint32_t>(m.header.row_count),
                     reinterpret_cast<const char*>(payload), false))
      return false;
    if (!v.completes) return false;
    FinishInstall(t, s, m.header.clock, m.header.aux, false);
  } else {
    if (v.step == PushReceipt::Step::kCollected && !v.completes) return false;
    float* collected = nullptr;  // the push copied out of its message(s)
    if (v.step == PushReceipt::Step::kCollected) {
      collected = receipt.rows().data();
    } else if (rmw) {
      ClientCounters::Count(ctx_.counters->install_bytes, part_bytes);
      receipt.rows().assign(payload, payload + part_bytes / sizeof(float));
      collected = receipt.rows().data();
    }
    common::MutexLock lock(&t.mu);
    if (Older(m.header, s)) return Stale(shard, m, s);
    if (!InstallWhole(t, s, m, collected, frames)) return false;
  }
  ctx_.counters->pushes_installed.fetch_add(1);
  t.cv.notify_all();
  // With other workers, their updates may reach the partition before this
  // worker's next update (which acknowledges too), and the partition then
  // copies the push's rows aside before it writes them: acknowledge now
  // where that copy would cost more than the message (kAckMinBytes).
  if (resend_ && monitors_[shard] && ctx_.config->num_workers > 1 &&
      static_cast<uint64_t>(s.cache_count) * t.width * sizeof(float) >= kAckMinBytes)
    SendControl(shard, MsgType::kAck, m.header.table, m.header.clock);
  return true;
}

bool CommChannel::InstallWhole(TableCache& t, PartitionSlice& s, const DecodedMessage& m,
                               float* collected, std::vector<transport::Frame>& frames) {
  const bool rmw = ctx_.config->read_my_writes;
  if (!rmw && collected == nullptr && AdoptPush(t, s, frames)) {
    ctx_.counters->pushes_adopted.fetch_add(1);
    FinishInstall(t, s, m.header.clock, m.header.aux, rmw);
    return true;
  }
  // Installing: one pass over the rows, plus one per own delta re-added.
  const size_t floats = static_cast<size_t>(s.cache_count) * t.width;
  ClientCounters::Count(ctx_.counters->install_bytes, floats * sizeof(float));
  if (rmw) {
    const size_t offset = static_cast<size_t>(s.cache_begin) * t.width;
    float* staging = collected;  // read-my-writes: always a copy
    for (const OplogSlot* slot : t.retained) {
      if (slot->clock < m.header.aux) continue;
      ClientCounters::Count(ctx_.counters->install_bytes, floats * sizeof(float));
      const float* d = slot->host + offset;
      for (size_t i = 0; i < floats; ++i) staging[i] += d[i];
    }
  }
  s.adopted.reset();  // the cache holds the slice's rows again
  const char* payload = collected != nullptr ? reinterpret_cast<const char*>(collected)
                                             : reinterpret_cast<const char*>(m.payload);
  if (!InstallRows(t, s, 0, s.cache_count, payload, rmw)) return false;
  FinishInstall(t, s, m.header.clock, m.header.aux, rmw);
  return true;
}

namespace {
std::atomic<bool> adopt_inproc_for_testing{false};
}  // namespace

void AdoptInprocPushesForTesting(bool on) { adopt_inproc_for_testing.store(on); }

bool CommChannel::AdoptPush(TableCache& t, PartitionSlice& s,
                            std::vector<transport::Frame>& frames) {
  // Only a slice whose cached rows lie in one piece of device memory.
  int pieces = 0;
  bool on_device = true;
  t.ForPieces(s.cache_begin, s.cache_count, [&](const CacheRun& piece, uint32_t) {
    ++pieces;
    on_device = on_device && piece.on_device;
  });
  const size_t bytes = static_cast<size_t>(s.cache_count) * t.width * sizeof(float);
  if (pieces != 1 || !on_device || bytes < AdoptedRows::kMinBytes || frames.size() != 2 ||
      frames[1].size() != bytes)
    return false;
  // Only bytes that are this worker's alone: over inproc a push's message is
  // the sender's memory (the partition's own rows, lent without a copy, and
  // the same bytes in every subscriber's message), and a read in place of
  // it would let one worker's write reach the server and every worker.
  const size_t shard = static_cast<size_t>(s.partition / ctx_.config->num_channels);
  const bool inproc = shard >= endpoints_.size() || endpoints_[shard].rfind("inproc://", 0) == 0;
  if (inproc && !adopt_inproc_for_testing.load(std::memory_order_relaxed)) return false;
  // Moved first: a small message's bytes live inside the message object.
  auto owner = std::make_shared<transport::Frame>(std::move(frames[1]));
  void* host = owner->data();
  std::shared_ptr<const AdoptedRows> rows = AdoptedRows::Make(ctx_.device, owner, host, bytes);
  if (rows == nullptr) {
    frames[1] = std::move(*owner);  // as it was, for the copy
    return false;
  }
  s.adopted = std::move(rows);
  return true;
}

bool CommChannel::InstallRows(TableCache& t, const PartitionSlice& s, uint32_t first,
                              uint32_t count, const char* rows_bytes, bool rmw) {
  // Install by pieces: rows in device memory are copied in, rows the memory
  // manager keeps in host memory are written in place. `rows_bytes` holds
  // the slice's rows first .. first + count - 1, in cached-position order (a
  // payload need not be aligned for floats; copies do not care).
  device::Device* dev = ctx_.device;
  const size_t w = t.width;
  Status st;
  // Read here, under the locks (the lambda is a function of its own to the
  // analysis).
  const bool add_oplog = rmw && t.oplog_dirty;
  device::Stream* const stream = stream_.get();
  // Not before the application's stream has run the work that reads these
  // rows in place (DataPath::CloseInPlaceRead).
  if (t.in_place_reads_recorded) {
    st = dev->StreamWait(stream, t.in_place_reads_done.get());
    t.in_place_reads_recorded = false;
  }
  t.ForPieces(s.cache_begin + first, count, [&](const CacheRun& piece, uint32_t off) {
    const char* src = rows_bytes + off * w * sizeof(float);
    const size_t n = piece.count * w;
    if (!piece.on_device) {
      float* dst = t.host_cache + piece.at * w;
      std::memcpy(dst, src, n * sizeof(float));
      if (add_oplog) {
        const float* d = t.host_oplog + piece.at * w;
        for (size_t i = 0; i < n; ++i) dst[i] += d[i];
      }
      return;
    }
    if (st.ok())
      st = dev->Copy(t.cache + piece.at * w, src, n * sizeof(float),
                     device::CopyKind::kHostToDevice, stream);
    if (st.ok() && add_oplog)
      st = dev->Add(t.cache + piece.at * w, t.oplog + piece.at * w, n, stream);
  });
  if (st.ok()) st = dev->Synchronize(stream);
  if (!st.ok()) {
    GEEPS_LOG(Error) << "worker " << ctx_.rank << ": installing a push failed: " << st;
    return false;
  }
  return true;
}

void CommChannel::FinishInstall(TableCache& t, PartitionSlice& s, int64_t clock, int64_t included,
                                bool rmw) {
  s.age = clock;
  s.included = included;
  s.installing = false;
  s.push_installed = true;
  Oplog::Release(t, rmw);
}

}  // namespace geeps::client
