#include "relay/machine_relay.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/logging.h"
#include "common/machines.h"
#include "common/partition.h"
#include "transport/part_split.h"
#include "transport/routing_id.h"
#include "transport/socket_util.h"
#include "transport/sockets.h"
#include "transport/tsan.h"

namespace geeps::relay {

using transport::DecodedMessage;
using transport::FrameView;
using transport::MsgType;
using transport::WireHeader;

namespace {

// Frees a zero-copy frame: drops its hold on the buffer it points into.
void ReleaseHold(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<void>*>(hint); }

transport::Frame HeldFrame(const void* data, size_t bytes, const std::shared_ptr<void>& owner) {
  return transport::Frame::Lend(const_cast<void*>(data), bytes, &ReleaseHold,
                                new std::shared_ptr<void>(owner));
}

}  // namespace

MachineRelay::MachineRelay(transport::Context* context, const Config& config, int machine,
                           std::vector<int> members, std::vector<std::string> local,
                           std::vector<std::string> upstream,
                           const transport::SecurityConfig* security)
    : context_(context),
      config_(config),
      machine_(machine),
      members_(std::move(members)),
      local_(std::move(local)),
      upstream_(std::move(upstream)),
      security_(security),
      resend_(config.resend_after_connection_loss && !upstream_.empty() &&
              upstream_[0].rfind("inproc://", 0) != 0) {}

MachineRelay::~MachineRelay() { Stop(); }

RelayStats MachineRelay::GetStats() const {
  RelayStats s;
  s.machine = machine_;
  s.updates_up = updates_up_.load();
  s.pushes_shared = pushes_down_.load();
  s.frames_dropped = frames_dropped_.load();
  s.connection_losses = connection_losses_.load();
  s.updates_resent = updates_resent_.load();
  return s;
}

Status MachineRelay::Start() {
  if (started_) return FailedPreconditionError("machine relay started twice");
  if (members_.empty())
    return InvalidArgumentError("machine " + std::to_string(machine_) + " has no workers");
  if (local_.size() != upstream_.size())
    return InternalError("machine relay: " + std::to_string(local_.size()) +
                         " local endpoints for " + std::to_string(upstream_.size()) +
                         " partitions");
  const int num_partitions = static_cast<int>(upstream_.size());
  const int64_t max_frame = transport::LargestFrameBytes(config_);
  partitions_.resize(upstream_.size());
  for (int p = 0; p < num_partitions; ++p) {
    Partition& part = partitions_[p];
    GEEPS_ASSIGN_OR_RETURN(part.down,
                           transport::BindShardSocket(*context_, local_[p], max_frame, security_));
    GEEPS_ASSIGN_OR_RETURN(
        part.up,
        transport::ConnectWorkerSocket(*context_, upstream_[p], members_[0], max_frame, security_));
    if (upstream_[p].rfind("inproc://", 0) != 0) {
      GEEPS_ASSIGN_OR_RETURN(part.monitor,
                             transport::NewMonitorSocket(*context_, part.up, upstream_[p]));
    }
    part.tables.resize(config_.tables.size());
    for (size_t t = 0; t < config_.tables.size(); ++t) {
      const TableSpec& spec = config_.tables[t];
      TableState& ts = part.tables[t];
      ts.shared = !spec.local;
      const common::RowSpan span = common::PartitionRows(spec.num_rows, p, num_partitions);
      ts.sums.emplace(members_.size(), spec.row_width, span.begin, span.end, start_clock_);
    }
  }
  started_ = true;
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void MachineRelay::Stop() {
  if (!started_) return;
  started_ = false;
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  for (Partition& part : partitions_)
    if (part.monitor) transport::StopMonitor(part.up, part.monitor);
  partitions_.clear();  // closes the sockets (they linger until sent)
}

void MachineRelay::Run() {
  std::vector<transport::Socket*> items;
  for (Partition& part : partitions_) {
    items.push_back(&part.down);
    items.push_back(&part.up);
    if (part.monitor) items.push_back(&part.monitor);
  }
  auto next_stall_check = std::chrono::steady_clock::now();
  try {
    while (!stop_.load()) {
      transport::PollSockets(items, std::chrono::milliseconds(100));
      for (size_t p = 0; p < partitions_.size(); ++p) {
        Partition& part = partitions_[p];
        if (part.monitor) {
          const int lost = transport::CountDisconnects(part.monitor, nullptr, security_);
          if (lost > 0) {
            if (connection_losses_.fetch_add(lost) == 0) {
              GEEPS_LOG(Warning) << "machine relay " << machine_
                                 << ": the connection to server partition " << p << " ("
                                 << upstream_[p] << ") was lost; ZeroMQ reconnects, and "
                                 << (resend_ ? "the relay sends again what was not applied"
                                             : "an update or push in flight is lost with it "
                                               "(resend_after_connection_loss is off)")
                                 << "; further losses are only counted";
            }
            if (resend_) Resend(static_cast<int>(p));
          }
        }
        Drain(static_cast<int>(p));
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_stall_check) {
        CheckStalls();
        next_stall_check = now + std::chrono::milliseconds(250);
      }
    }
    // The members have stopped: pass on what they sent last.
    bool any = true;
    while (any) {
      any = false;
      for (size_t p = 0; p < partitions_.size(); ++p) any = Drain(static_cast<int>(p)) || any;
    }
  } catch (const transport::Error& e) {
    GEEPS_LOG(Error) << "machine relay " << machine_ << ": " << e.what() << "; the relay stops";
  }
}

bool MachineRelay::Drain(int p) {
  Partition& part = partitions_[p];
  bool any = false;
  std::vector<transport::Frame> frames;
  for (transport::Socket* s : {&part.down, &part.up}) {
    while (s->TryReceive(context_, &frames)) {
      any = true;
      if (s == &part.down)
        HandleDown(p, frames);
      else
        HandleUp(p, frames);
    }
  }
  return any;
}

void MachineRelay::HandleDown(int p, std::vector<transport::Frame>& frames) {
  if (frames.size() < 2 || frames.size() > 4) return Drop("a member's frame count");
  const int rank =
      transport::ParseWorkerRoutingId(frames[0].data(), frames[0].size(), config_.num_workers);
  const auto it = std::find(members_.begin(), members_.end(), rank);
  if (it == members_.end()) return Drop("a sender that is not a worker of this machine");
  const size_t member = static_cast<size_t>(it - members_.begin());
  FrameView views[3];
  for (size_t i = 1; i < frames.size(); ++i) views[i - 1] = {frames[i].data(), frames[i].size()};
  StatusOr<DecodedMessage> decoded = transport::DecodeFrames(views, frames.size() - 1);
  if (!decoded.ok()) return Drop(decoded.status().message());
  const DecodedMessage& m = *decoded;
  if (m.header.sender != static_cast<uint32_t>(rank))
    return Drop("header sender does not match routing id");
  if (m.type == MsgType::kAck) return;  // the relay acknowledges pushes itself
  if (m.type != MsgType::kSubscribe && m.type != MsgType::kUpdate && m.type != MsgType::kResync)
    return Drop(std::string("unexpected ") + transport::MsgTypeName(m.type) + " from a member");
  Partition& part = partitions_[p];
  if (m.header.table >= part.tables.size() || !part.tables[m.header.table].shared)
    return Drop("unknown or local table " + std::to_string(m.header.table));
  TableState& t = part.tables[m.header.table];
  if (m.type == MsgType::kResync) {
    // A member that lost its connection to the relay and lacks the last
    // push: hand it over again.
    if (t.last_push && t.sums->subscribed(member) && m.header.aux < t.shared_clock)
      SendPushTo(p, m.header.table, member, t.shared_clock, t.included, t.last_values, t.last_push);
    return;
  }
  const std::string dropped = t.sums->OnMember(member, rank, m);
  if (!dropped.empty()) return Drop(dropped);
  TrySum(p, m.header.table);
}

void MachineRelay::TrySum(int p, uint32_t table) {
  TableState& t = partitions_[p].tables[table];
  int64_t clock = 0;
  bool subscribe_first = false;
  while (std::shared_ptr<Delta> sum = t.sums->TakeSum(&clock, &subscribe_first)) {
    if (subscribe_first) SendSubscription(p, table);
    SendUp(p, table, clock, sum);
    updates_up_.fetch_add(1, std::memory_order_relaxed);
    if (resend_) {
      t.unapplied[clock] = std::move(sum);
      // Bounded where no push says what was applied (no subscription).
      while (t.unapplied.size() > 8) t.unapplied.erase(t.unapplied.begin());
    }
    t.waiting_since = {};
  }
}

void MachineRelay::SendSubscription(int p, uint32_t table) {
  const RelayTable& sums = *partitions_[p].tables[table].sums;
  if (sums.rows_up().empty()) return;
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kSubscribe);
  h.sender = static_cast<uint32_t>(members_[0]);
  h.table = table;
  h.aux = sums.read_rank();
  h.row_width = sums.width();
  SendParts(partitions_[p].up, "", h, sums.rows_up().data(), nullptr, nullptr,
            sums.rows_up().size(), config_.max_message_bytes);
}

void MachineRelay::SendUp(int p, uint32_t table, int64_t clock, const std::shared_ptr<Delta>& sum) {
  const TableState& t = partitions_[p].tables[table];
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kUpdate);
  h.sender = static_cast<uint32_t>(members_[0]);
  h.table = table;
  h.clock = clock;
  h.aux = t.shared_clock;  // an acknowledgement
  h.row_width = t.sums->width();
  if (sum->checkpoint) h.flags = transport::kFlagCheckpoint;
  if (sum->read_order) h.flags |= transport::kFlagReadOrder;
  const uint64_t pipeline = config_.pipeline_part_bytes;
  const uint64_t max_bytes =
      pipeline > 0 ? std::min(pipeline, config_.max_message_bytes) : config_.max_message_bytes;
  // Sent from the sum itself, which nothing changes once made.
  SendParts(partitions_[p].up, "", h, sum->rows.data(), sum->values.data(), sum, sum->rows.size(),
            max_bytes);
}

