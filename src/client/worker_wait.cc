// The worker's waits: a Read or Sync that waits for pushes receives them on
// the application thread (WaitForPushes), the wake-ups of those waits
// (WakeWaiters, FailPeers) and the errors a wait ends with (docs/
// architecture.md, "Threads of the data path").
#include <poll.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "client/worker.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "transport/socket_util.h"

namespace geeps::client {

using SteadyClock = std::chrono::steady_clock;

Status Worker::ReadTimeout(int32_t read, const TableCache& t, int64_t required) const {
  const RecordedAccess& a = seq_.reads()[read];
  int64_t lowest = required;
  int lowest_partition = -1;
  for (int si : plan_->read_slices(read)) {
    if (t.slices[si].age < lowest) {
      lowest = t.slices[si].age;
      lowest_partition = t.slices[si].partition;
    }
  }
  const std::string what = "Read(read#" + std::to_string(read) + ") of table " +
                           std::to_string(a.table) + " ('" + config_.tables[a.table].name + "')";
  if (lowest_partition < 0) {
    for (int si : plan_->read_slices(read))
      if (t.slices[si].installing) lowest_partition = t.slices[si].partition;
    return DeadlineExceededError(
        what + " waited " + std::to_string(config_.timeout.count()) +
        " ms for the rest of a push in parts from server partition " +
        std::to_string(lowest_partition) + LossNote(lowest_partition) +
        " (its parts stopped coming, or one was dropped: the worker's log says which)");
  }
  const std::string loss = LossNote(lowest_partition);
  return DeadlineExceededError(
      what + " at clock " + std::to_string(clock_.load()) + " waited " +
      std::to_string(config_.timeout.count()) +
      " ms for rows of clock >= " + std::to_string(required) + "; server partition " +
      std::to_string(lowest_partition) + " is still at clock " + std::to_string(lowest) +
      (loss.empty() ? " (some worker's update of that clock has not reached it: a worker "
                      "is stuck, failed or shut down, or the update was lost on the way; "
                      "the shard logs which workers it waits for)"
                    : loss));
}

std::string Worker::LossNote(int partition) const {
  if (partition < 0) return "";
  const int channels = config_.num_channels;
  const size_t ch = static_cast<size_t>(partition % channels);
  if (ch >= channels_.size() || !channels_[ch]) return "";
  int64_t last_ns = 0;
  const int64_t n = channels_[ch]->ConnectionLosses(partition / channels, &last_ns);
  if (n == 0) return "";
  const double ago = static_cast<double>(WaitState::NowNs() - last_ns) / 1e9;
  char when[32];
  std::snprintf(when, sizeof(when), "%.1f", ago);
  return "; the connection from this worker to that partition was lost " + std::to_string(n) +
         " time(s), the last " + when + " s ago" +
         (config_.resend_after_connection_loss
              ? std::string(" (what it had not acknowledged was sent again after each loss)")
              : std::string(": an update or push in flight then was lost with it, and "
                            "resend_after_connection_loss is off")) +
         " (docs/reliability.md, \"A connection that resets mid-job\")";
}

Status Worker::PeerFailure() const {
  common::MutexLock lock(&failure_mu_);
  return peer_failure_;
}

void Worker::FailPeers(const Status& reason) {
  {
    common::MutexLock lock(&failure_mu_);
    if (!peer_failure_.ok()) return;
    peer_failure_ = reason.ok() ? InternalError("FailPeers with an OK status") : reason;
  }
  peers_failed_.store(true);
  WakeWaiters();
}

void Worker::PeerEnded(int rank, int64_t clock) {
  {
    common::MutexLock lock(&failure_mu_);
    if (clock >= ended_clock_.load()) return;
    ended_rank_ = rank;
    ended_clock_.store(clock);
  }
  WakeWaiters();
}

void Worker::ClearEndedPeers() {
  common::MutexLock lock(&failure_mu_);
  ended_rank_ = -1;
  ended_clock_.store(INT64_MAX);
}

Status Worker::EndedPeerBlocks(int64_t required, const std::string& what) const {
  common::MutexLock lock(&failure_mu_);
  const int64_t ended = ended_clock_.load();
  if (required <= ended) return Status::OK();
  return FailedPreconditionError(
      what + " on worker " + std::to_string(rank_) + " at clock " + std::to_string(clock_.load()) +
      " needs rows of clock " + std::to_string(required) + ", but worker " +
      std::to_string(ended_rank_) + "'s function returned with only " + std::to_string(ended) +
      " clock(s) completed, so no push can reach that clock (every worker's function must run "
      "as many iterations as the others)");
}

bool Worker::WaitForPushes(common::MutexLock& lock, SteadyClock::time_point deadline,
                           const std::function<bool()>& done) {
  if (done()) return true;
  // This thread receives the pushes while it waits; the channel threads
  // leave the sockets to it (CommChannel::Run).
  wait_.last_wait_ns.store(WaitState::NowNs());
  wait_.app_waiting.store(true);
  // app_waiting is set under the table's mutex, which installing a push of
  // this table takes too: a channel thread that installs one after the
  // check above sees it and writes wake_fd. Every thread that uses a
  // channel's sockets ends by draining them (CommChannel::PumpLocked) or
  // marking them unchecked (drained below before each poll), so any other
  // push that arrives from now on makes a descriptor readable: poll, then
  // receive. Where the recent waits were short, the polls do not block at
  // first (SpinPolicy): then no wake-up is paid when the push comes.
  const auto start = SteadyClock::now();
  const auto spin_until = start + std::chrono::nanoseconds(spin_.SpinNs());
  bool result = false, spinning = spin_until > start, held = false, first_look = true;
  if (spinning) waits_spun_.fetch_add(1);
  auto last_look = start;  // when the last poll returned
  for (;;) {
    const auto now = SteadyClock::now();
    // Outside its poll this loop only computes and takes locks: a gap this
    // long means the process was frozen there (kFrozenGap, below).
    if (now - last_look > kFrozenGap) {
      deadline += now - last_look;
      NoteFrozen(now - last_look);
    }
    if (now >= deadline) break;
    const int64_t left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    spinning = now < spin_until;
    lock.Unlock();
    // Read on where an earlier receive stopped at a push: until a receive
    // finds nothing there, that socket's descriptor may not signal.
    int probed = 0;
    for (auto& c : channels_) probed += c->ProbeUnchecked();
    if (probed > 0) {
      lock.Lock();
      if (done()) {
        result = true;
        break;
      }
      lock.Unlock();
    }
    // Idle until a push comes: zero the update buffers ZeroMQ has released
    // (PreUpdate then skips them; once while spinning); while one is still
    // held, look again in kHeldBufferTickMs (not sooner: on a slow link a
    // send takes long, and each look wakes this thread and reads every
    // channel).
    if (!spinning || first_look) held = data_->ZeroReleasedUpdateBuffers();
    first_look = false;
    const int poll_ms =
        spinning ? 0 : static_cast<int>(std::min<int64_t>(left_ms, held ? kHeldBufferTickMs : 200));
    const int ready = LookForPushes(poll_ms, now, &deadline, &last_look);
    lock.Lock();
    if (ready == 0 && spinning) {
      // Nothing yet: let any other thread ready to run on this core go
      // first (this one may be what it waits for), then look again.
      sched_yield();
      continue;
    }
    if (done()) {
      result = true;
      break;
    }
  }
  wait_.app_waiting.store(false);
  wait_.last_wait_ns.store(WaitState::NowNs());
  spin_.Record(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count());
  if (result && spinning) waits_ended_spinning_.fetch_add(1);
  return result;
}

int Worker::LookForPushes(int poll_ms, SteadyClock::time_point now,
                          SteadyClock::time_point* deadline, SteadyClock::time_point* last_look) {
  for (pollfd& f : wait_fds_) f.revents = 0;
  // Readable: a push may have arrived, a channel thread installed one, or
  // the worker is shutting down (wake_fd).
  const int ready = ::poll(wait_fds_.data(), wait_fds_.size(), poll_ms);
  // A poll that returns far later than it was asked to means this process
  // did not run meanwhile (stopped by SIGSTOP or a debugger, the machine
  // suspended, or starved of CPU): nobody else could make progress for it
  // then, so that time is left out of the deadline.
  *last_look = SteadyClock::now();
  const auto overslept = *last_look - now - std::chrono::milliseconds(poll_ms);
  if (overslept > kFrozenGap) {
    *deadline += overslept;
    NoteFrozen(overslept);
  }
  if (ready > 0 && (wait_fds_[0].revents & POLLIN)) transport::ClearWakeFd(wait_.wake_fd);
  // Each channel reads what this poll found readable (no second poll).
  const pollfd* polled = wait_fds_.data() + 1;
  for (auto& c : channels_) {
    c->PumpPolled(polled, ready < 0);
    polled += c->poll_fds().size();
  }
  return ready;
}

void Worker::NoteFrozen(SteadyClock::duration overslept) {
  if (logged_frozen_.exchange(true)) return;
  GEEPS_LOG(Warning) << "worker " << rank_ << ": a wait for pushes woke "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(overslept).count()
                     << " ms late (the process was stopped, suspended or starved of CPU); "
                        "that time does not count against the timeout. Further cases are "
                        "only counted";
}

void Worker::WakeWaiters() {
  // The tables and wait_.wake_fd are fixed once tables_ready_ is set;
  // before that nobody waits.
  if (!tables_ready_.load(std::memory_order_acquire)) return;
  wait_.Wake();
  for (auto& t : data_->tables()) {
    if (!t) continue;
    { common::MutexLock lock(&t->mu); }
    t->cv.notify_all();
  }
}

}  // namespace geeps::client
