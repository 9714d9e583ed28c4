// transport::PartSplit, the sending side of messages in parts, driven by a
// table of messages: empty, one part, exact and ragged splits, a message
// that another continues, a range that starts past row 0, flags kept. Each
// case's parts are also fed to PartSequence, the receiving side's rule, in
// order (accepted, completing the message exactly at its last part unless
// it continues) and with one part lost (refused from there on).
#include "transport/part_split.h"

#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "test_names.h"
#include "transport/part_sequence.h"

namespace geeps::transport {
namespace {

struct Case {
  std::string name;
  uint64_t from, to, per;
  bool continues;
  uint32_t flags;                       // the message's, kept on every part
  std::vector<uint64_t> expected_rows;  // rows per part, in order
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  return {
      {"no rows: one empty part", 0, 0, 10, false, 0, {0}},
      {"no rows in a message that continues", 5, 5, 10, true, 0, {0}},
      {"fits in one part", 0, 7, 10, false, 0, {7}},
      {"exactly one part", 0, 10, 10, false, 0, {10}},
      {"an exact split", 0, 30, 10, false, 0, {10, 10, 10}},
      {"a ragged split", 0, 25, 10, false, 0, {10, 10, 5}},
      {"a part per row", 0, 3, 1, false, 0, {1, 1, 1}},
      {"zero rows per part means one", 0, 2, 0, false, 0, {1, 1}},
      {"a range past row 0", 20, 45, 10, false, 0, {10, 10, 5}},
      {"a message that another continues", 0, 20, 10, true, 0, {10, 10}},
      {"flags kept on every part", 0, 15, 10, false, kFlagCheckpoint | kFlagReadOrder, {10, 5}},
      {"a stray kFlagMore is not kept", 0, 5, 10, false, kFlagMore, {5}},
  };
}

std::vector<Part> Split(const Case& c, const WireHeader& h) {
  PartSplit split(h, c.from, c.to, c.per, c.continues);
  std::vector<Part> parts;
  Part part;
  while (split.Next(&part)) parts.push_back(part);
  EXPECT_FALSE(split.Next(&part)) << "a split that ended gave another part";
  return parts;
}

WireHeader Header(const Case& c) {
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kUpdate);
  h.clock = 9;
  h.table = 3;
  h.row_width = 4;
  h.flags = c.flags;
  return h;
}

class PartSplitTableTest : public ::testing::TestWithParam<Case> {};

TEST_P(PartSplitTableTest, Parts) {
  const Case& c = GetParam();
  const WireHeader h = Header(c);
  const std::vector<Part> parts = Split(c, h);
  ASSERT_EQ(parts.size(), c.expected_rows.size());
  uint64_t next = c.from;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& p = parts[i];
    const bool last = i + 1 == parts.size();
    EXPECT_EQ(p.count, c.expected_rows[i]) << "part " << i;
    EXPECT_EQ(p.first, next) << "part " << i;
    EXPECT_EQ(p.header.offset, next) << "part " << i;
    EXPECT_EQ(p.header.row_count, p.count) << "part " << i;
    EXPECT_EQ(p.header.flags & ~kFlagMore, c.flags & ~kFlagMore) << "part " << i;
    EXPECT_EQ((p.header.flags & kFlagMore) != 0, !last || c.continues) << "part " << i;
    EXPECT_EQ(p.header.clock, h.clock);
    EXPECT_EQ(p.header.table, h.table);
    next += p.count;
  }
  EXPECT_EQ(next, std::max(c.from, c.to));
}

