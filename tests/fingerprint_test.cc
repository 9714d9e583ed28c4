// transport/fingerprint.h: the canonical texts (the checkpoint's is part of
// the checkpoint file format) and which config fields each scope sees.
#include "transport/fingerprint.h"

#include <gtest/gtest.h>

#include <string>

namespace geeps::transport {
namespace {

Config Base() {
  Config c;
  c.num_workers = 3;
  c.num_shards = 2;
  c.num_channels = 2;
  c.default_slack = 1;
  c.tables = {{"w", 10, 3}, {"act", 4, 8, /*local=*/true}};
  return c;
}

// FNV-1a written out here, independently of the library's, from the
// library's offset basis (fingerprint.h: FNV's, 0xcbf29ce484222325, with a
// digit lost in decimal; checkpoint files depend on it).
uint64_t Reference(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

TEST(FingerprintTest, CanonicalTexts) {
  Config c = Base();
  EXPECT_EQ(FingerprintText(c, FingerprintScope::kCheckpoint),
            "workers=3;shards=2;channels=2;slack=1;plain;1:w,10,3,s;3:act,4,8,l");
  EXPECT_EQ(FingerprintText(c, FingerprintScope::kRendezvous),
            "channels=2;plain;1:w,10,3,s;3:act,4,8,l");
  c.deterministic_bsp = true;
  c.resend_after_connection_loss = false;
  EXPECT_EQ(FingerprintText(c, FingerprintScope::kCheckpoint),
            "workers=3;shards=2;channels=2;slack=1;deterministic;1:w,10,3,s;3:act,4,8,l");
  EXPECT_EQ(FingerprintText(c, FingerprintScope::kRendezvous),
            "channels=2;deterministic;noresend;1:w,10,3,s;3:act,4,8,l");
  for (FingerprintScope scope : {FingerprintScope::kCheckpoint, FingerprintScope::kRendezvous}) {
    EXPECT_EQ(JobFingerprint(c, scope), Reference(FingerprintText(c, scope)));
  }
  EXPECT_EQ(FingerprintHash(""), 1469598103934665603ull);
  EXPECT_NE(FingerprintHash("a"), FingerprintHash("b"));
}

// Each field changes the fingerprint of the scopes that include it, and
// only those.
TEST(FingerprintTest, FieldsPerScope) {
  const Config base = Base();
  struct Change {
    const char* what;
    void (*apply)(Config*);
    bool rendezvous, checkpoint;
  };
  const Change changes[] = {
      {"workers", [](Config* c) { c->num_workers = 4; }, false, true},
      {"shards", [](Config* c) { c->num_shards = 1; }, false, true},
      {"slack", [](Config* c) { c->default_slack = 0; }, false, true},
      {"channels", [](Config* c) { c->num_channels = 1; }, true, true},
      {"deterministic", [](Config* c) { c->deterministic_bsp = true; }, true, true},
      {"resend", [](Config* c) { c->resend_after_connection_loss = false; }, true, false},
      {"pipeline parts", [](Config* c) { c->pipeline_part_bytes = 4096; }, true, false},
      {"message cap", [](Config* c) { c->max_message_bytes = 1 << 20; }, true, false},
      {"checkpoint period", [](Config* c) { c->checkpoint_every = 5; }, true, false},
      {"table rows", [](Config* c) { c->tables[0].num_rows = 11; }, true, true},
      {"table width", [](Config* c) { c->tables[1].row_width = 9; }, true, true},
      {"table kind", [](Config* c) { c->tables[1].local = false; }, true, true},
      // Length-prefixed names: "ab"+"c" and "a"+"bc" differ.
      {"table names",
       [](Config* c) {
         c->tables[0].name = "wa";
         c->tables[1].name = "ct";
       },
       true, true},
  };
  for (const Change& ch : changes) {
    Config c = base;
    ch.apply(&c);
    EXPECT_EQ(JobFingerprint(c, FingerprintScope::kRendezvous) !=
                  JobFingerprint(base, FingerprintScope::kRendezvous),
              ch.rendezvous)
        << ch.what;
    EXPECT_EQ(JobFingerprint(c, FingerprintScope::kCheckpoint) !=
                  JobFingerprint(base, FingerprintScope::kCheckpoint),
              ch.checkpoint)
        << ch.what;
  }
}

}  // namespace
}  // namespace geeps::transport
