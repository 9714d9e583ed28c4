// The heartbeat protocol of a running job, without sockets, threads or a
// clock of its own: what rank 0 (the coordinator) and every other rank do
// with each control message and each moment of time. Membership's thread
// feeds it what its link receives and the time, and sends what it says;
// tests feed it by hand (heartbeat_core_test, over an in-memory network
// that drops, duplicates and reorders).
//
// The rules (membership.h tells the whole control plane):
// - Every rank sends HB to rank 0 every interval (heartbeat_timeout / 10);
//   rank 0 answers HB to every rank not lost.
// - Rank 0 declares a rank lost when it has heard nothing from it for more
//   than heartbeat_timeout, unless it said BYE; it tells every other rank
//   still in (LOST <rank>). A rank that has heard nothing from rank 0 for
//   that long declares rank 0 lost and is finished. Each rank is reported
//   lost at most once per process, however often LOST comes.
// - Leaving: a rank sends BYE in place of each heartbeat from then on (a
//   lost BYE is sent again); rank 0, once it leaves itself and every
//   rank has left or is lost, sends DONE to those that left and is
//   finished; a rank is finished when DONE comes.
// Messages it does not know are dropped and named in Output::drops.
#ifndef GEEPS_CLUSTER_HEARTBEAT_CORE_H_
#define GEEPS_CLUSTER_HEARTBEAT_CORE_H_

#include <chrono>
#include <string>
#include <vector>

#include "geeps/status.h"

namespace geeps::cluster {

class HeartbeatCore {
 public:
  using Clock = std::chrono::steady_clock;

  struct Send {
    int to;  // a rank (rank 0 sends to any; the others only to rank 0)
    std::string text;
  };
  struct Lost {
    int rank;
    Status why;
  };
  // What one call asks of the caller, appended in order.
  struct Output {
    std::vector<Send> sends;
    std::vector<Lost> lost;
    std::vector<std::string> drops;  // why each dropped message was dropped
  };

  HeartbeatCore(int rank, int world_size, std::chrono::milliseconds heartbeat_timeout,
                Clock::time_point now);

  // A message from rank `from`: at rank 0, a rank whose routing id it
  // knows (the caller refuses strangers); elsewhere always rank 0.
  void OnMessage(int from, const std::string& text, Clock::time_point now, Output* out);
  // Time has come to `now`; `leaving`: this process has asked to leave.
  void OnTick(Clock::time_point now, bool leaving, Output* out);

  // No more to do: DONE came or was sent, or rank 0 was lost.
  bool finished() const { return finished_; }
  std::chrono::milliseconds interval() const { return interval_; }

 private:
  void CoordinatorMessage(int from, const std::string& text, Clock::time_point now, Output* out);
  void PeerMessage(const std::string& text, Clock::time_point now, Output* out);
  void CoordinatorTick(Clock::time_point now, bool leaving, Output* out);
  void PeerTick(Clock::time_point now, bool leaving, Output* out);
  void Report(int rank, Status why, Output* out);

  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds interval_;
  // Rank 0: per rank; elsewhere only [0] (rank 0's) is used.
  std::vector<Clock::time_point> last_seen_;
  std::vector<bool> left_;
  std::vector<bool> lost_;  // reported lost (at most once each)
  Clock::time_point next_beat_;
  bool said_bye_ = false;
  bool finished_ = false;
};

}  // namespace geeps::cluster

#endif  // GEEPS_CLUSTER_HEARTBEAT_CORE_H_
