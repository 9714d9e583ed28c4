// A partition's table without sockets (src/server/partition_table.h): the
// messages are real decoded wire frames, and the pushes it orders are read
// as the shard channel reads them (PartInPlace, CopyPart), zero-copy parts
// held until the test releases them, as ZeroMQ would.
#include "server/partition_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/wire.h"

namespace geeps {
namespace {

using server::DropReason;
using server::PartitionCounters;
using server::PartitionTable;
using server::PushOrder;
using server::SharedRows;
using server::TableOutcome;
using transport::DecodedMessage;
using transport::MsgType;

// What a worker received of one push.
struct Received {
  std::vector<float> values;  // the parts' payloads, in order
  int parts = 0;
  bool complete = false;  // its last part came
  int times = 0;          // it began this many times (a re-push: more than once)
};

// A zero-copy part still "in ZeroMQ": a hold on the rows it was sent from.
struct Hold {
  std::shared_ptr<SharedRows> rows;
  const float* data = nullptr;
  std::vector<float> sent;  // its values when it was sent
};

class Rig {
 public:
  Rig(PartitionTable::Options options, uint64_t num_rows, uint32_t width)
      : width_(width), table_({0, num_rows}, width, options, &counters_) {}
  ~Rig() { ReleaseAll(); }

  PartitionTable& table() { return table_; }
  const PartitionCounters& counters() const { return counters_; }
  // Pushes worker `w` received, by clock.
  std::map<int64_t, Received>& got(int w) { return got_[w]; }
  std::deque<Hold>& holds() { return holds_; }
  const std::vector<TableOutcome>& outcomes() const { return outcomes_; }

  TableOutcome Subscribe(int w, const std::vector<uint64_t>& rows, uint64_t offset = 0,
                         bool more = false) {
    return Do(w, MsgType::kSubscribe, 0, rows, {}, offset, more ? transport::kFlagMore : 0, 0);
  }
  // Worker `w`'s update of `clock`: `delta(row)` added to every column of
  // each row of `rows`.
  TableOutcome Update(int w, int64_t clock, const std::vector<uint64_t>& rows,
                      const std::vector<float>& deltas, uint64_t offset = 0, uint32_t flags = 0,
                      int64_t aux = 0) {
    std::vector<float> payload;
    for (float d : deltas) payload.insert(payload.end(), width_, d);
    return Do(w, MsgType::kUpdate, clock, rows, payload, offset, flags, aux);
  }
  TableOutcome Ack(int w, int64_t installed, MsgType type = MsgType::kAck) {
    return Do(w, type, 0, {}, {}, 0, 0, installed);
  }

  // Lets go of every zero-copy part still held (ZeroMQ's free function).
  void ReleaseAll() {
    for (Hold& h : holds_) h.rows->in_flight.fetch_sub(1, std::memory_order_release);
    holds_.clear();
  }

 private:
  TableOutcome Do(int w, MsgType type, int64_t clock, const std::vector<uint64_t>& rows,
                  const std::vector<float>& payload, uint64_t offset, uint32_t flags, int64_t aux) {
    transport::WireHeader h;
    h.type = static_cast<uint16_t>(type);
    h.sender = static_cast<uint32_t>(w);
    h.clock = clock;
    h.aux = aux;
    h.row_count = rows.size();
    h.row_width = type == MsgType::kUpdate ? width_ : 0;
    h.flags = flags;
    h.offset = offset;
    std::vector<unsigned char> header(transport::kHeaderBytes);
    transport::EncodeHeader(h, header.data());
    transport::FrameView frames[3] = {{header.data(), header.size()}};
    size_t count = 1;
    if (!rows.empty()) frames[count++] = {rows.data(), rows.size() * sizeof(uint64_t)};
    if (!payload.empty()) frames[count++] = {payload.data(), payload.size() * sizeof(float)};
    StatusOr<DecodedMessage> m = transport::DecodeFrames(frames, count);
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) return {};
    TableOutcome out;
    switch (type) {
      case MsgType::kSubscribe:
        out = table_.Subscribe(w, *m);
        break;
      case MsgType::kUpdate:
        out = table_.Update(w, *m);
        break;
      default:
        out = table_.AckOrResync(w, *m);
    }
    for (const PushOrder& order : out.pushes) Send(order);
    outcomes_.push_back(out);
    return out;
  }