void MachineRelay::SendParts(transport::Socket& socket, const std::string& id, const WireHeader& h,
                             const uint64_t* rows, const float* values,
                             const std::shared_ptr<void>& hold, uint64_t total,
                             uint64_t max_bytes) {
  const size_t w = h.row_width;
  // A frame over `bytes` at `data`: held by `hold` when there is one.
  auto over = [&hold](const void* data, size_t bytes) {
    return hold ? HeldFrame(data, bytes, hold) : transport::Frame(data, bytes);
  };
  transport::PartSplit split(h, 0, total,
                             transport::RowsPerPart(h.row_width, rows != nullptr, max_bytes));
  transport::Part part;
  while (split.Next(&part)) {
    const uint64_t first = part.first, n = part.count;
    transport::Frame frames[4];
    size_t count = 0;
    if (!id.empty()) frames[count++] = transport::Frame(id.data(), id.size());
    frames[count++] = transport::HeaderFrame(part.header);
    if (n > 0 && rows != nullptr) frames[count++] = over(rows + first, n * sizeof(uint64_t));
    if (n > 0 && values != nullptr)
      frames[count++] = over(values + first * w, n * w * sizeof(float));
    SendFrames(socket, frames, count);
  }
}

void MachineRelay::HandleUp(int p, std::vector<transport::Frame>& frames) {
  if (frames.empty() || frames.size() > 3) return Drop("a partition's frame count");
  FrameView views[3];
  for (size_t i = 0; i < frames.size(); ++i) views[i] = {frames[i].data(), frames[i].size()};
  StatusOr<DecodedMessage> decoded = transport::DecodeFrames(views, frames.size());
  if (!decoded.ok()) return Drop(decoded.status().message());
  const DecodedMessage& m = *decoded;
  if (m.type != MsgType::kPush)
    return Drop(std::string("unexpected ") + transport::MsgTypeName(m.type) + " from a partition");
  if (m.header.sender != static_cast<uint32_t>(p)) return Drop("push from the wrong partition");
  Partition& part = partitions_[p];
  if (m.header.table >= part.tables.size() || !part.tables[m.header.table].shared)
    return Drop("push of an unknown or local table");
  TableState& t = part.tables[m.header.table];
  const std::vector<uint64_t>& rows_up = t.sums->rows_up();
  if (m.header.row_width != t.sums->width() || rows_up.empty() ||
      m.header.offset + m.header.row_count > rows_up.size())
    return Drop("push shape does not match the subscription");
  const bool more = (m.header.flags & transport::kFlagMore) != 0;
  if (m.header.offset == 0 && !more) {
    // A push in one part: shared from the frame it came in.
    t.push.seq.Reset();
    if (m.header.row_count != rows_up.size()) return Drop("push ended before all its rows");
    // Where the values start in the frame (after the header when packed),
    // taken before the move: a small frame's bytes move with the object.
    const size_t at =
        static_cast<size_t>(m.payload - static_cast<const unsigned char*>(frames.back().data()));
    auto owner = std::make_shared<transport::Frame>(std::move(frames.back()));
    SharePush(p, m.header.table, m.header.clock, m.header.aux,
              reinterpret_cast<const float*>(static_cast<const char*>(owner->data()) + at), owner);
    return;
  }
  bool complete = false;
  if (!t.push.Add(m, t.sums->width(), &complete)) return Drop("push part out of sequence");
  if (!complete) return;
  if (m.header.offset + m.header.row_count != rows_up.size())
    return Drop("push ended before all its rows");
  auto owner = std::make_shared<std::vector<float>>(std::move(t.push.values));
  SharePush(p, m.header.table, t.push.clock, t.push.aux, owner->data(), owner);
}

