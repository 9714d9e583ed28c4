// Helpers for tests that talk to a ShardChannel over raw sockets, as a
// worker would: build and send wire frames, receive a push.
#ifndef GEEPS_TESTS_SHARD_WIRE_UTIL_H_
#define GEEPS_TESTS_SHARD_WIRE_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "geeps/config.h"
#include "server/shard_channel.h"
#include "transport/routing_id.h"
#include "transport/tsan.h"
#include "transport/wire.h"

namespace geeps::testing {

using transport::MsgType;
using transport::WireHeader;

// The ZeroMQ context of the test's sockets, for the TSan annotations.
inline void* g_context = nullptr;

inline std::vector<zmq::message_t> Frames(const WireHeader& h, const std::vector<uint64_t>& rows,
                                          const std::vector<float>& payload) {
  std::vector<zmq::message_t> f;
  f.emplace_back(transport::kHeaderBytes);
  transport::EncodeHeader(h, f[0].data());
  if (!rows.empty()) f.emplace_back(rows.data(), rows.size() * 8);
  if (!payload.empty()) f.emplace_back(payload.data(), payload.size() * 4);
  return f;
}

inline void Send(zmq::socket_t& s, std::vector<zmq::message_t> frames) {
  transport::ReleaseBeforeSend(g_context);
  for (size_t i = 0; i < frames.size(); ++i)
    s.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

inline WireHeader Header(MsgType type, uint32_t table, int64_t clock, uint64_t rows,
                         uint32_t width) {
  WireHeader h;
  h.type = static_cast<uint16_t>(type);
  h.sender = 0;
  h.table = table;
  h.clock = clock;
  h.row_count = rows;
  h.row_width = width;
  return h;
}

// A DEALER socket connected to a shard's `endpoint` as worker `rank`, with a
// 5 s receive timeout.
inline std::unique_ptr<zmq::socket_t> WorkerSocket(zmq::context_t& ctx, int rank,
                                                   const std::string& endpoint) {
  auto w = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
  w->set(zmq::sockopt::routing_id, "w" + std::to_string(rank));
  w->set(zmq::sockopt::rcvtimeo, 5000);
  w->connect(endpoint);
  return w;
}

// A shard (partition 0 of config `c`) on inproc `endpoint`, started, and
// `workers` DEALER sockets connected to it as workers 0, 1, ... Members go
// in reverse order: sockets, then the shard, then the context.
struct ShardRig {
  ShardRig(const Config& c, const std::string& endpoint, int workers)
      : shard(&ctx, c, 0, endpoint) {
    g_context = &ctx;
    started = shard.Start();
    for (int r = 0; r < workers; ++r) sockets.push_back(WorkerSocket(ctx, r, endpoint));
  }
  zmq::socket_t& worker(int r) { return *sockets[r]; }

  zmq::context_t ctx;
  server::ShardChannel shard;
  Status started;
  std::vector<std::unique_ptr<zmq::socket_t>> sockets;
};

// Receives every frame of one message into *frames (the messages stay open:
// over inproc a push's payload is then still the shard's buffer); false on a
// timeout.
inline bool RecvFrames(zmq::socket_t& s, std::vector<zmq::message_t>* frames) {
  frames->clear();
  for (bool more = true; more;) {
    zmq::message_t m;
    if (!s.recv(m)) return false;
    transport::AcquireAfterRecv(g_context);
    more = m.more();
    frames->push_back(std::move(m));
  }
  return true;
}

// Receives one push; returns its payload.
inline std::vector<float> RecvPush(zmq::socket_t& s, int64_t* clock) {
  std::vector<zmq::message_t> frames;
  if (!RecvFrames(s, &frames)) return {};
  // Decoded as a worker does: separate frames, or packed into one.
  transport::FrameView views[3];
  const size_t count = std::min<size_t>(frames.size(), 3);
  for (size_t i = 0; i < count; ++i) views[i] = {frames[i].data(), frames[i].size()};
  StatusOr<transport::DecodedMessage> m = transport::DecodeFrames(views, count);
  if (!m.ok()) {
    ADD_FAILURE() << "a push that does not decode: " << m.status();
    return {};
  }
  *clock = m->header.clock;
  std::vector<float> out(m->header.row_count * m->header.row_width);
  if (!out.empty()) std::memcpy(out.data(), m->payload, out.size() * sizeof(float));
  return out;
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_SHARD_WIRE_UTIL_H_