  // As ShardChannel::PushRows, in one part per order.
  void Send(const PushOrder& order) {
    const uint64_t n = order.to - order.from;
    std::vector<float> values(n * width_);
    if (const float* in_place = table_.PartInPlace(order, order.from, n)) {
      std::memcpy(values.data(), in_place, values.size() * sizeof(float));
      for (size_t k = 0; k < order.workers.size(); ++k) {
        order.source->in_flight.fetch_add(1, std::memory_order_relaxed);
        holds_.push_back({order.source, in_place, values});
      }
    } else {
      table_.CopyPart(order, order.from, n, reinterpret_cast<char*>(values.data()));
    }
    for (int w : order.workers) {
      Received& r = got_[w][order.clock];
      if (r.complete || r.times == 0) r = Received{{}, 0, false, r.times + 1};
      r.values.insert(r.values.end(), values.begin(), values.end());
      ++r.parts;
      r.complete = order.final_part;
    }
  }

  const uint32_t width_;
  PartitionCounters counters_;
  PartitionTable table_;
  std::map<int, std::map<int64_t, Received>> got_;
  std::deque<Hold> holds_;
  std::vector<TableOutcome> outcomes_;
};

PartitionTable::Options Opts(int workers, bool deterministic = false, uint64_t part_bytes = 0,
                             bool holds = false) {
  PartitionTable::Options o;
  o.num_workers = workers;
  o.deterministic = deterministic;
  o.pipeline_part_bytes = part_bytes;
  o.holds_pushes = holds;
  return o;
}

std::vector<float> Rows(const std::vector<float>& table, const std::vector<uint64_t>& rows,
                        uint32_t width) {
  std::vector<float> out;
  for (uint64_t r : rows)
    out.insert(out.end(), table.begin() + r * width, table.begin() + (r + 1) * width);
  return out;
}

// Every worker's updates of every clock, summed exactly (integers), whatever
// the mode: each push holds exactly the clocks below its own.
struct SumCase {
  const char* name;
  PartitionTable::Options options;
};

TEST(PartitionTableTest, PushesHoldExactSumsOfEveryWorkerAndClockBelowThem) {
  const SumCase cases[] = {
      {"plain", Opts(3)},
      {"deterministic", Opts(3, /*deterministic=*/true)},
      {"held pushes", Opts(3, false, 0, /*holds=*/true)},
      {"pipelined", Opts(3, false, /*part_bytes=*/8)},
  };
  constexpr uint32_t kWidth = 2;
  const std::vector<std::vector<uint64_t>> subs = {
      {0, 1, 2, 3, 4, 5}, {1, 3, 5}, {0, 1, 2, 3, 4, 5}};
  for (const SumCase& c : cases) {
    SCOPED_TRACE(c.name);
    Rig rig(c.options, 6, kWidth);
    for (int w = 0; w < 3; ++w) EXPECT_FALSE(rig.Subscribe(w, subs[w]).dropped);
    std::vector<float> table(6 * kWidth, 0.0f);
    for (int64_t clock = 0; clock < 5; ++clock) {
      for (int w = 0; w < 3; ++w) {
        // Each worker updates the rows it reads, in two parts for worker 0.
        std::vector<float> deltas;
        for (uint64_t r : subs[w]) {
          deltas.push_back(static_cast<float>((w + 1) * 100 + clock * 10 + r));
          for (uint32_t j = 0; j < kWidth; ++j) table[r * kWidth + j] += deltas.back();
        }
        TableOutcome out;
        if (w == 0) {
          const std::vector<uint64_t> a(subs[w].begin(), subs[w].begin() + 3);
          const std::vector<uint64_t> b(subs[w].begin() + 3, subs[w].end());
          EXPECT_FALSE(rig.Update(w, clock, a, {deltas.begin(), deltas.begin() + 3}, 0,
                                  transport::kFlagMore, clock)
                           .dropped);
          out = rig.Update(w, clock, b, {deltas.begin() + 3, deltas.end()}, 3, 0, clock);
        } else {
          out = rig.Update(w, clock, subs[w], deltas, 0, 0, clock);
        }
        EXPECT_FALSE(out.dropped) << out.drop_what;
        EXPECT_EQ(out.advanced_to, w == 2 ? clock + 1 : 0);
      }
      EXPECT_EQ(rig.table().min_clock(), clock + 1);
      EXPECT_EQ(rig.table().values(), table);
      for (int w = 0; w < 3; ++w) {
        const Received& r = rig.got(w)[clock + 1];
        EXPECT_TRUE(r.complete) << "worker " << w << " clock " << clock;
        EXPECT_EQ(r.values, Rows(table, subs[w], kWidth)) << "worker " << w << " clock " << clock;
        // Pushes in place stay exactly as they were sent.
        for (const Hold& h : rig.holds())
          EXPECT_EQ(std::vector<float>(h.data, h.data + h.sent.size()), h.sent);
      }
      rig.ReleaseAll();
    }
    EXPECT_EQ(rig.counters().updates_applied.load(), 15);
    EXPECT_EQ(rig.counters().rows_applied.load(), 5 * (6 + 3 + 6));
  }
}

// SSP: a worker ahead of the minimum adds deltas of later clocks; they stay
// pending, out of the rows and of every push, until the minimum passes them.
TEST(PartitionTableTest, DeltasOfClocksAheadOfTheMinimumStayPendingUntilItPassesThem) {
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "plain");
    Rig rig(Opts(2, deterministic), 2, 1);
    rig.Subscribe(0, {0, 1});
    rig.Subscribe(1, {0, 1});
    // Worker 0 runs three clocks ahead.
    for (int64_t clock = 0; clock < 3; ++clock)
      EXPECT_EQ(rig.Update(0, clock, {0, 1}, {1.0f, 10.0f}).advanced_to, 0);
    EXPECT_EQ(rig.table().values(), (std::vector<float>{0, 0}));
    EXPECT_TRUE(rig.got(0).empty());
    // Worker 1 completes clock 0: exactly clock 0 of both.
    EXPECT_EQ(rig.Update(1, 0, {1}, {100.0f}).advanced_to, 1);
    EXPECT_EQ(rig.got(0)[1].values, (std::vector<float>{1, 110}));
    EXPECT_EQ(rig.got(1)[1].values, (std::vector<float>{1, 110}));
    // Worker 1's update of clock 1 (direct outside deterministic mode)
    // joins worker 0's pending one only when clock 1 completes.
    EXPECT_EQ(rig.Update(1, 1, {0}, {1000.0f}).advanced_to, 2);
    EXPECT_EQ(rig.got(1)[2].values, (std::vector<float>{1002, 120}));
    EXPECT_EQ(rig.Update(1, 2, {}, {}).advanced_to, 3);
    EXPECT_EQ(rig.got(0)[3].values, (std::vector<float>{1003, 130}));
    EXPECT_GT(rig.counters().fold_bytes.load(), 0);
  }
}