// What the receiving side makes of the parts, in order: each continues the
// message, and it completes at the last part (never, if it continues). A
// range past row 0 continues a message the receiver has not seen: refused.
TEST_P(PartSplitTableTest, TheReceiverAcceptsThemInOrder) {
  const Case& c = GetParam();
  const std::vector<Part> parts = Split(c, Header(c));
  PartSequence receiver;
  if (c.from != 0) {
    EXPECT_EQ(receiver.Accept(parts[0].header), PartSequence::Verdict::kOutOfSequence);
    return;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const PartSequence::Verdict v = receiver.Accept(parts[i].header);
    EXPECT_NE(v, PartSequence::Verdict::kOutOfSequence) << "part " << i;
    EXPECT_EQ(PartSequence::Completes(v), i + 1 == parts.size() && !c.continues) << "part " << i;
  }
}

// Any one part but the last lost: every later part is refused, so the
// receiver never completes a message with a hole in it.
TEST_P(PartSplitTableTest, ALostPartRefusesTheRest) {
  const Case& c = GetParam();
  const std::vector<Part> parts = Split(c, Header(c));
  for (size_t lost = 0; lost + 1 < parts.size(); ++lost) {
    PartSequence receiver;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i == lost) continue;
      const PartSequence::Verdict v = receiver.Accept(parts[i].header);
      if (i > lost)
        EXPECT_EQ(v, PartSequence::Verdict::kOutOfSequence) << "part " << i << ", lost " << lost;
      EXPECT_FALSE(PartSequence::Completes(v) && i > lost) << "part " << i << ", lost " << lost;
    }
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return ::geeps::testing::CamelCaseName(info.param.name);
}

INSTANTIATE_TEST_SUITE_P(Messages, PartSplitTableTest, ::testing::ValuesIn(Cases()), CaseName);

TEST(HeaderFrameTest, HoldsTheHeaderEncoded) {
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kPush);
  h.clock = 12;
  h.row_count = 5;
  const Frame f = HeaderFrame(h);
  ASSERT_EQ(f.size(), kHeaderBytes);
  char expected[kHeaderBytes];
  EncodeHeader(h, expected);
  EXPECT_EQ(std::string(static_cast<const char*>(f.data()), f.size()),
            std::string(expected, kHeaderBytes));
}

// A packed frame decodes to its header (flagged), rows and values, whether
// the values were given or written at PackedPayload afterwards.
TEST(PackedFrameTest, DecodesToWhatWasPacked) {
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kUpdate);
  h.clock = 3;
  h.row_count = 2;
  h.row_width = 3;
  const uint64_t rows[] = {5, 9};
  const float values[] = {1, 2, 3, 4, 5, 6};
  for (bool given : {true, false}) {
    SCOPED_TRACE(given);
    Frame f = PackedFrame(h, rows, sizeof(rows), given ? values : nullptr, sizeof(values));
    if (!given) std::memcpy(PackedPayload(f, sizeof(rows)), values, sizeof(values));
    ASSERT_EQ(f.size(), kHeaderBytes + sizeof(rows) + sizeof(values));
    const FrameView view{f.data(), f.size()};
    StatusOr<DecodedMessage> m = DecodeFrames(&view, 1);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->header.flags, kFlagPacked);
    EXPECT_EQ(m->header.clock, 3);
    EXPECT_EQ(m->RowAt(0), 5u);
    EXPECT_EQ(m->RowAt(1), 9u);
    EXPECT_EQ(std::memcmp(m->payload, values, sizeof(values)), 0);
  }
}

TEST(PackedFrameTest, PacksOnlyWhatIsUnderTheLimitAndNotAHeaderAlone) {
  struct Case {
    uint64_t rows, values, below;
    bool packs;
  };
  for (const Case& c :
       {Case{0, 0, 16384, false}, Case{8, 4096, 16384, true},
        Case{0, 16384 - kHeaderBytes - 1, 16384, true}, Case{0, 16384 - kHeaderBytes, 16384, false},
        Case{8, 4096, 0, false}, Case{8, 0, 16384, true}}) {
    EXPECT_EQ(Packs(c.rows, c.values, c.below), c.packs)
        << c.rows << " + " << c.values << " under " << c.below;
  }
}

}  // namespace
}  // namespace geeps::transport