void MachineRelay::SharePush(int p, uint32_t table, int64_t clock, int64_t aux, const float* values,
                             const std::shared_ptr<void>& owner) {
  TableState& t = partitions_[p].tables[table];
  // After a lost connection the partition may push again what came anyway.
  if (clock <= t.shared_clock) return;
  for (size_t i = 0; i < t.sums->members(); ++i)
    if (t.sums->subscribed(i)) SendPushTo(p, table, i, clock, aux, values, owner);
  t.shared_clock = clock;
  t.included = aux;
  t.last_push = owner;
  t.last_values = values;
  t.unapplied.erase(t.unapplied.begin(), t.unapplied.lower_bound(aux));
  pushes_down_.fetch_add(1, std::memory_order_relaxed);
  // The partition may stop holding the push's rows.
  if (resend_) SendControlUp(p, MsgType::kAck, table, clock);
}

void MachineRelay::SendPushTo(int p, uint32_t table, size_t member, int64_t clock, int64_t aux,
                              const float* values, const std::shared_ptr<void>& owner) {
  const RelayTable& sums = *partitions_[p].tables[table].sums;
  const size_t w = sums.width();
  const float* from = values;
  std::shared_ptr<void> hold = owner;
  uint64_t total = sums.rows_up().size();
  if (!sums.whole(member)) {
    // This member's rows only.
    const std::vector<uint32_t>& pick = sums.pick(member);
    auto own = std::make_shared<std::vector<float>>(pick.size() * w);
    for (size_t k = 0; k < pick.size(); ++k)
      std::memcpy(own->data() + k * w, values + static_cast<size_t>(pick[k]) * w,
                  w * sizeof(float));
    from = own->data();
    total = pick.size();
    hold = own;
  }
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kPush);
  h.sender = static_cast<uint32_t>(p);
  h.table = table;
  h.clock = clock;
  h.aux = aux;
  h.row_width = sums.width();
  SendParts(partitions_[p].down, transport::WorkerRoutingId(members_[member]), h, nullptr, from,
            hold, total, config_.max_message_bytes);
}

