// Tests of the iteration plan (src/client/iteration_plan.cc): recorded
// sequences with known answers for the cached rows, the slices, the clock
// plan, and which reads and updates take the direct paths. No cluster, no
// sockets, no device.
#include "client/iteration_plan.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace geeps::client {
namespace {

// Shared tables "a" (table 0) and "b" (table 1), 10 rows of width 2 each,
// and a local table (table 2).
Config TwoTables(int num_shards, bool read_my_writes) {
  Config c;
  c.num_shards = num_shards;
  c.read_my_writes = read_my_writes;
  c.tables = {{"a", 10, 2, false}, {"b", 10, 2, false}, {"local", 4, 2, true}};
  return c;
}

void Read(OpSequence& seq, TableId table, std::vector<RowIndex> rows, int slack = 0) {
  auto h = seq.AddRead(table, rows, slack);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(seq.AddPostRead(*h).ok());
}

void Update(OpSequence& seq, TableId table, std::vector<RowIndex> rows) {
  auto h = seq.AddPreUpdate(table, rows);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(seq.AddUpdate(*h).ok());
}

void Clock(OpSequence& seq) { ASSERT_TRUE(seq.AddClock().ok()); }

struct DirectCase {
  std::string name;
  bool read_my_writes = false;
  std::vector<bool> cache_on_device = {true, true, true};
  std::function<void(OpSequence&)> record;
  std::vector<bool> direct_update;  // per update handle
  std::vector<uint32_t> direct_first_pos;
  std::vector<bool> read_in_place;  // per read handle
  std::vector<uint32_t> read_first_pos;
};

std::vector<DirectCase> DirectCases() {
  std::vector<DirectCase> cases;
  cases.push_back({"trainer: read, then one update of the same rows",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     Read(s, 0, {2, 3, 4});
                     Update(s, 0, {2, 3, 4});
                     Clock(s);
                   },
                   {true},
                   {0},
                   {true},
                   {0}});
  cases.push_back({"rows at later cached positions",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     Read(s, 0, {1, 2, 5, 6});
                     Update(s, 0, {5, 6});
                     Read(s, 0, {5, 6});
                     Clock(s);
                   },
                   {true},
                   {2},
                   {true, true},  // the second read opens after the table advanced
                   {0, 2}});
  cases.push_back({"read-my-writes: no direct path",
                   true,
                   {true, true, true},
                   [](OpSequence& s) {
                     Read(s, 0, {2, 3});
                     Update(s, 0, {2, 3});
                     Clock(s);
                   },
                   {false},
                   {0},
                   {false},
                   {0}});
  cases.push_back({"two updates of a table: neither is direct",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     Update(s, 0, {0, 1});
                     Update(s, 0, {2, 3});
                     Update(s, 1, {0, 1});
                     Clock(s);
                   },
                   {false, false, true},
                   {0, 0, 0},
                   {},
                   {}});
  cases.push_back({"update rows not consecutive in the cache",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     Read(s, 0, {0, 1, 2, 3});
                     Update(s, 0, {0, 2});
                     Clock(s);
                   },
                   {false},
                   {0},
                   {true},
                   {0}});
  cases.push_back({"rows in descending order",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     Read(s, 0, {3, 2});
                     Update(s, 0, {3, 2});
                     Clock(s);
                   },
                   {false},
                   {0},
                   {false},
                   {0}});
  cases.push_back({"a cache partly in host memory",
                   false,
                   {false, true, true},
                   [](OpSequence& s) {
                     Read(s, 0, {2, 3});
                     Update(s, 0, {2, 3});
                     Read(s, 1, {2, 3});
                     Update(s, 1, {2, 3});
                     Clock(s);
                   },
                   {false, true},
                   {0, 0},
                   {false, true},
                   {0, 0}});
  cases.push_back({"slack 1: the read gathers",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     Read(s, 0, {2, 3}, /*slack=*/1);
                     Update(s, 0, {2, 3});
                     Clock(s);
                   },
                   {true},
                   {0},
                   {false},
                   {0}});
  cases.push_back({"a read open across its table's update",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     auto r = s.AddRead(0, {2, 3}, 0);
                     ASSERT_TRUE(r.ok());
                     Update(s, 0, {2, 3});
                     ASSERT_TRUE(s.AddPostRead(*r).ok());
                     Clock(s);
                   },
                   {true},
                   {0},
                   {false},
                   {0}});
  cases.push_back({"a read open across another table's update",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     auto r = s.AddRead(0, {2, 3}, 0);
                     ASSERT_TRUE(r.ok());
                     Update(s, 1, {2, 3});
                     ASSERT_TRUE(s.AddPostRead(*r).ok());
                     Update(s, 0, {2, 3});
                     Clock(s);
                   },
                   {true, true},
                   {0, 0},
                   {true},
                   {0}});
  cases.push_back({"a table without an update advances at Clock()",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     auto r = s.AddRead(0, {2, 3}, 0);
                     ASSERT_TRUE(r.ok());
                     ASSERT_TRUE(s.AddPostRead(*r).ok());
                     Clock(s);
                   },
                   {},
                   {},
                   {true},
                   {0}});
  cases.push_back({"prologue only: neither path",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     Clock(s);
                     Read(s, 0, {2, 3});
                     Update(s, 0, {2, 3});
                   },
                   {true},  // the update: the only one of its table in the prologue
                   {0},
                   {false},  // the prologue always gathers
                   {0}});
  cases.push_back({"the only update in each section it occurs in",
                   false,
                   {true, true, true},
                   [](OpSequence& s) {
                     Update(s, 0, {2, 3});
                     Clock(s);
                     Update(s, 0, {2, 3});
                     Update(s, 0, {2, 3});
                   },
                   {true, false, false},
                   {0, 0, 0},
                   {},
                   {}});
  return cases;
}