// Deterministic mode adds each clock's deltas in rank order: the rows are
// bitwise the same whatever order the updates arrive in. The deltas are
// chosen so that float addition in another order gives other bits (checked
// on the plain mode, which adds in arrival order).
TEST(PartitionTableTest, DeterministicModeIsBitwiseEqualWhateverTheArrivalOrder) {
  // By worker, per clock.
  const std::vector<std::vector<float>> deltas = {{1e8f, 1.0f}, {1.0f, -1e8f}, {-1e8f, 1e8f}};
  std::vector<int> order = {0, 1, 2};
  // The rows after each clock, per arrival order.
  std::map<bool, std::vector<std::vector<float>>> results;
  do {
    for (bool deterministic : {true, false}) {
      Rig rig(Opts(3, deterministic), 1, 1);
      for (int w = 0; w < 3; ++w) rig.Subscribe(w, {0});
      std::vector<float> after;
      for (int64_t clock = 0; clock < 2; ++clock) {
        for (int w : order) rig.Update(w, clock, {0}, {deltas[w][clock]});
        after.push_back(rig.table().values()[0]);
      }
      results[deterministic].push_back(after);
    }
  } while (std::next_permutation(order.begin(), order.end()));
  // Rank order: ((x + d0) + d1) + d2, clock by clock.
  std::vector<float> expect;
  float x = 0.0f;
  for (int64_t clock = 0; clock < 2; ++clock) {
    for (int w = 0; w < 3; ++w) x += deltas[w][clock];
    expect.push_back(x);
  }
  for (const std::vector<float>& r : results[true]) {
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(std::memcmp(r.data(), expect.data(), 2 * sizeof(float)), 0)
        << r[0] << ", " << r[1] << " vs " << expect[0] << ", " << expect[1];
  }
  const auto& plain = results[false];
  EXPECT_TRUE(std::any_of(plain.begin(), plain.end(), [&](const std::vector<float>& r) {
    return r != plain.front();
  })) << "the deltas do not tell orders apart";
}

