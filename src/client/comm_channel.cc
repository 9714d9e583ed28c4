#include "client/comm_channel.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "common/logging.h"
#include "transport/security.h"
#include "transport/socket_util.h"
#include "transport/tsan.h"
#include "transport/wire.h"

namespace geeps::client {

using transport::DecodedMessage;
using transport::FrameView;
using transport::MsgType;
using transport::WireHeader;

namespace {
constexpr int kPollSafetyMs = 200;

// ZeroMQ's free function for a message sent from an oplog slot.
void ReleaseZeroCopy(void* /*data*/, void* hint) {
  static_cast<std::atomic<int>*>(hint)->fetch_sub(1, std::memory_order_release);
}

bool AllIncluded(const TableCache& t, int64_t clock) {
  for (const PartitionSlice& s : t.slices) {
    if (s.cache_count > 0 && s.included <= clock) return false;
  }
  return true;
}
}  // namespace

void ReleaseSlots(TableCache& t, bool read_my_writes) {
  for (auto& slot : t.slots) {
    if (!slot->in_use || slot->pending_sends > 0) continue;
    if (slot->retained) {
      if (!read_my_writes || !AllIncluded(t, slot->clock)) continue;
      slot->retained = false;
      t.retained.erase(std::find(t.retained.begin(), t.retained.end(), slot.get()));
    }
    slot->in_use = false;
  }
}

CommChannel::CommChannel(const ClientContext& ctx, zmq::context_t* zmq_context,
                         int channel, std::vector<std::string> endpoints)
    : ctx_(ctx),
      zmq_context_(zmq_context),
      channel_(channel),
      endpoints_(std::move(endpoints)),
      task_endpoint_("inproc://geeps-w" + std::to_string(ctx.rank) + "-c" +
                     std::to_string(channel) + "-tasks-" +
                     std::to_string(reinterpret_cast<uintptr_t>(this))),
      control_endpoint_("inproc://geeps-w" + std::to_string(ctx.rank) + "-c" +
                        std::to_string(channel) + "-control-" +
                        std::to_string(reinterpret_cast<uintptr_t>(this))) {}

CommChannel::~CommChannel() { Stop(); }

Status CommChannel::Start() {
  auto stream = ctx_.device->CreateStream();
  if (!stream.ok()) return stream.status();
  stream_ = std::move(stream).value();
  try {
    task_in_ = std::make_unique<zmq::socket_t>(*zmq_context_, zmq::socket_type::pull);
    task_in_->set(zmq::sockopt::rcvhwm, 0);
    task_in_->bind(task_endpoint_);
    task_out_ = std::make_unique<zmq::socket_t>(*zmq_context_, zmq::socket_type::push);
    task_out_->set(zmq::sockopt::sndhwm, 0);
    task_out_->set(zmq::sockopt::linger, 1000);
    task_out_->connect(task_endpoint_);
    control_ = std::make_unique<zmq::socket_t>(*zmq_context_, zmq::socket_type::pull);
    control_->bind(control_endpoint_);
    const std::string id = transport::WorkerRoutingId(ctx_.rank);
    for (const std::string& ep : endpoints_) {
      auto s = std::make_unique<zmq::socket_t>(*zmq_context_, zmq::socket_type::dealer);
      s->set(zmq::sockopt::routing_id, id);
      s->set(zmq::sockopt::sndhwm, 0);
      s->set(zmq::sockopt::rcvhwm, 0);
      s->set(zmq::sockopt::linger, 1000);
      if (ep.rfind("inproc://", 0) != 0) transport::ConfigureCurveClient(*s, ctx_.security);
      s->connect(ep);
      shards_.push_back(std::move(s));
    }
    partial_.resize(shards_.size());
  } catch (const zmq::error_t& e) {
    return UnavailableError("worker " + std::to_string(ctx_.rank) + " channel " +
                            std::to_string(channel_) + ": socket setup failed: " + e.what());
  }
  started_.store(true);
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

Status CommChannel::Enqueue(const CommTask& task) {
  if (!started_.load() || stop_.load())
    return FailedPreconditionError("communication channel is stopped");
  try {
    transport::ReleaseBeforeSend(zmq_context_);
    task_out_->send(zmq::buffer(&task, sizeof(task)), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return InternalError(std::string("task queue send failed: ") + e.what());
  }
  return Status::OK();
}

void CommChannel::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (!started_.exchange(false)) return;
  stop_.store(true);
  transport::WakeUp(zmq_context_, control_endpoint_);
  if (thread_.joinable()) thread_.join();
  task_out_.reset();
}

void CommChannel::Run() {
  const size_t n = shards_.size();
  std::vector<zmq::pollitem_t> items(n + 2);
  items[0] = {task_in_->handle(), 0, ZMQ_POLLIN, 0};
  items[1] = {control_->handle(), 0, ZMQ_POLLIN, 0};
  for (size_t s = 0; s < n; ++s) items[s + 2] = {shards_[s]->handle(), 0, ZMQ_POLLIN, 0};
  std::vector<zmq::message_t> frames;
  while (!stop_.load()) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(kPollSafetyMs));
      if (items[1].revents & ZMQ_POLLIN) break;
      if (items[0].revents & ZMQ_POLLIN) DrainTasks();
      for (size_t s = 0; s < n; ++s) {
        if (!(items[s + 2].revents & ZMQ_POLLIN)) continue;
        for (int budget = 0; budget < 64; ++budget) {
          if (!transport::TryRecvMultipart(*shards_[s], zmq_context_, &frames)) break;
          HandlePush(static_cast<int>(s), frames);
        }
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      GEEPS_LOG(Error) << "worker " << ctx_.rank << " channel " << channel_ << ": "
                       << e.what();
    }
  }
  // Nothing lost on an orderly stop: send every update already queued.
  try {
    DrainTasks();
  } catch (const zmq::error_t&) {
  }
  shards_.clear();
  task_in_.reset();
  control_.reset();
}