TEST(IterationPlanTest, DirectPaths) {
  for (const DirectCase& c : DirectCases()) {
    SCOPED_TRACE(c.name);
    const Config config = TwoTables(/*num_shards=*/1, c.read_my_writes);
    OpSequence seq(&config);
    c.record(seq);
    ASSERT_TRUE(seq.Finish().ok());
    IterationPlan plan(config, seq);
    // Nothing is direct before the caches are placed.
    for (size_t h = 0; h < seq.updates().size(); ++h)
      EXPECT_FALSE(plan.direct_update(static_cast<int32_t>(h)));
    plan.PlaceCaches(c.cache_on_device);
    ASSERT_EQ(seq.updates().size(), c.direct_update.size());
    ASSERT_EQ(seq.reads().size(), c.read_in_place.size());
    for (size_t h = 0; h < c.direct_update.size(); ++h) {
      const auto id = static_cast<int32_t>(h);
      EXPECT_EQ(plan.direct_update(id), c.direct_update[h]) << "update#" << h;
      if (c.direct_update[h])
        EXPECT_EQ(plan.direct_first_pos(id), c.direct_first_pos[h]) << "update#" << h;
    }
    for (size_t h = 0; h < c.read_in_place.size(); ++h) {
      const auto id = static_cast<int32_t>(h);
      EXPECT_EQ(plan.read_in_place(id), c.read_in_place[h]) << "read#" << h;
      if (c.read_in_place[h])
        EXPECT_EQ(plan.read_first_pos(id), c.read_first_pos[h]) << "read#" << h;
    }
  }
}