// Workers with equal subscriptions form one push group (one order, one
// payload); each gets exactly its rows. Subscriptions in parts, a repeated
// one, a different one and a late one.
TEST(PartitionTableTest, EqualSubscriptionsShareAPushAndEachWorkerGetsItsRows) {
  Rig rig(Opts(4), 4, 2);
  const std::vector<std::vector<uint64_t>> subs = {{1, 2}, {0, 1}, {0, 1, 3}, {0, 1}};
  EXPECT_FALSE(rig.Subscribe(3, subs[3]).dropped);
  EXPECT_FALSE(rig.Subscribe(0, subs[0]).dropped);
  EXPECT_FALSE(rig.Subscribe(1, {0}, 0, /*more=*/true).dropped);  // in two parts
  EXPECT_FALSE(rig.Subscribe(1, {1}, 1).dropped);
  EXPECT_FALSE(rig.Subscribe(2, subs[2]).dropped);
  EXPECT_EQ(rig.table().push_groups(), (std::vector<std::vector<int>>{{3, 1}, {0}, {2}}));
  // The same subscription again is harmless; another one is dropped.
  EXPECT_FALSE(rig.Subscribe(0, subs[0]).dropped);
  const TableOutcome other = rig.Subscribe(0, {2});
  EXPECT_TRUE(other.dropped);
  EXPECT_EQ(other.drop_reason, server::kDropDuplicateSubscribe);
  std::vector<float> table(8, 0.0f);
  for (int w = 0; w < 4; ++w) {
    std::vector<float> d;
    for (uint64_t r : subs[w]) {
      d.push_back(static_cast<float>((w + 1) * (r + 1)));
      table[r * 2] += d.back();
      table[r * 2 + 1] += d.back();
    }
    const TableOutcome out = rig.Update(w, 0, subs[w], d);
    if (w < 3) continue;
    ASSERT_EQ(out.pushes.size(), 3u);  // one per group
    EXPECT_EQ(out.pushes[0].workers, (std::vector<int>{3, 1}));
  }
  for (int w = 0; w < 4; ++w) EXPECT_EQ(rig.got(w)[1].values, Rows(table, subs[w], 2));
  // Past the start clock a subscription comes too late.
  Rig late(Opts(2), 2, 1);
  late.Subscribe(0, {0});
  late.Update(0, 0, {0}, {1.0f});
  late.Update(1, 0, {}, {});
  const TableOutcome out = late.Subscribe(1, {0});
  EXPECT_TRUE(out.dropped);
  EXPECT_EQ(out.drop_reason, server::kDropLateSubscribe);
}