void CommChannel::DrainTasks() {
  zmq::message_t msg;
  while (task_in_->recv(msg, zmq::recv_flags::dontwait)) {
    transport::AcquireAfterRecv(zmq_context_);
    CommTask task;
    if (msg.size() == sizeof(task)) {
      std::memcpy(&task, msg.data(), sizeof(task));
      RunTask(task);
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
    std::lock_guard<std::mutex> lock(t.mu);
    --task.slot->pending_sends;
    ReleaseSlots(t, ctx_.config->read_my_writes);
  }
}

void CommChannel::SendFrames(int shard, zmq::message_t* frames, size_t count) {
  size_t bytes = 0;
  transport::ReleaseBeforeSend(zmq_context_);
  try {
    for (size_t i = 0; i < count; ++i) {
      bytes += frames[i].size();
      shards_[shard]->send(frames[i], i + 1 < count ? zmq::send_flags::sndmore
                                                    : zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    GEEPS_LOG(Error) << "worker " << ctx_.rank << ": send to shard " << shard
                     << " failed: " << e.what();
    return;
  }
  ctx_.counters->messages_sent.fetch_add(1);
  ctx_.counters->bytes_sent.fetch_add(static_cast<int64_t>(bytes));
}

void CommChannel::SendInParts(int shard, WireHeader h, const uint64_t* rows, uint64_t total,
                              const Payload& payload) {
  const uint64_t per =
      transport::RowsPerPart(h.row_width, rows != nullptr, ctx_.config->max_message_bytes);
  const size_t row_bytes = static_cast<size_t>(h.row_width) * sizeof(float);
  const uint32_t extra_flags = h.flags;  // kFlagCheckpoint on every part
  uint64_t first = 0;
  do {
    const uint64_t n = std::min(per, total - first);
    h.offset = first;
    h.row_count = n;
    h.flags = extra_flags | (first + n < total ? transport::kFlagMore : 0);
    zmq::message_t frames[3];
    frames[0].rebuild(transport::kHeaderBytes);
    transport::EncodeHeader(h, frames[0].data());
    size_t count = 1;
    if (n > 0 && rows != nullptr) frames[count++].rebuild(rows + first, n * sizeof(uint64_t));
    if (n > 0 && payload.base != nullptr) {
      payload.refs->fetch_add(1, std::memory_order_relaxed);
      frames[count++].rebuild(const_cast<char*>(payload.base) + first * row_bytes, n * row_bytes,
                              &ReleaseZeroCopy, payload.refs);
    } else if (n > 0 && payload.fill) {
      frames[count].rebuild(n * row_bytes);
      payload.fill(static_cast<char*>(frames[count].data()), first, n);
      ++count;
    }
    SendFrames(shard, frames, count);
    first += n;
  } while (first < total);
}

void CommChannel::SendSubscribe(TableCache& t, const PartitionSlice& s) {
  if (s.cache_count == 0) return;
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kSubscribe);
  h.sender = static_cast<uint32_t>(ctx_.rank);
  h.table = t.id;
  h.row_width = t.width;
  SendInParts(s.partition / ctx_.config->num_channels, h, t.rows.data() + s.cache_begin,
              s.cache_count, Payload{});
}

void CommChannel::SendUpdate(TableCache& t, const PartitionSlice& s, OplogSlot& slot) {
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kUpdate);
  h.sender = static_cast<uint32_t>(ctx_.rank);
  h.table = t.id;
  h.clock = slot.clock;
  h.row_width = t.width;
  if (slot.checkpoint) h.flags = transport::kFlagCheckpoint;
  const uint64_t total = slot.dirty ? s.update_rows.size() : 0;
  const size_t row_bytes = t.width * sizeof(float);
  Payload payload;
  if (total > 0 && s.update_pos.back() - s.update_pos.front() + 1 == total) {
    // The updated rows are consecutive cached positions (positions are
    // sorted and distinct): send them from the slot as they are.
    payload.base = reinterpret_cast<const char*>(
        slot.host + static_cast<size_t>(s.update_pos.front()) * t.width);
    payload.refs = &slot.zmq_refs;
  } else {
    payload.fill = [&](char* out, uint64_t first, uint64_t n) {
      ClientCounters::Count(ctx_.counters->pack_bytes, n * row_bytes);
      for (uint64_t i = 0; i < n; ++i) {
        std::memcpy(out + i * row_bytes,
                    slot.host + static_cast<size_t>(s.update_pos[first + i]) * t.width,
                    row_bytes);
      }
    };
  }
  SendInParts(s.partition / ctx_.config->num_channels, h, s.update_rows.data(), total,
              payload);
}

void CommChannel::Drop(const std::string& what) {
  ctx_.counters->frames_dropped.fetch_add(1);
  if (!logged_drop_) {
    logged_drop_ = true;
    GEEPS_LOG(Warning) << "worker " << ctx_.rank << " channel " << channel_
                       << ": dropped a frame (" << what << "); further drops are only counted";
  }
}

void CommChannel::HandlePush(int shard, std::vector<zmq::message_t>& frames) {
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
  // Parts of one push arrive back to back on this shard's socket; collect
  // them, then install the whole push at once.
  PartialPush& partial = partial_[shard];
  const bool rmw = ctx_.config->read_my_writes;
  // A push in one part is installed straight from the message unless
  // read-my-writes must add to it first.
  const bool whole = m.header.offset == 0 && !(m.header.flags & transport::kFlagMore);
  const bool direct = whole && !rmw;
  if (direct) {
    partial.table = -1;
  } else if (m.header.offset == 0) {
    // Keep the buffer (and its pages) from one push to the next.
    partial.table = static_cast<int>(m.header.table);
    partial.clock = m.header.clock;
    partial.received = 0;
    partial.rows.resize(static_cast<size_t>(s.cache_count) * t.width);
  } else if (partial.table != static_cast<int>(m.header.table) ||
             partial.clock != m.header.clock || partial.received != m.header.offset) {
    partial.table = -1;
    return Drop("push part out of sequence");
  }
  if (!direct) {
    ClientCounters::Count(ctx_.counters->install_bytes,
                          m.header.row_count * t.width * sizeof(float));
    std::memcpy(partial.rows.data() + m.header.offset * t.width, m.payload,
                m.header.row_count * t.width * sizeof(float));
    partial.received += m.header.row_count;
    if (m.header.flags & transport::kFlagMore) return;
    partial.table = -1;
    if (partial.received != s.cache_count) return Drop("push ended before all subscribed rows");
  } else if (m.header.row_count != s.cache_count) {
    return Drop("push ended before all subscribed rows");
  }
  std::vector<float>& staging = partial.rows;
  // The rows in cached-position order, as bytes (a payload need not be
  // aligned for floats; copies do not care).
  const char* rows_bytes = direct ? reinterpret_cast<const char*>(m.payload)
                                  : reinterpret_cast<const char*>(staging.data());
  const size_t floats = static_cast<size_t>(s.cache_count) * t.width;
  const size_t offset = static_cast<size_t>(s.cache_begin) * t.width;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    if (m.header.clock <= s.age || m.header.aux < s.included)
      return Drop("stale or repeated push");
    // Installing: one pass over the rows, plus one per own delta re-added.
    ClientCounters::Count(ctx_.counters->install_bytes, floats * sizeof(float));
    if (rmw) {
      for (const OplogSlot* slot : t.retained) {
        if (slot->clock < m.header.aux) continue;
        ClientCounters::Count(ctx_.counters->install_bytes, floats * sizeof(float));
        const float* d = slot->host + offset;
        for (size_t i = 0; i < floats; ++i) staging[i] += d[i];
      }
    }
    // Install by pieces: rows in device memory are copied in, rows the
    // memory manager keeps in host memory are written in place.
    device::Device* dev = ctx_.device;
    const size_t w = t.width;
    Status st;
    t.ForPieces(s.cache_begin, s.cache_count, [&](const CacheRun& piece, uint32_t off) {
      const char* src = rows_bytes + off * w * sizeof(float);
      const size_t n = piece.count * w;
      if (!piece.on_device) {
        float* dst = t.host_cache + piece.at * w;
        std::memcpy(dst, src, n * sizeof(float));
        if (rmw && t.oplog_dirty) {
          const float* d = t.host_oplog + piece.at * w;
          for (size_t i = 0; i < n; ++i) dst[i] += d[i];
        }
        return;
      }
      if (st.ok())
        st = dev->Copy(t.cache + piece.at * w, src, n * sizeof(float),
                       device::CopyKind::kHostToDevice, stream_.get());
      if (st.ok() && rmw && t.oplog_dirty)
        st = dev->Add(t.cache + piece.at * w, t.oplog + piece.at * w, n, stream_.get());
    });
    if (st.ok()) st = dev->Synchronize(stream_.get());
    if (!st.ok()) {
      GEEPS_LOG(Error) << "worker " << ctx_.rank << ": installing a push failed: " << st;
      return;
    }
    s.age = m.header.clock;
    s.included = m.header.aux;
    ReleaseSlots(t, rmw);
  }
  ctx_.counters->pushes_installed.fetch_add(1);
  t.cv.notify_all();
}

}  // namespace geeps::client