TEST(IterationPlanTest, CachedRowsAndSlices) {
  // Two shards: partitions [0, 5) and [5, 10) of each table.
  const Config config = TwoTables(/*num_shards=*/2, /*read_my_writes=*/false);
  OpSequence seq(&config);
  Read(seq, 0, {7, 1, 2});
  Read(seq, 0, {1});
  Update(seq, 0, {2, 7, 8});
  Read(seq, 1, {9});
  auto local = seq.AddLocalAccess(2, {0, 1}, /*fetch=*/true);
  ASSERT_TRUE(local.ok());
  ASSERT_TRUE(seq.AddPostLocalAccess(*local, /*keep=*/true).ok());
  Clock(seq);
  ASSERT_TRUE(seq.Finish().ok());
  IterationPlan plan(config, seq);

  const TablePlan& a = plan.table(0);
  EXPECT_TRUE(a.shared);
  EXPECT_EQ(a.rows, (std::vector<uint64_t>{1, 2, 7, 8}));
  ASSERT_EQ(a.slices.size(), 2u);
  EXPECT_EQ(a.slices[0].partition, 0);
  EXPECT_EQ(a.slices[0].row_begin, 0u);
  EXPECT_EQ(a.slices[0].row_end, 5u);
  EXPECT_EQ(a.slices[0].cache_begin, 0u);
  EXPECT_EQ(a.slices[0].cache_count, 2u);
  EXPECT_EQ(a.slices[0].update_rows, (std::vector<uint64_t>{2}));
  EXPECT_EQ(a.slices[0].update_pos, (std::vector<uint32_t>{1}));
  EXPECT_EQ(a.slices[1].partition, 1);
  EXPECT_EQ(a.slices[1].cache_begin, 2u);
  EXPECT_EQ(a.slices[1].cache_count, 2u);
  EXPECT_EQ(a.slices[1].update_rows, (std::vector<uint64_t>{7, 8}));
  EXPECT_EQ(a.slices[1].update_pos, (std::vector<uint32_t>{2, 3}));

  // Table b: read only; its first partition caches nothing.
  const TablePlan& b = plan.table(1);
  EXPECT_EQ(b.rows, (std::vector<uint64_t>{9}));
  ASSERT_EQ(b.slices.size(), 2u);
  EXPECT_EQ(b.slices[0].cache_count, 0u);
  EXPECT_EQ(b.slices[1].cache_begin, 0u);
  EXPECT_EQ(b.slices[1].cache_count, 1u);
  EXPECT_TRUE(b.slices[1].update_rows.empty());

  EXPECT_FALSE(plan.table(2).shared);
  EXPECT_TRUE(plan.table(2).rows.empty());

  // The partitions each read covers.
  EXPECT_EQ(plan.read_slices(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(plan.read_slices(1), (std::vector<int>{0}));
  EXPECT_EQ(plan.read_slices(2), (std::vector<int>{1}));
}

TEST(IterationPlanTest, ClockPlan) {
  // Repeated: Read a (0), PostRead a (1), PreUpdate a (2), Update a (3),
  // PreUpdate a (4), Update a (5), Clock (6). Prologue: PreUpdate b (0),
  // Update b (1).
  const Config config = TwoTables(/*num_shards=*/1, /*read_my_writes=*/false);
  OpSequence seq(&config);
  Read(seq, 0, {0});
  Update(seq, 0, {0});
  Update(seq, 0, {1});
  Clock(seq);
  Update(seq, 1, {0});
  ASSERT_TRUE(seq.Finish().ok());
  IterationPlan plan(config, seq);

  // Table a advances after its last Update, table b (no Update) at Clock().
  const std::vector<std::vector<TableId>> repeated = {{}, {}, {}, {}, {}, {0}, {1}};
  ASSERT_EQ(seq.ops(kRepeated).size(), repeated.size());
  for (size_t p = 0; p < repeated.size(); ++p)
    EXPECT_EQ(plan.advance_after(kRepeated, p), repeated[p]) << "op " << p;
  // In the prologue b advances after its Update, a at the prologue's end.
  ASSERT_EQ(seq.ops(kPrologue).size(), 2u);
  EXPECT_TRUE(plan.advance_after(kPrologue, 0).empty());
  EXPECT_EQ(plan.advance_after(kPrologue, 1), (std::vector<TableId>{1}));
  EXPECT_EQ(plan.prologue_end_tables(), (std::vector<TableId>{0}));
}

TEST(IterationPlanTest, Helpers) {
  EXPECT_EQ(CachedPositions({1, 4, 6, 9}, {9, 1, 6}), (std::vector<uint32_t>{3, 0, 2}));
  EXPECT_TRUE(ConsecutiveRows({4, 5, 6}));
  EXPECT_TRUE(ConsecutiveRows({4}));
  EXPECT_FALSE(ConsecutiveRows({4, 6}));
  EXPECT_FALSE(ConsecutiveRows({5, 4}));
}

}  // namespace
}  // namespace geeps::client
