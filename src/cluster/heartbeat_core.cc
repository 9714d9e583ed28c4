#include "cluster/heartbeat_core.h"

#include <utility>

#include "transport/control_messages.h"

namespace geeps::cluster {

HeartbeatCore::HeartbeatCore(int rank, int world_size, std::chrono::milliseconds heartbeat_timeout,
                             Clock::time_point now)
    : rank_(rank),
      world_size_(world_size),
      timeout_(heartbeat_timeout),
      interval_(heartbeat_timeout / 10),
      last_seen_(static_cast<size_t>(world_size), now),
      left_(static_cast<size_t>(world_size), false),
      lost_(static_cast<size_t>(world_size), false),
      next_beat_(now) {}

void HeartbeatCore::OnMessage(int from, const std::string& text, Clock::time_point now,
                              Output* out) {
  if (finished_) return;
  if (rank_ == 0) {
    CoordinatorMessage(from, text, now, out);
  } else {
    PeerMessage(text, now, out);
  }
}

void HeartbeatCore::OnTick(Clock::time_point now, bool leaving, Output* out) {
  if (finished_) return;
  if (rank_ == 0) {
    CoordinatorTick(now, leaving, out);
  } else {
    PeerTick(now, leaving, out);
  }
}

void HeartbeatCore::Report(int rank, Status why, Output* out) {
  if (lost_[rank]) return;
  lost_[rank] = true;
  out->lost.push_back(Lost{rank, std::move(why)});
}

void HeartbeatCore::CoordinatorMessage(int from, const std::string& text, Clock::time_point now,
                                       Output* out) {
  if (from <= 0 || from >= world_size_) {
    out->drops.push_back("control message from rank " + std::to_string(from));
  } else if (text == "HB") {
    last_seen_[from] = now;
  } else if (text == "BYE") {
    last_seen_[from] = now;
    left_[from] = true;
  } else if (text.rfind("HELLO", 0) != 0) {  // a late duplicate HELLO is harmless
    out->drops.push_back("unknown control message");
  }
}

void HeartbeatCore::PeerMessage(const std::string& text, Clock::time_point now, Output* out) {
  if (text == "HB") {
    last_seen_[0] = now;
  } else if (text == "DONE") {
    finished_ = true;
  } else if (text.rfind("LOST ", 0) == 0) {
    last_seen_[0] = now;
    const int lost = transport::ParseLost(text, world_size_);
    if (lost < 0) {
      out->drops.push_back("malformed LOST");
      return;
    }
    Report(lost,
           UnavailableError("rank " + std::to_string(lost) +
                            " is lost (reported by rank 0): no heartbeat for " +
                            std::to_string(timeout_.count()) + " ms"),
           out);
  } else {
    out->drops.push_back("unknown control message");
  }
}

void HeartbeatCore::CoordinatorTick(Clock::time_point now, bool leaving, Output* out) {
  for (int r = 1; r < world_size_; ++r) {
    if (lost_[r] || left_[r] || now - last_seen_[r] <= timeout_) continue;
    Report(r,
           UnavailableError("rank " + std::to_string(r) + " is lost: no heartbeat for " +
                            std::to_string(timeout_.count()) + " ms (the process died or hangs)"),
           out);
    for (int o = 1; o < world_size_; ++o)
      if (!lost_[o] && !left_[o]) out->sends.push_back(Send{o, "LOST " + std::to_string(r)});
  }
  if (leaving) {
    left_[0] = true;
    bool all = true;
    for (int r = 0; r < world_size_; ++r) all = all && (left_[r] || lost_[r]);
    if (all) {
      for (int r = 1; r < world_size_; ++r)
        if (left_[r]) out->sends.push_back(Send{r, "DONE"});
      finished_ = true;
      return;
    }
  }
  if (now >= next_beat_) {
    next_beat_ = now + interval_;
    for (int r = 1; r < world_size_; ++r)
      if (!lost_[r]) out->sends.push_back(Send{r, "HB"});
  }
}

void HeartbeatCore::PeerTick(Clock::time_point now, bool leaving, Output* out) {
  if (now - last_seen_[0] > timeout_) {
    Report(0,
           UnavailableError("rank 0 (the coordinator) is lost: no heartbeat for " +
                            std::to_string(timeout_.count()) + " ms (the process died or hangs)"),
           out);
    finished_ = true;
    return;
  }
  // Once leaving, BYE takes the heartbeat's place (it counts as one at rank
  // 0), so that a lost BYE is sent again until DONE comes.
  if (leaving && !said_bye_) {
    said_bye_ = true;
    next_beat_ = now;
  }
  if (now >= next_beat_) {
    next_beat_ = now + interval_;
    out->sends.push_back(Send{0, said_bye_ ? "BYE" : "HB"});
  }
}

}  // namespace geeps::cluster
