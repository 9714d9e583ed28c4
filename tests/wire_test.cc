// The wire decoder: every field is validated before use.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "transport/wire.h"

namespace geeps::transport {
namespace {

struct Msg {
  std::vector<std::vector<unsigned char>> frames;
  StatusOr<DecodedMessage> Decode() const {
    std::vector<FrameView> views;
    for (const auto& f : frames) views.push_back({f.data(), f.size()});
    return DecodeFrames(views.data(), views.size());
  }
};

Msg MakeUpdate(std::vector<uint64_t> rows, uint32_t width) {
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kUpdate);
  h.sender = 1;
  h.table = 2;
  h.clock = 3;
  h.row_count = rows.size();
  h.row_width = width;
  Msg m;
  m.frames.emplace_back(kHeaderBytes);
  EncodeHeader(h, m.frames[0].data());
  m.frames.emplace_back(rows.size() * 8);
  if (!rows.empty()) std::memcpy(m.frames[1].data(), rows.data(), rows.size() * 8);
  m.frames.emplace_back(rows.size() * width * 4, 0);
  return m;
}

WireHeader HeaderOf(const Msg& m) {
  WireHeader h;
  std::memcpy(&h, m.frames[0].data(), kHeaderBytes);
  return h;
}
void SetHeader(Msg& m, const WireHeader& h) { EncodeHeader(h, m.frames[0].data()); }

TEST(WireTest, ValidUpdateDecodes) {
  Msg m = MakeUpdate({4, 7, 9}, 5);
  auto d = m.Decode();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->type, MsgType::kUpdate);
  EXPECT_EQ(d->header.row_count, 3u);
  EXPECT_EQ(d->RowAt(1), 7u);
  EXPECT_TRUE(ValidateRows(*d, 0, 10).ok());
  EXPECT_EQ(ValidateRows(*d, 5, 10).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ValidateRows(*d, 0, 9).code(), StatusCode::kOutOfRange);
}

TEST(WireTest, ClockOnlyUpdateHasOneFrame) {
  Msg m = MakeUpdate({}, 5);
  m.frames.resize(1);
  EXPECT_TRUE(m.Decode().ok());
  Msg extra = MakeUpdate({}, 5);  // three frames for zero rows: wrong
  EXPECT_FALSE(extra.Decode().ok());
}

// Resync and Ack: one header frame, no rows, no parts, a clock in `aux`.
TEST(WireTest, ResyncAndAckAreHeaderOnly) {
  for (MsgType type : {MsgType::kResync, MsgType::kAck}) {
    WireHeader h;
    h.type = static_cast<uint16_t>(type);
    h.sender = 1;
    h.table = 2;
    h.aux = 7;
    Msg m;
    m.frames.emplace_back(kHeaderBytes);
    SetHeader(m, h);
    auto d = m.Decode();
    ASSERT_TRUE(d.ok()) << MsgTypeName(type) << ": " << d.status();
    EXPECT_EQ(d->type, type);
    EXPECT_EQ(d->header.aux, 7);
    auto bad = [&](WireHeader changed, size_t frames, const char* what) {
      Msg b;
      b.frames.emplace_back(kHeaderBytes);
      SetHeader(b, changed);
      for (size_t i = 1; i < frames; ++i) b.frames.emplace_back(8, 0);
      EXPECT_FALSE(b.Decode().ok()) << MsgTypeName(type) << ": " << what;
    };
    WireHeader x = h;
    x.row_count = 1;
    bad(x, 2, "a row");
    x = h;
    x.offset = 1;
    bad(x, 1, "an offset");
    x = h;
    x.flags = kFlagMore;
    bad(x, 1, "the more flag");
    x = h;
    x.aux = -1;
    bad(x, 1, "a negative clock");
    bad(h, 2, "a second frame");
  }
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kAck) + 1;  // past the last type
  Msg m;
  m.frames.emplace_back(kHeaderBytes);
  SetHeader(m, h);
  EXPECT_FALSE(m.Decode().ok());
}

// Which flags each message type may carry: an update may ask for a
// checkpoint and for pushes in read order; nothing else may.
TEST(WireTest, FlagsAllowedPerType) {
  struct Case {
    uint32_t flags;
    bool on_update;
    bool on_subscribe;
  };
  const Case cases[] = {
      {0, true, true},
      {kFlagCheckpoint, true, false},
      {kFlagReadOrder, true, false},
      {kFlagCheckpoint | kFlagReadOrder, true, false},
      {1u << 1, false, false},
      {1u << 7, false, false},
      {kFlagReadOrder | (1u << 31), false, false},
  };
  for (const Case& c : cases) {
    Msg update = MakeUpdate({1, 2}, 3);
    WireHeader h = HeaderOf(update);
    h.flags = c.flags;
    SetHeader(update, h);
    EXPECT_EQ(update.Decode().ok(), c.on_update) << "update, flags " << c.flags;
    Msg subscribe = update;
    subscribe.frames.pop_back();  // a subscription names rows, without values
    h.type = static_cast<uint16_t>(MsgType::kSubscribe);
    SetHeader(subscribe, h);
    EXPECT_EQ(subscribe.Decode().ok(), c.on_subscribe) << "subscribe, flags " << c.flags;
  }
}

