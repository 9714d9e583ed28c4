// Whether a worker asks the partitions for its pushes in the order of need
// (Config::push_in_read_order, Config::adapt_push_order; docs/architecture.md,
// "Pushes in the order of need"). No clock and no sockets: the worker
// reports each iteration's length and the part of it its reads waited, and
// reads back what its next updates ask for.
//
// Rule (adaptive): ask once the reads waited more than kOnAbove of the last
// kWindow iterations' time together, and stop once they waited less than
// kOffBelow; after a change only iterations under the new answer count
// (the first judgement comes after one). Between the two bounds the answer
// stays as it was, so a job whose waits shrink when it asks (the order of
// need pays) keeps asking, and one whose waits grow a little (compute hid
// the pushes anyway) stops.
//
// Thread: one (the worker's application thread, under its API lock).
#ifndef GEEPS_CLIENT_PUSH_ORDER_POLICY_H_
#define GEEPS_CLIENT_PUSH_ORDER_POLICY_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace geeps::client {

class PushOrderPolicy {
 public:
  enum class Mode { kAsReady, kReadOrder, kAdaptive };
  static constexpr double kOnAbove = 0.30;
  static constexpr double kOffBelow = 0.20;
  static constexpr size_t kWindow = 3;

  explicit PushOrderPolicy(Mode mode) : mode_(mode), asks_(mode == Mode::kReadOrder) {}

  // One iteration: its length and how long its reads waited (both >= 0).
  void Observe(int64_t iteration_ns, int64_t read_wait_ns);
  // Whether the worker's updates ask for pushes in read order now.
  bool asks() const { return asks_; }
  // How often the answer changed (a figure for the worker's stats).
  int64_t switches() const { return switches_; }

 private:
  Mode mode_;
  bool asks_;
  int64_t switches_ = 0;
  std::array<int64_t, kWindow> iteration_{}, waited_{};
  size_t seen_ = 0;
};

}  // namespace geeps::client

#endif  // GEEPS_CLIENT_PUSH_ORDER_POLICY_H_