// A push sent from the rows in place holds them: the next write goes into a
// copy and the push's bytes stay as they were; once released, writes go in
// place again.
TEST(PartitionTableTest, WritesGoIntoACopyWhileAPushHoldsTheRows) {
  Rig rig(Opts(1), 3, 2);
  rig.Subscribe(0, {0, 1, 2});
  rig.Update(0, 0, {0, 1, 2}, {1.0f, 2.0f, 3.0f});
  ASSERT_EQ(rig.holds().size(), 1u);  // consecutive rows: in place
  const std::vector<float> pushed = rig.holds().front().sent;
  const SharedRows* before = rig.table().shared_rows().get();
  EXPECT_EQ(rig.holds().front().rows.get(), before);
  EXPECT_EQ(rig.counters().push_copy_bytes.load(), 0);
  // Clock 1 (direct: added straight into the rows) while push 1 is held.
  rig.Update(0, 1, {0, 2}, {10.0f, 30.0f});
  const Hold& held = rig.holds().front();
  EXPECT_EQ(std::vector<float>(held.data, held.data + held.sent.size()), pushed);
  EXPECT_NE(rig.table().shared_rows().get(), before);
  EXPECT_EQ(rig.counters().push_copy_bytes.load(), 6 * 4);
  EXPECT_EQ(rig.table().values(), (std::vector<float>{11, 11, 2, 2, 33, 33}));
  rig.ReleaseAll();
  // No hold: the write of clock 2 goes in place.
  rig.Update(0, 2, {1}, {5.0f});  // pushed (held again) at the advance
  rig.ReleaseAll();
  const SharedRows* now = rig.table().shared_rows().get();
  rig.Update(0, 3, {1}, {5.0f});
  EXPECT_EQ(rig.table().shared_rows().get(), now);
  EXPECT_EQ(rig.counters().push_copy_bytes.load(), 6 * 4);  // only clock 1's
}

// Held pushes: kept until every subscriber acknowledged them; a resync below
// the held clock gets the held push again, exactly, although the rows have
// moved on; an acknowledgement of a push not sent is dropped.
TEST(PartitionTableTest, AHeldPushIsPushedAgainExactlyOnResyncUntilEveryoneAcknowledged) {
  Rig rig(Opts(2, false, 0, /*holds=*/true), 2, 1);
  rig.Subscribe(0, {0, 1});
  rig.Subscribe(1, {0, 1});
  rig.Update(0, 0, {0, 1}, {1.0f, 2.0f});
  rig.Update(1, 0, {0, 1}, {3.0f, 4.0f});
  rig.ReleaseAll();  // ZeroMQ sent push 1
  ASSERT_TRUE(rig.table().held());
  EXPECT_EQ(rig.table().held_clock(), 1);
  EXPECT_FALSE(rig.Ack(0, 1).dropped);
  // Worker 0 moves the rows on (into a copy: push 1 is held for worker 1).
  rig.Update(0, 1, {0}, {100.0f}, 0, 0, /*aux=*/1);
  EXPECT_EQ(rig.table().values(), (std::vector<float>{104, 6}));
  EXPECT_EQ(rig.counters().push_copy_bytes.load(), 2 * 4);
  // Worker 1 lost push 1.
  const TableOutcome out = rig.Ack(1, 0, MsgType::kResync);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(out.pushes[0].workers, std::vector<int>{1});
  EXPECT_EQ(out.pushes[0].source, rig.table().held());
  EXPECT_EQ(rig.got(1)[1].values, (std::vector<float>{4, 6}));
  EXPECT_EQ(rig.got(1)[1].times, 2);
  EXPECT_EQ(rig.counters().repushes.load(), 1);
  EXPECT_EQ(rig.counters().resyncs_received.load(), 1);
  const TableOutcome lie = rig.Ack(1, 2);
  EXPECT_TRUE(lie.dropped);
  EXPECT_EQ(lie.drop_reason, server::kDropClock);
  EXPECT_FALSE(rig.Ack(1, 1).dropped);
  EXPECT_FALSE(rig.table().held());
  // Nothing held any more: a resync cannot get it again (the channel logs).
  EXPECT_TRUE(rig.Ack(1, 0, MsgType::kResync).unheld_resync);
}