TEST(WireTest, RejectsEveryBadField) {
  auto expect_bad = [](Msg m, const char* what) {
    auto d = m.Decode();
    EXPECT_FALSE(d.ok()) << what;
  };
  Msg base = MakeUpdate({1, 2}, 3);
  {
    Msg m = base;
    WireHeader h = HeaderOf(m);
    h.magic ^= 1;
    SetHeader(m, h);
    expect_bad(m, "magic");
  }
  {
    Msg m = base;
    WireHeader h = HeaderOf(m);
    h.version = 9;
    SetHeader(m, h);
    expect_bad(m, "version");
  }
  {
    Msg m = base;
    WireHeader h = HeaderOf(m);
    h.type = 77;
    SetHeader(m, h);
    expect_bad(m, "type");
  }
  {
    Msg m = base;
    WireHeader h = HeaderOf(m);
    h.flags = 2;  // bit 0 is kFlagMore; the others are reserved
    SetHeader(m, h);
    expect_bad(m, "flags");
  }
  {
    Msg m = base;
    WireHeader h = HeaderOf(m);
    h.clock = -1;
    SetHeader(m, h);
    expect_bad(m, "clock");
  }
  {
    Msg m = base;
    WireHeader h = HeaderOf(m);
    h.row_count = 3;  // frames hold 2 rows
    SetHeader(m, h);
    expect_bad(m, "row_count");
  }
  {
    Msg m = base;
    WireHeader h = HeaderOf(m);
    h.row_count = ~0ull / 2;  // overflow of row_count * width * 4
    SetHeader(m, h);
    expect_bad(m, "overflow");
  }
  {
    Msg m = base;
    WireHeader h = HeaderOf(m);
    h.row_width = 0;
    SetHeader(m, h);
    expect_bad(m, "zero width");
  }
  {
    Msg m = base;
    m.frames[2].pop_back();
    expect_bad(m, "truncated payload");
  }
  {
    Msg m = base;
    m.frames[1].push_back(0);
    expect_bad(m, "long rows frame");
  }
  {
    Msg m = base;
    m.frames[0].pop_back();
    expect_bad(m, "short header");
  }
  {
    Msg m = base;
    m.frames.pop_back();
    expect_bad(m, "missing payload");
  }
  {
    Msg m = base;
    m.frames.push_back({1, 2, 3});
    expect_bad(m, "extra frame");
  }
  Msg none;
  expect_bad(none, "no frames");
  Msg unsorted = MakeUpdate({5, 3}, 2);
  auto d = unsorted.Decode();
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(ValidateRows(*d, 0, 10).ok());
  Msg dup = MakeUpdate({3, 3}, 2);
  d = dup.Decode();
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(ValidateRows(*d, 0, 10).ok());
}

// `m` packed (kFlagPacked): its frames back to back in one.
Msg Packed(const Msg& m) {
  WireHeader h = HeaderOf(m);
  h.flags |= kFlagPacked;
  std::vector<unsigned char> all(kHeaderBytes);
  EncodeHeader(h, all.data());
  for (size_t i = 1; i < m.frames.size(); ++i)
    all.insert(all.end(), m.frames[i].begin(), m.frames[i].end());
  Msg p;
  p.frames.push_back(std::move(all));
  return p;
}

Msg WithType(Msg m, MsgType type, bool drop_rows, bool drop_payload) {
  WireHeader h = HeaderOf(m);
  h.type = static_cast<uint16_t>(type);
  SetHeader(m, h);
  if (drop_payload) m.frames.pop_back();
  if (drop_rows) m.frames.erase(m.frames.begin() + 1);
  return m;
}

// Each type with rows or values decodes packed as it does in frames of its
// own: the same header (but the flag), rows and values.
TEST(WireTest, PackedMessagesDecodeAsTheirFrames) {
  Msg update = MakeUpdate({4, 7, 9}, 5);
  for (size_t i = 0; i < update.frames[2].size(); ++i)
    update.frames[2][i] = static_cast<unsigned char>(i);
  const Msg cases[] = {update, WithType(update, MsgType::kSubscribe, false, true),
                       WithType(update, MsgType::kPush, true, false), MakeUpdate({}, 5)};
  for (const Msg& c : cases) {
    Msg separate = c;
    if (HeaderOf(c).row_count == 0) separate.frames.resize(1);
    SCOPED_TRACE(MsgTypeName(static_cast<MsgType>(HeaderOf(c).type)));
    const Msg packed = Packed(separate);  // b points into its frame
    auto a = separate.Decode();
    auto b = packed.Decode();
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->header.flags, a->header.flags | kFlagPacked);
    EXPECT_EQ(b->type, a->type);
    EXPECT_EQ(b->header.row_count, a->header.row_count);
    EXPECT_EQ(b->rows == nullptr, a->rows == nullptr);
    EXPECT_EQ(b->payload == nullptr, a->payload == nullptr);
    for (uint64_t r = 0; a->rows != nullptr && r < a->header.row_count; ++r)
      EXPECT_EQ(b->RowAt(r), a->RowAt(r));
    const size_t values = a->header.row_count * a->header.row_width * sizeof(float);
    if (a->payload != nullptr) EXPECT_EQ(std::memcmp(a->payload, b->payload, values), 0);
  }
}

