// The relay of one machine's workers under Config::aggregate_per_machine
// (docs/architecture.md, "Several devices per machine"). The machine's
// workers connect their channels to the relay instead of the partitions;
// the relay speaks to every partition as the machine's leader (its lowest
// rank), so a partition sees one participant per machine:
//   - Subscribe: the union of the members' subscriptions, sent just before
//     the machine's first update (every worker subscribes before its first
//     update, so all have arrived by then);
//   - Update: when every member has sent clock c of a table to a partition,
//     the sum of their deltas, added in rank order (so deterministic BSP is
//     bitwise reproducible), as one update of clock c;
//   - Push: each push is handed to every subscribed member, as its own
//     subscription's rows (the same buffer, without a copy, where a member's
//     subscription is the union).
// The members' acknowledgements are not passed on (the relay acknowledges
// each push it has shared). Over tcp:// or ipc:// to the partitions, the
// relay does what a worker's channel does after a lost connection: it sends
// its subscription again if no push has come, a Resync, and the sums the
// partition may not have applied (those of clocks at or past what the last
// push included); a partition skips what it had. A member that resyncs is
// handed the last push again; a repeated update of a member is skipped.
//
// Threads: one, the relay's own; it owns every socket between Start() and
// Stop(). The public methods are for the thread that owns the relay.
#ifndef GEEPS_RELAY_MACHINE_RELAY_H_
#define GEEPS_RELAY_MACHINE_RELAY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "geeps/config.h"
#include "geeps/stats.h"
#include "geeps/status.h"
#include "relay/relay_table.h"
#include "transport/context.h"
#include "transport/drop_log.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace geeps::transport {
class SecurityConfig;
}  // namespace geeps::transport

namespace geeps::relay {

class MachineRelay {
 public:
  // Relays the workers `members` (ranks, ascending: members[0] leads) of
  // machine `machine` to every partition p at `upstream[p]`; the members
  // connect to `local[p]`. `security` (may be null: off) is the job's CURVE
  // settings, for every tcp:// and ipc:// socket; it outlives the relay.
  MachineRelay(transport::Context* context, const Config& config, int machine,
               std::vector<int> members, std::vector<std::string> local,
               std::vector<std::string> upstream,
               const transport::SecurityConfig* security = nullptr);
  ~MachineRelay();  // Stop()
  MachineRelay(const MachineRelay&) = delete;
  MachineRelay& operator=(const MachineRelay&) = delete;

  // Where the members connect, by partition (cluster/job_plan.h names them).
  const std::vector<std::string>& local_endpoints() const { return local_; }

  // Before Start(): the clock the members' first updates have (a resumed
  // checkpoint's clock; 0 otherwise).
  void SetStartClock(int64_t clock) { start_clock_ = clock; }
  // Binds the members' sockets, connects to the partitions, starts the thread.
  Status Start();
  // Passes on what the members have sent, then joins the thread and closes
  // the sockets. Idempotent.
  void Stop();

  // Statistics (any thread): Process::GetRelayStats,
  // EmbeddedCluster::GetRelayStats.
  RelayStats GetStats() const;

 private:
  struct TableState {
    bool shared = false;
    // The members' subscriptions and updates, and the sums to send up.
    std::optional<RelayTable> sums;
    Assembly push;                    // a push arriving in parts
    int64_t shared_clock = 0;         // the last push shared with the members
    int64_t included = 0;             // the machine's clocks that push included
    std::shared_ptr<void> last_push;  // its rows (rows_up order), for a resync
    const float* last_values = nullptr;
    // Sums sent and maybe not yet applied (clock >= included), for a resend
    // after a lost connection; only kept when the link can be lost.
    std::map<int64_t, std::shared_ptr<Delta>> unapplied;
    // Since when some members have sent clock next_up and others not (a
    // stall is logged once per clock after Config::timeout / 2).
    std::chrono::steady_clock::time_point waiting_since{};
    int64_t stall_logged = -1;
  };
  struct Partition {
    transport::Socket down;     // ROUTER: the members' channels
    transport::Socket up;       // DEALER: the partition, as the leader
    transport::Socket monitor;  // `up`'s disconnects (not inproc)
    std::vector<TableState> tables;
  };

  void Run();
  // Receives and handles every queued message; true if any.
  bool Drain(int p);
  void HandleDown(int p, std::vector<transport::Frame>& frames);
  void HandleUp(int p, std::vector<transport::Frame>& frames);
  // Sends the sums of every clock all members have completed (after the
  // union of their subscriptions, the first time).
  void TrySum(int p, uint32_t table);
  void SendSubscription(int p, uint32_t table);
  void SendUp(int p, uint32_t table, int64_t clock, const std::shared_ptr<Delta>& sum);
  // Sends a message of `total` rows in parts of at most `max_bytes`: the
  // routing frame `id` (none if empty), the header `h` (its flags kept on
  // every part), then the part's row ids from `rows` and payload from
  // `values` (each may be null), without a copy when `hold` keeps them alive.
  void SendParts(transport::Socket& socket, const std::string& id, const transport::WireHeader& h,
                 const uint64_t* rows, const float* values, const std::shared_ptr<void>& hold,
                 uint64_t total, uint64_t max_bytes);
  void SendControlUp(int p, transport::MsgType type, uint32_t table, int64_t aux);
  // After a lost connection to partition p: subscription, resync, sums.
  void Resend(int p);
  // Sends a push to member `member` (its rows of `values`, in rows_up order).
  void SendPushTo(int p, uint32_t table, size_t member, int64_t clock, int64_t aux,
                  const float* values, const std::shared_ptr<void>& owner);
  // Hands a whole push (values: rows_up.size() * width floats, kept alive
  // by `owner`) to every subscribed member.
  void SharePush(int p, uint32_t table, int64_t clock, int64_t aux, const float* values,
                 const std::shared_ptr<void>& owner);
  void SendFrames(transport::Socket& socket, transport::Frame* frames, size_t count);
  void CheckStalls();
  void Drop(const std::string& what);

  transport::Context* const context_;
  const Config config_;
  const int machine_;
  const std::vector<int> members_;  // ranks, ascending; members_[0] leads
  const std::vector<std::string> local_;
  const std::vector<std::string> upstream_;
  const transport::SecurityConfig* const security_;
  // The link to the partitions can be lost (not inproc) and the job resends
  // (Config::resend_after_connection_loss): keep sums, acknowledge pushes.
  const bool resend_;
  int64_t start_clock_ = 0;
  std::vector<Partition> partitions_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool started_ = false;
  std::atomic<int64_t> updates_up_{0}, pushes_down_{0}, frames_dropped_{0}, connection_losses_{0},
      updates_resent_{0};
  // Every dropped frame, the first logged (relay thread only).
  transport::DropLog drops_{"machine relay " + std::to_string(machine_), &frames_dropped_};
};

}  // namespace geeps::relay

#endif  // GEEPS_RELAY_MACHINE_RELAY_H_