// Pipelined pushes: subscribed rows below the frontier (rows every worker
// has updated for the clock) leave early as parts of the next push, and the
// clock's later parts write above them without a copy.
TEST(PartitionTableTest, RowsBelowTheFrontierLeaveEarlyAndStayIntact) {
  Rig rig(Opts(2, false, /*part_bytes=*/4), 8, 1);
  const std::vector<uint64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  rig.Subscribe(0, all);
  rig.Subscribe(1, all);
  const std::vector<float> ones(8, 1.0f);
  rig.Update(0, 0, all, ones);
  rig.Update(1, 0, all, ones);  // min 1; the start clock sends no early parts
  rig.ReleaseAll();
  EXPECT_EQ(rig.counters().early_push_parts.load(), 0);
  // Clock 1 in parts: worker 0 rows 0-3, worker 1 rows 0-1: frontier row 2.
  const uint32_t more = transport::kFlagMore;
  EXPECT_TRUE(rig.Update(0, 1, {0, 1, 2, 3}, {1, 1, 1, 1}, 0, more).pushes.empty());
  const TableOutcome first = rig.Update(1, 1, {0, 1}, {1, 1}, 0, more);
  ASSERT_EQ(first.pushes.size(), 1u);
  EXPECT_EQ(first.pushes[0].from, 0u);
  EXPECT_EQ(first.pushes[0].to, 2u);
  EXPECT_FALSE(first.pushes[0].final_part);
  EXPECT_EQ(first.pushes[0].clock, 2);
  // Worker 1 finishes: worker 0's rows 0-3 are the frontier.
  const TableOutcome second = rig.Update(1, 1, {2, 3, 4, 5, 6, 7}, {1, 1, 1, 1, 1, 1}, 2);
  ASSERT_EQ(second.pushes.size(), 1u);
  EXPECT_EQ(second.pushes[0].from, 2u);
  EXPECT_EQ(second.pushes[0].to, 4u);
  // Worker 0's last part writes above the held parts: no copy.
  const TableOutcome last = rig.Update(0, 1, {4, 5, 6, 7}, {1, 1, 1, 1}, 4);
  EXPECT_EQ(last.advanced_to, 2);
  EXPECT_EQ(rig.counters().push_copy_bytes.load(), 0);
  EXPECT_EQ(rig.counters().early_push_parts.load(), 2);
  for (int w = 0; w < 2; ++w) {
    EXPECT_TRUE(rig.got(w)[2].complete);
    EXPECT_EQ(rig.got(w)[2].parts, 3);
    EXPECT_EQ(rig.got(w)[2].values, std::vector<float>(8, 4.0f));
  }
  for (const Hold& h : rig.holds())
    EXPECT_EQ(std::vector<float>(h.data, h.data + h.sent.size()), h.sent);
  // The next clock writes below what the parts hold: into a copy.
  rig.Update(0, 2, {0}, {1});
  EXPECT_EQ(rig.counters().push_copy_bytes.load(), 8 * 4);
  for (const Hold& h : rig.holds())
    EXPECT_EQ(std::vector<float>(h.data, h.data + h.sent.size()), h.sent);
}

