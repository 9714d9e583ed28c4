// Helpers for tests that talk to a ShardChannel over raw sockets, as a
// worker would: build and send wire frames, receive a push.
#ifndef GEEPS_TESTS_SHARD_WIRE_UTIL_H_
#define GEEPS_TESTS_SHARD_WIRE_UTIL_H_

#include <cstring>
#include <vector>
#include <zmq.hpp>

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

inline WireHeader Header(MsgType type, uint32_t table, int64_t clock, uint64_t rows, uint32_t width) {
  WireHeader h;
  h.type = static_cast<uint16_t>(type);
  h.sender = 0;
  h.table = table;
  h.clock = clock;
  h.row_count = rows;
  h.row_width = width;
  return h;
}

// Receives one push; returns its payload.
inline std::vector<float> RecvPush(zmq::socket_t& s, int64_t* clock) {
  std::vector<zmq::message_t> frames;
  for (bool more = true; more;) {
    zmq::message_t m;
    if (!s.recv(m)) return {};
    transport::AcquireAfterRecv(g_context);
    more = m.more();
    frames.push_back(std::move(m));
  }
  WireHeader h;
  std::memcpy(&h, frames[0].data(), sizeof(h));
  *clock = h.clock;
  std::vector<float> out(frames.size() > 1 ? frames[1].size() / 4 : 0);
  if (!out.empty()) std::memcpy(out.data(), frames[1].data(), frames[1].size());
  return out;
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_SHARD_WIRE_UTIL_H_
