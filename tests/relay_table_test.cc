// relay::RelayTable, the machine relay's summing state without sockets,
// driven by a table of message sequences from two members (workers 4 and
// 5, rows [0, 10), one float per row): sums in rank and clock order,
// repeated, lost, reordered and out-of-order messages and parts, and the
// subscriptions' union.
#include "relay/relay_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "test_names.h"

namespace geeps::relay {
namespace {

using transport::DecodedMessage;
using transport::MsgType;

constexpr int kRanks[] = {4, 5};

struct Event {
  size_t member;
  MsgType type;
  int64_t clock;
  std::vector<uint64_t> rows;
  std::vector<float> values;  // one per row (updates)
  uint64_t offset = 0;        // of a part; `more`: parts follow
  bool more = false;
  uint32_t flags = 0;
  uint32_t width = 1;
};

struct Sum {
  int64_t clock;
  std::vector<uint64_t> rows;
  std::vector<float> values;
  bool checkpoint = false;
};

struct Case {
  std::string name;
  std::vector<Event> events;
  int drops;
  std::vector<Sum> sums;  // in the order they leave
  // Checked when not empty: the subscriptions' union and member 0's pick.
  std::vector<uint64_t> rows_up = {};
  std::vector<uint32_t> pick0 = {};
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const auto kSub = MsgType::kSubscribe;
const auto kUpd = MsgType::kUpdate;

std::vector<Case> Cases() {
  return {
      {"both members' updates: one sum, in rank order",
       {{0, kUpd, 0, {1, 2}, {1, 2}}, {1, kUpd, 0, {1, 2}, {10, 20}}},
       0,
       {{0, {1, 2}, {11, 22}}}},
      {"different rows: the sum covers their union",
       {{0, kUpd, 0, {1, 3}, {1, 3}}, {1, kUpd, 0, {2, 3}, {20, 30}}},
       0,
       {{0, {1, 2, 3}, {1, 20, 33}}}},
      {"a member a clock ahead: the sums leave in clock order",
       {{0, kUpd, 0, {1}, {1}},
        {1, kUpd, 0, {1}, {2}},
        {1, kUpd, 1, {1}, {4}},
        {0, kUpd, 1, {1}, {8}}},
       0,
       {{0, {1}, {3}}, {1, {1}, {12}}}},
      {"the other member first: the same sum",
       {{1, kUpd, 0, {1, 2}, {10, 20}}, {0, kUpd, 0, {1, 2}, {1, 2}}},
       0,
       {{0, {1, 2}, {11, 22}}}},
      {"a repeated update is skipped",
       {{0, kUpd, 0, {1}, {1}}, {0, kUpd, 0, {1}, {1}}, {1, kUpd, 0, {1}, {2}}},
       0,
       {{0, {1}, {3}}}},
      {"an update past the member's next clock is dropped",
       {{0, kUpd, 1, {1}, {5}}, {0, kUpd, 0, {1}, {1}}, {1, kUpd, 0, {1}, {2}}},
       1,
       {{0, {1}, {3}}}},
      {"an update in parts",
       {{0, kUpd, 0, {1}, {1}, 0, true}, {0, kUpd, 0, {2}, {2}, 1}, {1, kUpd, 0, {1, 2}, {10, 20}}},
       0,
       {{0, {1, 2}, {11, 22}}}},
      {"a lost part: no sum with a hole in it",
       {{0, kUpd, 0, {1}, {1}, 0, true}, {0, kUpd, 0, {3}, {3}, 2}, {1, kUpd, 0, {1}, {2}}},
       1,
       {}},
      {"reordered parts: the early one is dropped, the message is whole once resent",
       {{0, kUpd, 0, {2}, {2}, 1},
        {0, kUpd, 0, {1}, {1}, 0, true},
        {0, kUpd, 0, {2}, {2}, 1},
        {1, kUpd, 0, {1, 2}, {10, 20}}},
       1,
       {{0, {1, 2}, {11, 22}}}},
      {"a repeated part changes nothing",
       {{0, kUpd, 0, {1}, {1}, 0, true},
        {0, kUpd, 0, {2}, {2}, 1, true},
        {0, kUpd, 0, {2}, {2}, 1, true},
        {0, kUpd, 0, {3}, {3}, 2},
        {1, kUpd, 0, {1}, {10}}},
       1,
       {{0, {1, 2, 3}, {11, 2, 3}}}},
      {"subscriptions: their union goes up with the first sum",
       {{0, kSub, 0, {1, 2}, {}},
        {1, kSub, 0, {2, 3}, {}},
        {0, kUpd, 0, {1}, {1}},
        {1, kUpd, 0, {3}, {3}}},
       0,
       {{0, {1, 3}, {1, 3}}},
       {1, 2, 3},
       {0, 1}},
      {"the same subscription again is a repeat, another one is dropped",
       {{0, kSub, 0, {1}, {}},
        {0, kSub, 0, {1}, {}},
        {0, kSub, 0, {2}, {}},
        {1, kSub, 0, {1}, {}},
        {0, kUpd, 0, {1}, {1}},
        {1, kUpd, 0, {1}, {1}}},
       1,
       {{0, {1}, {2}}},
       {1}},
      {"a subscription after the first sum is dropped",
       {{0, kUpd, 0, {1}, {1}}, {1, kUpd, 0, {1}, {1}}, {1, kSub, 0, {1}, {}}},
       1,
       {{0, {1}, {2}}}},
      {"rows outside the partition, or of another width, are dropped",
       {{0, kUpd, 0, {12}, {1}},
        {0, kUpd, 0, {2, 1}, {1, 1}},
        {0, kUpd, 0, {1}, {1, 1}, 0, false, 0, 2},
        {0, kUpd, 0, {1}, {1}},
        {1, kUpd, 0, {1}, {1}}},
       3,
       {{0, {1}, {2}}}},
      {"one member's checkpoint request goes up with the sum",
       {{0, kUpd, 0, {1}, {1}}, {1, kUpd, 0, {1}, {1}, 0, false, transport::kFlagCheckpoint}},
       0,
       {{0, {1}, {2}, true}}},
  };
}

DecodedMessage Decode(const Event& e, std::vector<unsigned char>* row_bytes) {
  DecodedMessage m;
  m.type = e.type;
  m.header.type = static_cast<uint16_t>(e.type);
  m.header.sender = static_cast<uint32_t>(kRanks[e.member]);
  m.header.clock = e.clock;
  m.header.row_count = e.rows.size();
  m.header.row_width = e.width;
  m.header.offset = e.offset;
  m.header.flags = e.flags | (e.more ? transport::kFlagMore : 0);
  row_bytes->resize(e.rows.size() * sizeof(uint64_t));
  std::memcpy(row_bytes->data(), e.rows.data(), row_bytes->size());
  if (!e.rows.empty()) m.rows = row_bytes->data();
  if (!e.values.empty()) m.payload = reinterpret_cast<const unsigned char*>(e.values.data());
  return m;
}

class RelayTableTest : public ::testing::TestWithParam<Case> {};

TEST_P(RelayTableTest, SumsAndDrops) {
  const Case& c = GetParam();
  RelayTable table(2, 1, 0, 10, 0);
  int drops = 0;
  std::vector<Sum> sums;
  bool subscribed_with_first = false;
  for (const Event& e : c.events) {
    std::vector<unsigned char> row_bytes;
    const DecodedMessage m = Decode(e, &row_bytes);
    if (!table.OnMember(e.member, kRanks[e.member], m).empty()) ++drops;
    int64_t clock = -1;
    bool subscribe_first = false;
    while (std::shared_ptr<Delta> d = table.TakeSum(&clock, &subscribe_first)) {
      if (subscribe_first) subscribed_with_first = sums.empty();
      sums.push_back({clock, d->rows, d->values, d->checkpoint});
    }
  }
  EXPECT_EQ(drops, c.drops);
  ASSERT_EQ(sums.size(), c.sums.size());
  for (size_t i = 0; i < sums.size(); ++i) {
    SCOPED_TRACE("sum " + std::to_string(i));
    EXPECT_EQ(sums[i].clock, c.sums[i].clock);
    EXPECT_EQ(sums[i].rows, c.sums[i].rows);
    EXPECT_EQ(sums[i].values, c.sums[i].values);
    EXPECT_EQ(sums[i].checkpoint, c.sums[i].checkpoint);
  }
  // The union goes up once, with the first sum, and never without one.
  EXPECT_EQ(subscribed_with_first, !sums.empty());
  EXPECT_EQ(table.subscribed_up(), !sums.empty());
  EXPECT_EQ(table.next_up(), static_cast<int64_t>(sums.size()));
  if (!c.rows_up.empty()) {
    EXPECT_EQ(table.rows_up(), c.rows_up);
    EXPECT_EQ(table.whole(0), c.pick0.empty());
    if (!c.pick0.empty()) EXPECT_EQ(table.pick(0), c.pick0);
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return ::geeps::testing::CamelCaseName(info.param.name);
}

INSTANTIATE_TEST_SUITE_P(Sequences, RelayTableTest, ::testing::ValuesIn(Cases()), CaseName);

TEST(RelayTableTest, ResumedJobsStartAtTheirClock) {
  RelayTable table(1, 1, 0, 4, 7);
  std::vector<unsigned char> bytes;
  int64_t clock = 0;
  bool subscribe_first = false;
  // Below the start clock: what the checkpoint holds already (skipped).
  EXPECT_TRUE(table.OnMember(0, 4, Decode({0, kUpd, 0, {1}, {1}}, &bytes)).empty());
  EXPECT_EQ(table.TakeSum(&clock, &subscribe_first), nullptr);
  EXPECT_TRUE(table.OnMember(0, 4, Decode({0, kUpd, 7, {1}, {1}}, &bytes)).empty());
  ASSERT_NE(table.TakeSum(&clock, &subscribe_first), nullptr);
  EXPECT_EQ(clock, 7);
  EXPECT_EQ(table.TakeSum(&clock, &subscribe_first), nullptr);
}

}  // namespace
}  // namespace geeps::relay