// A worker that resyncs after early parts of the next push went to its
// group (they may be lost) gets no more early parts of it, and the push
// whole, alone, at the advance.
TEST(PartitionTableTest, AWorkerThatResyncsAfterEarlyPartsGetsThePushWhole) {
  Rig rig(Opts(2, false, /*part_bytes=*/4, /*holds=*/true), 8, 1);
  const std::vector<uint64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  rig.Subscribe(0, all);
  rig.Subscribe(1, all);
  rig.Update(0, 0, all, std::vector<float>(8, 1.0f));
  rig.Update(1, 0, all, std::vector<float>(8, 1.0f));
  rig.Ack(0, 1);
  rig.Ack(1, 1);
  EXPECT_FALSE(rig.table().held());
  const uint32_t more = transport::kFlagMore;
  rig.Update(0, 1, {0, 1, 2, 3}, {1, 1, 1, 1}, 0, more, 1);
  ASSERT_EQ(rig.Update(1, 1, {0, 1}, {1, 1}, 0, more, 1).pushes.size(), 1u);  // rows 0-1 early
  // Worker 1's connection came back: it has push 1, maybe not the early part.
  const TableOutcome resync = rig.Ack(1, 1, MsgType::kResync);
  EXPECT_TRUE(resync.pushes.empty());
  EXPECT_FALSE(resync.unheld_resync);
  const TableOutcome early = rig.Update(1, 1, {2, 3, 4, 5, 6, 7}, {1, 1, 1, 1, 1, 1}, 2, 0, 1);
  ASSERT_EQ(early.pushes.size(), 1u);
  EXPECT_EQ(early.pushes[0].workers, std::vector<int>{0});
  const TableOutcome last = rig.Update(0, 1, {4, 5, 6, 7}, {1, 1, 1, 1}, 4, 0, 1);
  ASSERT_EQ(last.pushes.size(), 2u);
  EXPECT_EQ(last.pushes[0].workers, std::vector<int>{0});
  EXPECT_EQ(last.pushes[0].from, 4u);
  EXPECT_EQ(last.pushes[1].workers, std::vector<int>{1});
  EXPECT_EQ(last.pushes[1].from, 0u);
  EXPECT_EQ(last.pushes[1].to, 8u);
  EXPECT_TRUE(last.pushes[1].final_part);
  EXPECT_EQ(rig.got(0)[2].values, std::vector<float>(8, 4.0f));
  EXPECT_EQ(rig.got(0)[2].parts, 3);
}

// Frames that do not fit the table's state are dropped, with the reason;
// repeats are skipped and counted, and a restarted message in parts applies
// only the rows past what was applied.
TEST(PartitionTableTest, UnfitUpdatesAreDroppedAndRepeatsSkipped) {
  struct Step {
    int worker;
    int64_t clock;
    std::vector<uint64_t> rows;
    uint64_t offset;
    uint32_t flags;
    int64_t aux;
    bool dropped;
    DropReason reason;
  };
  const uint32_t more = transport::kFlagMore;
  const Step steps[] = {
      {0, 1, {0}, 0, 0, 0, true, server::kDropClock},    // a gap
      {0, 0, {0}, 0, 0, 1, true, server::kDropClock},    // acknowledges push 1: not sent
      {0, 0, {1}, 1, 0, 0, true, server::kDropFraming},  // a part without its start
      {0, 0, {0, 1}, 0, more, 0, false, server::kDropFraming},
      {0, 0, {1}, 3, 0, 0, true, server::kDropFraming},         // out of sequence
      {0, 0, {0, 1, 2}, 0, 0, 0, false, server::kDropFraming},  // restarts: rows 0, 1 skipped
      {0, 0, {0, 1, 2}, 0, 0, 0, false, server::kDropFraming},  // a repeat: skipped
      {1, 0, {2}, 0, 0, 0, false, server::kDropFraming},
  };
  Rig rig(Opts(2), 3, 1);
  for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); ++i) {
    const Step& s = steps[i];
    const TableOutcome out =
        rig.Update(s.worker, s.clock, s.rows, std::vector<float>(s.rows.size(), 1.0f), s.offset,
                   s.flags, s.aux);
    EXPECT_EQ(out.dropped, s.dropped) << "step " << i << ": " << out.drop_what;
    if (s.dropped) {
      EXPECT_EQ(out.drop_reason, s.reason) << "step " << i;
    }
  }
  EXPECT_EQ(rig.table().min_clock(), 1);
  EXPECT_EQ(rig.table().values(), (std::vector<float>{1, 1, 2}));
  EXPECT_EQ(rig.counters().repeated_rows_skipped.load(), 2 + 3);
}