TEST(WireTest, MalformedPackedMessagesAreRejected) {
  const Msg good = Packed(MakeUpdate({1, 2}, 3));
  ASSERT_TRUE(good.Decode().ok());
  struct Case {
    const char* what;
    std::function<void(Msg&)> change;
  };
  auto set_header = [](Msg& m, const std::function<void(WireHeader&)>& f) {
    WireHeader h = HeaderOf(m);
    f(h);
    EncodeHeader(h, m.frames[0].data());
  };
  const Case cases[] = {
      {"one byte short", [](Msg& m) { m.frames[0].pop_back(); }},
      {"one byte long", [](Msg& m) { m.frames[0].push_back(0); }},
      {"a second frame",
       [](Msg& m) {
         m.frames.push_back({0, 0, 0, 0});
       }},
      {"more rows than bytes",
       [&](Msg& m) { set_header(m, [](WireHeader& h) { ++h.row_count; }); }},
      {"row_count overflows",
       [&](Msg& m) { set_header(m, [](WireHeader& h) { h.row_count = ~0ull / 8; }); }},
      {"rows and values past 2^64",
       [&](Msg& m) {
         set_header(m, [](WireHeader& h) {
           h.row_count = 1ull << 58;
           h.row_width = 15;
         });
       }},
      {"a packed Resync",
       [&](Msg& m) {
         m.frames[0].resize(kHeaderBytes);
         set_header(m, [](WireHeader& h) {
           h.type = static_cast<uint16_t>(MsgType::kResync);
           h.row_count = 0;
         });
       }},
      {"a header alone longer than a header, unpacked",
       [&](Msg& m) { set_header(m, [](WireHeader& h) { h.flags &= ~kFlagPacked; }); }},
  };
  for (const Case& c : cases) {
    Msg m = good;
    c.change(m);
    EXPECT_FALSE(m.Decode().ok()) << c.what;
  }
}

TEST(WireTest, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    Msg m;
    const int frames = rng() % 5;
    for (int f = 0; f < frames; ++f) {
      std::vector<unsigned char> bytes(f == 0 && rng() % 2 ? kHeaderBytes : rng() % 100);
      for (auto& b : bytes) b = static_cast<unsigned char>(rng());
      m.frames.push_back(bytes);
    }
    if (m.Decode().ok()) ++accepted;
  }
  EXPECT_EQ(accepted, 0);  // random headers fail the magic check
  // Truncations of a valid message never decode.
  Msg valid = MakeUpdate({0, 1, 2}, 4);
  for (size_t f = 0; f < valid.frames.size(); ++f) {
    for (size_t cut = 0; cut < valid.frames[f].size(); cut += 3) {
      Msg m = valid;
      m.frames[f].resize(cut);
      EXPECT_FALSE(m.Decode().ok()) << "frame " << f << " cut at " << cut;
    }
  }
}

TEST(WireTest, PartsAndRowsPerPart) {
  Msg m = MakeUpdate({8, 9}, 3);
  WireHeader h = HeaderOf(m);
  h.flags = kFlagMore;
  h.offset = 4;
  SetHeader(m, h);
  auto d = m.Decode();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->header.offset, 4u);
  h.offset = 1ull << 41;
  SetHeader(m, h);
  EXPECT_FALSE(m.Decode().ok());
  // 3 floats (12 bytes) + an 8-byte row id per row.
  EXPECT_EQ(RowsPerPart(3, true, 100), 5u);
  EXPECT_EQ(RowsPerPart(3, false, 100), 8u);
  EXPECT_EQ(RowsPerPart(1000, true, 100), 1u);  // at least one row
}

// Found by fuzz_wire: a push has no rows frame, so validating its rows must
// not read through the missing frame.
TEST(WireTest, ValidateRowsOfAPushIsAnErrorNotACrash) {
  WireHeader h;
  h.type = static_cast<uint16_t>(MsgType::kPush);
  h.row_count = 2;
  h.row_width = 1;
  std::vector<unsigned char> header(kHeaderBytes), payload(8);
  EncodeHeader(h, header.data());
  FrameView frames[2] = {{header.data(), header.size()}, {payload.data(), payload.size()}};
  auto d = DecodeFrames(frames, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(ValidateRows(*d, 0, 10).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace geeps::transport