void MachineRelay::SendControlUp(int p, MsgType type, uint32_t table, int64_t aux) {
  WireHeader h;
  h.type = static_cast<uint16_t>(type);
  h.sender = static_cast<uint32_t>(members_[0]);
  h.table = table;
  h.aux = aux;
  transport::Frame frame = transport::HeaderFrame(h);
  SendFrames(partitions_[p].up, &frame, 1);
}

void MachineRelay::Resend(int p) {
  // What ZeroMQ still queued goes out after the reconnect, ahead of this.
  for (size_t id = 0; id < partitions_[p].tables.size(); ++id) {
    TableState& t = partitions_[p].tables[id];
    if (!t.shared || !t.sums->subscribed_up()) continue;
    const auto table = static_cast<uint32_t>(id);
    if (!t.last_push) SendSubscription(p, table);
    SendControlUp(p, MsgType::kResync, table, t.shared_clock);
    for (const auto& [clock, sum] : t.unapplied) {
      if (clock < t.included) continue;
      SendUp(p, table, clock, sum);
      updates_resent_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void MachineRelay::SendFrames(transport::Socket& socket, transport::Frame* frames, size_t count) {
  transport::ReleaseBeforeSend(context_);
  try {
    for (size_t i = 0; i < count; ++i) socket.Send(frames[i], i + 1 < count);
  } catch (const transport::Error& e) {
    if (e.context_closed()) throw;
    Drop(std::string("a send failed: ") + e.what());
  }
}

void MachineRelay::CheckStalls() {
  const auto now = std::chrono::steady_clock::now();
  for (size_t p = 0; p < partitions_.size(); ++p) {
    for (size_t id = 0; id < partitions_[p].tables.size(); ++id) {
      TableState& t = partitions_[p].tables[id];
      const int64_t next_up = t.sums->next_up();
      if (!t.shared || t.stall_logged == next_up) continue;
      std::string missing;
      bool someone = false;
      for (size_t i = 0; i < t.sums->members(); ++i) {
        if (t.sums->HasUpdate(i, next_up))
          someone = true;
        else
          missing += (missing.empty() ? "" : ", ") + std::to_string(members_[i]);
      }
      if (!someone || missing.empty()) {
        t.waiting_since = {};
        continue;
      }
      if (t.waiting_since == std::chrono::steady_clock::time_point{}) t.waiting_since = now;
      if (now - t.waiting_since < config_.timeout / 2) continue;
      t.stall_logged = next_up;
      GEEPS_LOG(Warning) << "machine " << machine_ << ", partition " << p << ", table " << id
                         << " ('" << config_.tables[id].name << "'): clock " << next_up
                         << " waits for the update of worker " << missing
                         << " (the machine's others have sent theirs, and the machine's sum "
                            "leaves only with it): is it stuck?";
    }
  }
}

void MachineRelay::Drop(const std::string& what) { drops_.Drop(what); }

}  // namespace geeps::relay