// A checkpoint request, the advance the checkpoint waits for, a restored
// table's push at subscription, and the stall report.
TEST(PartitionTableTest, RestoredRowsArePushedAtSubscriptionAndStallsNamed) {
  Rig rig(Opts(2), 2, 1);
  rig.table().Restore({5.0f, 6.0f}, 4);
  EXPECT_EQ(rig.table().min_clock(), 4);
  EXPECT_EQ(rig.table().clock(1), 4);
  rig.Subscribe(0, {0, 1});
  EXPECT_EQ(rig.got(0)[4].values, (std::vector<float>{5, 6}));
  rig.Subscribe(1, {1});
  EXPECT_EQ(rig.got(1)[4].values, (std::vector<float>{6}));
  const TableOutcome asked = rig.Update(0, 4, {0}, {1.0f}, 0, transport::kFlagCheckpoint);
  EXPECT_EQ(asked.checkpoint_request, 5);
  // Worker 1 is late: named once, after `after`.
  const auto now = std::chrono::steady_clock::now() + std::chrono::hours(1);
  std::chrono::steady_clock::duration waited{};
  EXPECT_TRUE(
      rig.table()
          .TakeStalledWorkers(std::chrono::steady_clock::now(), std::chrono::hours(1), &waited)
          .empty());
  EXPECT_EQ(rig.table().TakeStalledWorkers(now, std::chrono::seconds(1), &waited),
            std::vector<int>{1});
  EXPECT_GE(waited, std::chrono::hours(1));
  EXPECT_TRUE(rig.table().TakeStalledWorkers(now, std::chrono::seconds(1), &waited).empty());
  EXPECT_EQ(rig.Update(1, 4, {}, {}).advanced_to, 5);
  EXPECT_EQ(rig.table().values(), (std::vector<float>{6, 6}));
}

// Machine-level aggregation: only the machines' leaders (workers 0 and 2 of
// 4) participate. The minimum clock follows them alone, and a frame from
// another worker is dropped as from a wrong sender, naming it.
TEST(PartitionTableTest, OnlyParticipantsHoldTheMinimumBack) {
  PartitionTable::Options o;
  o.num_workers = 4;
  o.participants = {true, false, true, false};
  Rig rig(o, 2, 1);
  ASSERT_FALSE(rig.Subscribe(0, {0, 1}).dropped);
  ASSERT_FALSE(rig.Subscribe(2, {0, 1}).dropped);
  EXPECT_EQ(rig.Update(0, 0, {0, 1}, {1.0f, 2.0f}).advanced_to, 0);
  // Worker 2 completes clock 0: 1 and 3 do not hold the minimum at 0.
  EXPECT_EQ(rig.Update(2, 0, {0}, {10.0f}).advanced_to, 1);
  EXPECT_EQ(rig.table().min_clock(), 1);
  EXPECT_EQ(rig.table().values(), (std::vector<float>{11, 2}));
  for (int w : {1, 3}) {
    const TableOutcome sub = rig.Subscribe(w, {0});
    EXPECT_TRUE(sub.dropped);
    EXPECT_EQ(sub.drop_reason, server::kDropSender);
    EXPECT_NE(sub.drop_what.find("worker " + std::to_string(w)), std::string::npos)
        << sub.drop_what;
    EXPECT_TRUE(rig.Update(w, 1, {0}, {5.0f}).dropped);
    EXPECT_TRUE(rig.Ack(w, 1).dropped);
  }
  EXPECT_EQ(rig.table().values(), (std::vector<float>{11, 2}));
  // A restored table starts its participants at the checkpoint's clock.
  Rig restored(o, 2, 1);
  restored.table().Restore({1.0f, 1.0f}, 5);
  EXPECT_EQ(restored.table().min_clock(), 5);
  ASSERT_FALSE(restored.Subscribe(0, {0}).dropped);
  ASSERT_FALSE(restored.Subscribe(2, {0}).dropped);
  EXPECT_EQ(restored.Update(0, 5, {0}, {1.0f}).advanced_to, 0);
  EXPECT_EQ(restored.Update(2, 5, {0}, {1.0f}).advanced_to, 6);
}

}  // namespace
}  // namespace geeps
