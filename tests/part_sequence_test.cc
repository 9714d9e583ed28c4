// transport::PartSequence, the one rule for messages in parts, driven by a
// table of part sequences: in order, lost, repeated, reordered, interleaved
// with another clock or type, restarted, and rows out of order.
#include "transport/part_sequence.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "test_names.h"

namespace geeps::transport {
namespace {

using Restart = PartSequence::Restart;
using Verdict = PartSequence::Verdict;

constexpr uint16_t kUpdateType = static_cast<uint16_t>(MsgType::kUpdate);
constexpr uint16_t kSubscribeType = static_cast<uint16_t>(MsgType::kSubscribe);

// One part: clock, offset, rows in it, more parts follow; its row ids run
// from `first_row` (none when negative).
struct Part {
  int64_t clock;
  uint64_t offset, count;
  bool more;
  int64_t first_row = -1;
  uint16_t type = kUpdateType;
};

struct Case {
  std::string name;
  Restart restart;
  std::vector<Part> parts;
  std::vector<Verdict> expected;
  bool active_after = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Parts of one 30-row message of clock 4 in three parts of ten rows (row ids
// 100..129), and the same as a resend.
const Part kA{4, 0, 10, true, 100}, kB{4, 10, 10, true, 110}, kC{4, 20, 10, false, 120};

std::vector<Case> Cases() {
  constexpr Verdict kW = Verdict::kWhole, kF = Verdict::kFirst, kM = Verdict::kMiddle,
                    kL = Verdict::kLast, kX = Verdict::kOutOfSequence;
  const Restart any = Restart::kAnyTime, refused = Restart::kRefused;
  return {
      {"whole", any, {{4, 0, 30, false, 100}}, {kW}},
      {"in order", any, {kA, kB, kC}, {kF, kM, kL}},
      {"in order, refusing restarts", refused, {kA, kB, kC}, {kF, kM, kL}},
      {"two messages back to back", any, {kA, kB, kC, {5, 0, 30, false, 100}}, {kF, kM, kL, kW}},
      {"an empty first part: the next starts at offset 0 again",
       any,
       {{4, 0, 0, true}, {4, 0, 5, false}},
       {kF, kW}},
      {"lost middle part: the rest is refused", any, {kA, kC}, {kF, kX}, true},
      {"lost first part", any, {kB, kC}, {kX, kX}},
      {"lost last part, then the next clock starts",
       any,
       {kA, kB, {5, 0, 30, false, 100}},
       {kF, kM, kW}},
      {"repeated part changes nothing", any, {kA, kA, kB, kB, kC}, {kF, kF, kM, kX, kL}},
      {"repeated part, refusing restarts", refused, {kA, kA, kB, kB, kC}, {kF, kX, kM, kX, kL}},
      {"repeated last part", any, {kA, kB, kC, kC}, {kF, kM, kL, kX}},
      {"reordered parts", any, {kA, kC, kB}, {kF, kX, kM}, true},
      {"reordered first parts", any, {kB, kA, kC}, {kX, kF, kX}, true},
      {"another clock mid-message", any, {kA, {5, 10, 10, true, 110}, kB, kC}, {kF, kX, kM, kL}},
      {"another type mid-message",
       any,
       {kA, {4, 10, 10, true, 110, kSubscribeType}, kB, kC},
       {kF, kX, kM, kL}},
      {"restart at offset 0 (resent after a loss)",
       any,
       {kA, kB, kA, kB, kC},
       {kF, kM, kF, kM, kL}},
      {"restart refused while a message is in progress",
       refused,
       {kA, kB, kA, kC},
       {kF, kM, kX, kL}},
      {"rows not after the previous part's",
       any,
       {kA, {4, 10, 10, true, 105}, kB, kC},
       {kF, kX, kM, kL}},
      {"parts without row ids",
       any,
       {{4, 0, 10, true}, {4, 10, 10, true}, {4, 20, 10, false}},
       {kF, kM, kL}},
      {"a gap in offsets", any, {kA, {4, 11, 9, true, 111}}, {kF, kX}, true},
  };
}

class PartSequenceTableTest : public ::testing::TestWithParam<Case> {};

TEST_P(PartSequenceTableTest, Verdicts) {
  const Case& c = GetParam();
  ASSERT_EQ(c.parts.size(), c.expected.size());
  PartSequence seq(c.restart);
  for (size_t i = 0; i < c.parts.size(); ++i) {
    const Part& p = c.parts[i];
    WireHeader h;
    h.type = p.type;
    h.clock = p.clock;
    h.offset = p.offset;
    h.row_count = p.count;
    h.flags = p.more ? kFlagMore : 0;
    PartSequence::Rows rows;
    if (p.first_row >= 0 && p.count > 0)
      rows = {true, static_cast<uint64_t>(p.first_row),
              static_cast<uint64_t>(p.first_row) + p.count - 1};
    EXPECT_EQ(static_cast<int>(seq.Accept(h, rows)), static_cast<int>(c.expected[i]))
        << "part " << i;
  }
  EXPECT_EQ(seq.active(), c.active_after);
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return ::geeps::testing::CamelCaseName(info.param.name);
}

INSTANTIATE_TEST_SUITE_P(Sequences, PartSequenceTableTest, ::testing::ValuesIn(Cases()), CaseName);

TEST(PartSequenceTest, ReportsTheMessageInProgress) {
  PartSequence seq;
  WireHeader h;
  h.type = kUpdateType;
  h.clock = 9;
  h.row_count = 4;
  h.flags = kFlagMore;
  ASSERT_EQ(static_cast<int>(seq.Accept(h, {true, 10, 13})), static_cast<int>(Verdict::kFirst));
  EXPECT_TRUE(seq.active());
  EXPECT_EQ(seq.type(), kUpdateType);
  EXPECT_EQ(seq.clock(), 9);
  EXPECT_EQ(seq.next(), 4u);
  EXPECT_EQ(seq.last_row(), 13u);
  seq.Reset();
  EXPECT_FALSE(seq.active());
  EXPECT_TRUE(PartSequence::Completes(Verdict::kWhole));
  EXPECT_TRUE(PartSequence::Completes(Verdict::kLast));
  EXPECT_FALSE(PartSequence::Completes(Verdict::kMiddle));
}

}  // namespace
}  // namespace geeps::transport
