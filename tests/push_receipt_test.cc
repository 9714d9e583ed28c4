// client::PushReceipt, where a worker's channel puts each push message of a
// table from one partition, driven by a table of message sequences for a
// slice of 6 rows of width 1: pushes whole and in parts of 2 rows, written
// into the cache or collected, with parts lost, repeated and reordered,
// stale pushes, early ends and restarts. The harness does what
// CommChannel::HandlePush does with each verdict (the stale checks, the
// copies, the `installing` mark) on a host vector.
#include "client/push_receipt.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "test_names.h"

namespace geeps::client {
namespace {

using transport::WireHeader;

constexpr uint32_t kRows = 6;

struct Msg {
  int64_t clock;
  uint64_t offset;
  uint64_t count;
  bool more;
};

// A push of `clock` whole, or its parts of 2 rows (indices into them).
Msg Whole(int64_t clock) { return {clock, 0, kRows, false}; }
Msg Part(int64_t clock, int i) { return {clock, uint64_t(2 * i), 2, i < 2}; }

struct Case {
  std::string name;
  std::vector<Msg> msgs;
  bool into_cache = true;          // no read-my-writes, no in-place read open
  int64_t age = 0;                 // the slice's push before the case
  std::vector<int64_t> installed;  // clocks installed, in order
  int drops = 0;
  int stale = 0;
  bool installing = false;  // at the end (a torn push written into the cache)
  int64_t rows_of = 0;      // the clock whose values the cache holds (0: none yet)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct Slice {
  int64_t age = 0;
  bool installing = false;
  std::vector<float> cache = std::vector<float>(kRows, 0.0f);
  std::vector<int64_t> installed;
  int drops = 0;
  int stale = 0;

  void Finish(int64_t clock) {
    age = clock;
    installing = false;
    installed.push_back(clock);
  }
};

// Row r of the push of `clock` holds clock * 100 + r.
std::vector<float> Values(const Msg& m) {
  std::vector<float> v;
  for (uint64_t r = m.offset; r < m.offset + m.count; ++r) v.push_back(float(m.clock * 100 + r));
  return v;
}

void Handle(PushReceipt& receipt, const Msg& msg, bool into_cache, Slice* s) {
  WireHeader h;
  h.type = static_cast<uint16_t>(transport::MsgType::kPush);
  h.clock = msg.clock;
  h.offset = msg.offset;
  h.row_count = msg.count;
  h.row_width = 1;
  h.flags = msg.more ? transport::kFlagMore : 0;
  const std::vector<float> payload = Values(msg);
  if (receipt.Starts(h)) {
    if (msg.clock <= s->age) {
      ++s->stale;
      return;
    }
    receipt.Start(into_cache);
    if (into_cache) s->installing = true;
  }
  const PushReceipt::Verdict v = receipt.Accept(h, kRows, 1, payload.data());
  switch (v.step) {
    case PushReceipt::Step::kDrop:
      EXPECT_NE(std::string(v.why), "");
      ++s->drops;
      return;
    case PushReceipt::Step::kWriteToCache:
      std::copy(payload.begin(), payload.end(), s->cache.begin() + msg.offset);
      if (v.completes) s->Finish(msg.clock);
      return;
    case PushReceipt::Step::kCollected:
      if (!v.completes) return;
      if (msg.clock <= s->age) {
        ++s->stale;
        return;
      }
      s->cache = receipt.rows();
      s->Finish(msg.clock);
      return;
    case PushReceipt::Step::kWhole:
      if (msg.clock <= s->age) {
        ++s->stale;
        return;
      }
      s->cache = payload;
      s->Finish(msg.clock);
      return;
  }
}

std::vector<Case> Cases() {
  return {
      {.name = "a whole push", .msgs = {Whole(1)}, .installed = {1}, .rows_of = 1},
      {.name = "parts into the cache",
       .msgs = {Part(1, 0), Part(1, 1), Part(1, 2)},
       .installed = {1},
       .rows_of = 1},
      {.name = "parts collected",
       .msgs = {Part(1, 0), Part(1, 1), Part(1, 2)},
       .into_cache = false,
       .installed = {1},
       .rows_of = 1},
      // The last part is refused: the slice stays marked (torn).
      {.name = "a lost middle part into the cache",
       .msgs = {Part(1, 0), Part(1, 2)},
       .drops = 1,
       .installing = true},
      {.name = "a lost middle part collected",
       .msgs = {Part(1, 0), Part(1, 2)},
       .into_cache = false,
       .drops = 1},
      {.name = "a repeated middle part",
       .msgs = {Part(1, 0), Part(1, 1), Part(1, 1), Part(1, 2)},
       .installed = {1},
       .drops = 1,
       .rows_of = 1},
      // The first and the last part come too early and are refused; the
      // middle one is taken, but the push never completes.
      {.name = "parts reordered",
       .msgs = {Part(1, 1), Part(1, 0), Part(1, 2), Part(1, 1)},
       .into_cache = false,
       .drops = 2},
      // Its later parts are refused too: nothing of it reaches the cache.
      {.name = "a stale push in parts",
       .msgs = {Part(3, 0), Part(3, 1), Part(3, 2)},
       .age = 3,
       .drops = 2,
       .stale = 1},
      {.name = "a stale whole push", .msgs = {Whole(2)}, .age = 2, .stale = 1},
      {.name = "a last part that ends early",
       .msgs = {Part(1, 0), {1, 2, 2, false}},
       .into_cache = false,
       .drops = 1},
      {.name = "a whole push mends a torn one",
       .msgs = {Part(1, 0), Part(1, 2), Whole(2)},
       .installed = {2},
       .drops = 1,
       .rows_of = 2},
      // Push 2 starts while push 1 is in progress: push 1 is abandoned.
      {.name = "a new push abandons the one in progress",
       .msgs = {Part(1, 0), Part(2, 0), Part(1, 1), Part(2, 1), Part(2, 2)},
       .into_cache = false,
       .installed = {2},
       .drops = 1,
       .rows_of = 2},
      {.name = "a last part repeated after the push is whole",
       .msgs = {Part(1, 0), Part(1, 1), Part(1, 2), Part(1, 2)},
       .into_cache = false,
       .installed = {1},
       .drops = 1,
       .rows_of = 1},
      {.name = "pushes one after another",
       .msgs = {Part(1, 0), Part(1, 1), Part(1, 2), Whole(2), Part(3, 0), Part(3, 1), Part(3, 2)},
       .installed = {1, 2, 3},
       .rows_of = 3},
  };
}

class PushReceiptTest : public ::testing::TestWithParam<Case> {};

TEST_P(PushReceiptTest, PartsInstallsAndDrops) {
  const Case& c = GetParam();
  PushReceipt receipt;
  Slice s;
  s.age = c.age;
  for (const Msg& m : c.msgs) Handle(receipt, m, c.into_cache, &s);
  EXPECT_EQ(s.installed, c.installed);
  EXPECT_EQ(s.drops, c.drops);
  EXPECT_EQ(s.stale, c.stale);
  EXPECT_EQ(s.installing, c.installing);
  if (c.rows_of > 0) {
    EXPECT_EQ(s.cache, Values(Whole(c.rows_of)));
  } else if (!c.installing) {
    EXPECT_EQ(s.cache, std::vector<float>(kRows, 0.0f));  // untouched
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return ::geeps::testing::CamelCaseName(info.param.name);
}

INSTANTIATE_TEST_SUITE_P(Sequences, PushReceiptTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace geeps::client
