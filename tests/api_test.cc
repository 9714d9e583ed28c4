// The GeePS API on an embedded cluster: usage errors, local data,
// read-my-writes, the tail of the last row, timeouts and shutdown.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "geeps/embedded_cluster.h"
#include "host_view.h"
#include "test_util.h"
#include "transport/socket_util.h"

namespace geeps {
namespace {

using std::chrono::milliseconds;
using testing::HostView;
using testing::ReadBuffer;
using testing::WriteBuffer;

Config OneTable(int workers = 1) {
  Config c;
  c.num_workers = workers;
  c.tables = {{"w", 10, 4}, {"scratch", 8, 2, /*local=*/true}};
  c.timeout = milliseconds(5000);
  return c;
}

std::unique_ptr<EmbeddedCluster> StartOrDie(const Config& c) {
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(cluster).value() : nullptr;
}

// StatusOr::value() (and * and ->) of an error stops the process with the
// error's message instead of reading a value that is not there.
TEST(StatusOrDeathTest, ValueOfAnErrorStopsNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  StatusOr<int> bad = InvalidArgumentError("no such row");
  EXPECT_DEATH((void)bad.value(), "value\\(\\) of an error: .*no such row");
  EXPECT_DEATH((void)*bad, "no such row");
  StatusOr<std::string> bad_string = NotFoundError("no such file");
  EXPECT_DEATH((void)bad_string->size(), "no such file");
  StatusOr<int> good = 7;
  EXPECT_EQ(good.value(), 7);
  EXPECT_EQ(*good, 7);
}

TEST(ConfigTest, RejectsBadConfigs) {
  Config c = OneTable();
  EXPECT_OK(ValidateConfig(c));
  Config zero_width = c;
  zero_width.tables[0].row_width = 0;
  Status st = ValidateConfig(zero_width);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("row_width"), std::string::npos) << st;
  EXPECT_FALSE(EmbeddedCluster::Start(zero_width).ok());
  Config zero_rows = c;
  zero_rows.tables[0].num_rows = 0;
  EXPECT_EQ(ValidateConfig(zero_rows).code(), StatusCode::kInvalidArgument);
  Config no_workers = c;
  no_workers.num_workers = 0;
  EXPECT_EQ(ValidateConfig(no_workers).code(), StatusCode::kInvalidArgument);
  Config no_tables = c;
  no_tables.tables.clear();
  EXPECT_EQ(ValidateConfig(no_tables).code(), StatusCode::kInvalidArgument);
  Config dup = c;
  dup.tables[1].name = "w";
  EXPECT_EQ(ValidateConfig(dup).code(), StatusCode::kInvalidArgument);
  Config tiny_parts = c;
  tiny_parts.pipeline_part_bytes = 63;
  st = ValidateConfig(tiny_parts);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("pipeline_part_bytes"), std::string::npos) << st;
  tiny_parts.pipeline_part_bytes = 64;
  EXPECT_OK(ValidateConfig(tiny_parts));
  Config long_spin = c;
  long_spin.spin_wait_us = 100001;
  st = ValidateConfig(long_spin);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("spin_wait_us"), std::string::npos) << st;
  long_spin.spin_wait_us = 100000;
  EXPECT_OK(ValidateConfig(long_spin));
  Config huge = c;
  huge.num_shards = 4096;
  huge.num_channels = 64;
  EXPECT_EQ(ValidateConfig(huge).code(), StatusCode::kInvalidArgument);
  Config bad_channels = c;
  bad_channels.num_channels = 0;
  EXPECT_EQ(ValidateConfig(bad_channels).code(), StatusCode::kInvalidArgument);
}

// Starts (and shuts down) a cluster of `c` with the soft descriptor limit
// at `limit` for the Start; returns Start's status.
Status StartUnderDescriptorLimit(const Config& c, rlim_t limit) {
  rlimit saved{};
  if (getrlimit(RLIMIT_NOFILE, &saved) != 0) return InternalError("getrlimit failed");
  rlimit low = saved;
  low.rlim_cur = limit;
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) return InternalError("setrlimit failed");
  auto cluster = EmbeddedCluster::Start(c);
  if (setrlimit(RLIMIT_NOFILE, &saved) != 0) return InternalError("setrlimit (restore) failed");
  if (!cluster.ok()) return cluster.status();
  return (*cluster)->Shutdown();
}

TEST(ConfigTest, TooManyPartitionsForTheDescriptorLimitIsAClearError) {
  Config c = OneTable();
  c.num_shards = 60;
  c.num_channels = 2;
  const Status st = StartUnderDescriptorLimit(c, 256);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("file descriptors"), std::string::npos) << st;
}

// Raises the soft descriptor limit to at least `want` (within the hard
// limit); false when the hard limit is lower.
bool RaiseDescriptorLimit(rlim_t want, rlimit* saved) {
  if (getrlimit(RLIMIT_NOFILE, saved) != 0) return false;
  if (saved->rlim_cur != RLIM_INFINITY && saved->rlim_cur >= want) return true;
  if (saved->rlim_max != RLIM_INFINITY && saved->rlim_max < want) return false;
  rlimit raised = *saved;
  raised.rlim_cur = want;
  return setrlimit(RLIMIT_NOFILE, &raised) == 0;
}

// 2 workers x 200 shards x 3 channels: about 1800 sockets in one context.
Config ManySockets() {
  Config c;
  c.num_workers = 2;
  c.num_shards = 200;
  c.num_channels = 3;
  c.tables = {{"t", 1200, 2}};
  return c;
}

// 2 workers x 200 shards x 3 channels need about 1800 sockets, more than
// ZeroMQ's default cap of 1023 per context: the cluster raises the cap and
// the job runs (it used to fail with "Too many open files").
TEST(ConfigTest, MoreSocketsThanZeroMQsDefaultCapStillRun) {
  rlimit saved{};
  if (!RaiseDescriptorLimit(8192, &saved))
    GTEST_SKIP() << "the hard descriptor limit is below 8192 (ulimit -Hn); this shape needs ~3000";
  const Config c = ManySockets();
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, RowRange(0, 1200), 0));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
    GEEPS_ASSIGN_OR_RETURN(UpdateHandle u, ps.VirtualPreUpdate(0, RowRange(0, 1200)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(u));
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    std::vector<float> ones(2400, 1.0f), seen(2400);
    for (int i = 0; i < 3; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(r));
      GEEPS_RETURN_IF_ERROR(ps.CopyToHost(seen.data(), v, seen.size()));
      for (float x : seen)
        if (x != 2.0f * i)
          return InternalError("clock " + std::to_string(i) + ": read " + std::to_string(x));
      GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
      GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, ones.data(), ones.size()));
      GEEPS_RETURN_IF_ERROR(ps.Update(u));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    return Status::OK();
  }));
  ASSERT_OK((*cluster)->Shutdown());
  setrlimit(RLIMIT_NOFILE, &saved);
}

// Where the descriptor limit keeps the cap at ZeroMQ's default, the same
// shape is a kResourceExhausted naming the sockets, not a failed socket.
TEST(ConfigTest, TooManySocketsForTheCapIsAClearError) {
  const Config c = ManySockets();
  const Status st = StartUnderDescriptorLimit(c, 1024);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("ZeroMQ sockets"), std::string::npos) << st;
  EXPECT_NE(st.message().find("2 workers x 200 shards x 3 channels"), std::string::npos) << st;
}

// The shape for a process of a multi-process job (2 workers x 90
// shards x 3 channels, CURVE): more sockets than ZeroMQ's default cap, which
// a default context refuses by name and the library's context takes.
TEST(ConfigTest, AProcessContextIsSizedForItsJob) {
  rlimit saved{};
  if (!RaiseDescriptorLimit(8192, &saved))
    GTEST_SKIP() << "the hard descriptor limit is below 8192 (ulimit -Hn)";
  Config c;
  c.num_workers = 2;
  c.num_shards = 90;
  c.num_channels = 3;
  const transport::SocketNeeds plain = transport::ProcessNeeds(c, 1, 3, 4, false);
  const transport::SocketNeeds curve = transport::ProcessNeeds(c, 1, 3, 4, true);
  EXPECT_GT(curve.sockets, plain.sockets);
  EXPECT_GT(curve.sockets, 1023u);
  EXPECT_GT(plain.descriptors, plain.sockets);
  zmq::context_t stock;  // ZeroMQ's default cap
  Status refused = transport::CheckSocketNeeds(stock, curve, "Process::Join: rank 0");
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find(std::to_string(curve.sockets) + " ZeroMQ sockets"),
            std::string::npos)
      << refused;
  auto sized = transport::NewContext();
  ASSERT_OK(sized.status());
  EXPECT_OK(transport::CheckSocketNeeds(**sized, curve, "Process::Join: rank 0"));
  setrlimit(RLIMIT_NOFILE, &saved);
}

TEST(ConfigTest, EnvironmentOverrides) {
  Config c = OneTable();
  setenv("GEEPS_NUM_CHANNELS", "3", 1);
  setenv("GEEPS_READ_MY_WRITES", "1", 1);
  setenv("GEEPS_DEVICE", "host", 1);
  EXPECT_OK(ApplyEnvironment(&c));
  EXPECT_EQ(c.num_channels, 3);
  EXPECT_TRUE(c.read_my_writes);
  EXPECT_EQ(c.device, DeviceKind::kHost);
  setenv("GEEPS_NUM_CHANNELS", "three", 1);
  Status st = ApplyEnvironment(&c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("GEEPS_NUM_CHANNELS"), std::string::npos);
  unsetenv("GEEPS_NUM_CHANNELS");
  unsetenv("GEEPS_READ_MY_WRITES");
  unsetenv("GEEPS_DEVICE");
}

TEST(UsageTest, RecordingErrors) {
  auto cluster = StartOrDie(OneTable());
  ASSERT_TRUE(cluster);
  GeePS& ps = *cluster->worker(0);
  EXPECT_EQ(ps.VirtualRead(7, {0}).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ps.VirtualRead(0, {10}).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ps.VirtualRead(0, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ps.VirtualRead(0, {1, 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ps.VirtualRead(0, {1}, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ps.VirtualRead(1, {0}).status().code(), StatusCode::kInvalidArgument);  // local
  EXPECT_EQ(ps.VirtualLocalAccess(0, {0}, true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ps.VirtualPostRead(ReadHandle{}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ps.VirtualUpdate(UpdateHandle{3}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ps.FinishVirtualIteration().code(), StatusCode::kFailedPrecondition);
  auto r = ps.VirtualRead(0, {1, 2});
  ASSERT_OK(r.status());
  EXPECT_EQ(ps.VirtualClock().code(), StatusCode::kFailedPrecondition);  // read open
  ASSERT_OK(ps.VirtualPostRead(*r));
  EXPECT_EQ(ps.VirtualPostRead(*r).code(), StatusCode::kFailedPrecondition);  // twice
  EXPECT_EQ(ps.StartIterations().code(), StatusCode::kFailedPrecondition);
  auto read_result = ps.Read(*r);
  EXPECT_EQ(read_result.status().code(), StatusCode::kFailedPrecondition);
  ASSERT_OK(ps.VirtualClock());
  EXPECT_EQ(ps.VirtualClock().code(), StatusCode::kFailedPrecondition);
  ASSERT_OK(ps.FinishVirtualIteration());
  EXPECT_EQ(ps.VirtualRead(0, {1}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ps.FinishVirtualIteration().code(), StatusCode::kFailedPrecondition);
}

TEST(UsageTest, RealCallErrorsLeaveTheWorkerUsable) {
  auto cluster = StartOrDie(OneTable());
  ASSERT_TRUE(cluster);
  GeePS& ps = *cluster->worker(0);
  auto r = ps.VirtualRead(0, RowRange(0, 10));
  ASSERT_OK(r.status());
  ASSERT_OK(ps.VirtualPostRead(*r));
  auto u = ps.VirtualPreUpdate(0, {3, 9});
  ASSERT_OK(u.status());
  ASSERT_OK(ps.VirtualUpdate(*u));
  ASSERT_OK(ps.VirtualClock());
  ASSERT_OK(ps.FinishVirtualIteration());
  // Before StartIterations.
  Status st = ps.Read(*r).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("StartIterations"), std::string::npos) << st;
  ASSERT_OK(ps.StartIterations());
  EXPECT_EQ(ps.StartIterations().code(), StatusCode::kFailedPrecondition);
  for (int i = 0; i < 3; ++i) {
    // Out of order: Update without PreUpdate, Clock too early, unknown handle.
    st = ps.Update(*u);
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(st.message().find("expected Read(read#0)"), std::string::npos) << st;
    EXPECT_EQ(ps.Clock().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(ps.Read(ReadHandle{5}).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(ps.PreUpdate(*u).status().code(), StatusCode::kFailedPrecondition);
    // Then the right calls still work.
    auto buf = ps.Read(*r);
    ASSERT_OK(buf.status());
    auto values = ReadBuffer(ps, *buf, 10 * 4);
    ASSERT_OK(values.status());
    EXPECT_EQ((*values)[3 * 4], static_cast<float>(i));  // own update of the last clock
    EXPECT_EQ((*values)[0], 0.0f);
    EXPECT_EQ(ps.Update(*u).code(), StatusCode::kFailedPrecondition);
    ASSERT_OK(ps.PostRead(*r));
    auto delta = ps.PreUpdate(*u);
    ASSERT_OK(delta.status());
    EXPECT_EQ(ps.Clock().code(), StatusCode::kFailedPrecondition);  // Update missing
    ASSERT_OK(WriteBuffer(ps, *delta, {1.0f}));
    ASSERT_OK(ps.Update(*u));
    ASSERT_OK(ps.Clock());
  }
  EXPECT_EQ(ps.CopyRows(0, {4}, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ps.CopyRows(0, {40}, nullptr).code(), StatusCode::kOutOfRange);
  ASSERT_OK(ps.Shutdown());
  ASSERT_OK(ps.Shutdown());  // idempotent
  st = ps.Read(*r).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("shut down"), std::string::npos) << st;
  EXPECT_EQ(ps.Clock().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ps.Sync().code(), StatusCode::kFailedPrecondition);
}

TEST(UsageTest, BudgetTooSmallIsAClearError) {
  Config c = OneTable();
  c.device_memory_budget = 64;
  auto cluster = StartOrDie(c);
  ASSERT_TRUE(cluster);
  GeePS& ps = *cluster->worker(0);
  auto r = ps.VirtualRead(0, RowRange(0, 10));
  ASSERT_OK(r.status());
  ASSERT_OK(ps.VirtualPostRead(*r));
  ASSERT_OK(ps.VirtualClock());
  Status st = ps.FinishVirtualIteration();
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("64 bytes"), std::string::npos) << st;
  EXPECT_EQ(ps.StartIterations().code(), StatusCode::kFailedPrecondition);
}

TEST(LocalAccessTest, FetchAndKeep) {
  auto cluster = StartOrDie(OneTable());
  ASSERT_TRUE(cluster);
  GeePS& ps = *cluster->worker(0);
  // Rows 1..3 (contiguous) kept; rows {6, 0} (scattered) kept; row 7 scratch.
  auto a = ps.VirtualLocalAccess(1, {1, 2, 3}, true);
  ASSERT_OK(a.status());
  ASSERT_OK(ps.VirtualPostLocalAccess(*a, true));
  auto b = ps.VirtualLocalAccess(1, {6, 0}, true);
  ASSERT_OK(b.status());
  ASSERT_OK(ps.VirtualPostLocalAccess(*b, true));
  auto out = ps.VirtualLocalAccess(1, {7, 4}, false);
  ASSERT_OK(out.status());
  ASSERT_OK(ps.VirtualPostLocalAccess(*out, false));
  ASSERT_OK(ps.VirtualClock());
  ASSERT_OK(ps.FinishVirtualIteration());
  ASSERT_OK(ps.StartIterations());
  for (int i = 0; i < 4; ++i) {
    auto pa = ps.LocalAccess(*a);
    ASSERT_OK(pa.status());
    auto va = HostView::Load(ps, *pa, 6);
    ASSERT_OK(va.status());
    for (int k = 0; k < 6; ++k) {
      EXPECT_EQ((*va)[k], static_cast<float>(i * (k + 1)));
      (*va)[k] += static_cast<float>(k + 1);
    }
    ASSERT_OK(va->Store());
    ASSERT_OK(ps.PostLocalAccess(*a));
    auto pb = ps.LocalAccess(*b);
    ASSERT_OK(pb.status());
    auto vb = HostView::Load(ps, *pb, 4);
    ASSERT_OK(vb.status());
    EXPECT_EQ((*vb)[0], static_cast<float>(2 * i));  // row 6
    EXPECT_EQ((*vb)[2], static_cast<float>(-i));     // row 0
    (*vb)[0] += 2;
    (*vb)[2] -= 1;
    ASSERT_OK(vb->Store());
    ASSERT_OK(ps.PostLocalAccess(*b));
    auto po = ps.LocalAccess(*out);
    ASSERT_OK(po.status());
    ASSERT_OK(WriteBuffer(ps, *po, std::vector<float>(4, 99.0f)));  // dropped (keep=false)
    ASSERT_OK(ps.PostLocalAccess(*out));
    ASSERT_OK(ps.Clock());
  }
  std::vector<float> rows(4);
  ASSERT_OK(ps.CopyRows(1, {6, 0}, rows.data()));
  EXPECT_EQ(rows[0], 8.0f);
  EXPECT_EQ(rows[2], -4.0f);
  ASSERT_OK(ps.CopyRows(1, {7}, rows.data()));
  EXPECT_EQ(rows[0], 0.0f) << "keep=false on a scattered access must not write back";
}

// Read-my-writes: a worker's own updates are visible at once, also on top of
// refreshes that do not include them yet.
void RunReadMyWrites(bool rmw) {
  Config c = OneTable(2);
  c.read_my_writes = rmw;
  auto cluster = StartOrDie(c);
  ASSERT_TRUE(cluster);
  std::atomic<int> violations{0}, own_seen{0};
  ASSERT_OK(cluster->RunWorkers([&](GeePS& ps) -> Status {
    // Update first, then read the same rows, slack 2.
    GEEPS_ASSIGN_OR_RETURN(UpdateHandle u, ps.VirtualPreUpdate(0, RowRange(0, 10)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(u));
    GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, RowRange(0, 10), 2));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    // Worker w adds 1 to column w of every row; the other column is the peer's.
    const int w = ps.rank();
    for (int i = 0; i < 10; ++i) {
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
      std::vector<float> deltas(10 * 4, 0.0f);
      for (int row = 0; row < 10; ++row) deltas[row * 4 + w] = 1.0f;
      GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, d, deltas));
      GEEPS_RETURN_IF_ERROR(ps.Update(u));
      GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(r));
      GEEPS_ASSIGN_OR_RETURN(std::vector<float> row0, ReadBuffer(ps, v, 4));
      const float own = row0[w], peer = row0[1 - w];
      if (rmw && own != static_cast<float>(i + 1)) violations++;
      // Without read-my-writes the own part comes from the servers only: at
      // least the clocks the slack guarantees, at most all sent so far.
      if (!rmw && (own < static_cast<float>(std::max(0, i - 2)) || own > static_cast<float>(i + 1)))
        violations++;
      if (own == static_cast<float>(i + 1)) own_seen++;
      if (peer < static_cast<float>(std::max(0, i - 2)) || peer > static_cast<float>(i + 3))
        violations++;
      GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
      if (w == 1) std::this_thread::sleep_for(milliseconds(5));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    return Status::OK();
  }));
  EXPECT_EQ(violations.load(), 0);
  if (rmw) EXPECT_EQ(own_seen.load(), 20);
}

TEST(ReadMyWritesTest, OwnUpdatesVisibleAtOnce) { RunReadMyWrites(true); }
TEST(ReadMyWritesTest, WithoutItOwnUpdatesWaitForTheServer) { RunReadMyWrites(false); }

// A table of 10 floats in rows of width 4: the last row's 2 tail floats are
// written once by the prologue and never touched by updates of the 10 floats.
TEST(TailTest, LastRowTailIsNeverClobbered) {
  Config c;
  c.num_workers = 2;
  c.num_shards = 2;
  c.tables = {{"layer", RowsFor(10, 4), 4}};
  auto cluster = StartOrDie(c);
  ASSERT_TRUE(cluster);
  ASSERT_OK(cluster->RunWorkers([&](GeePS& ps) -> Status {
    const auto rows = RowRange(0, 3);
    GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, rows));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
    GEEPS_ASSIGN_OR_RETURN(UpdateHandle u, ps.VirtualPreUpdate(0, rows));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(u));
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    UpdateHandle init;
    if (ps.rank() == 0) {
      GEEPS_ASSIGN_OR_RETURN(init, ps.VirtualPreUpdate(0, rows));
      GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(init));
    }
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    if (ps.rank() == 0) {
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(init));
      GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, d + 10, {42.0f, -7.0f}));
      GEEPS_RETURN_IF_ERROR(ps.Update(init));
    }
    for (int i = 0; i < 5; ++i) {
      GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(r));
      GEEPS_ASSIGN_OR_RETURN(std::vector<float> read, ReadBuffer(ps, v, 12));
      W_CHECK(read[10] == 42.0f && read[11] == -7.0f, "tail clobbered");
      W_CHECK(read[9] == static_cast<float>(2 * i), "last real float wrong");
      GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
      GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
      GEEPS_ASSIGN_OR_RETURN(std::vector<float> zeroed, ReadBuffer(ps, d, 12));
      W_CHECK(zeroed[10] == 0.0f && zeroed[11] == 0.0f, "PreUpdate buffer not zeroed");
      // Only the 10 real floats.
      GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, d, std::vector<float>(10, 1.0f)));
      GEEPS_RETURN_IF_ERROR(ps.Update(u));
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    return Status::OK();
  }));
}

// One worker never clocks: the other's Read fails after Config::timeout,
// naming what it waited for.
TEST(FailureTest, ReadTimesOutWhenAPeerNeverClocks) {
  Config c = OneTable(2);
  c.timeout = milliseconds(300);
  auto cluster = StartOrDie(c);
  ASSERT_TRUE(cluster);
  GeePS& ps = *cluster->worker(0);
  auto r = ps.VirtualRead(0, {0});
  ASSERT_OK(r.status());
  ASSERT_OK(ps.VirtualPostRead(*r));
  ASSERT_OK(ps.VirtualClock());
  ASSERT_OK(ps.FinishVirtualIteration());
  ASSERT_OK(ps.StartIterations());
  const auto start = std::chrono::steady_clock::now();
  Status st = ps.Read(*r).status();
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("clock >= 1"), std::string::npos) << st;
  EXPECT_GE(waited, milliseconds(250));
  EXPECT_LT(waited, milliseconds(3000));
}

// A worker that fails makes its peers' waiting calls fail at once with
// kUnavailable naming it, long before their deadline.
TEST(FailureTest, AFailedWorkerFailsItsPeersFast) {
  Config c = OneTable(3);
  c.timeout = milliseconds(20000);
  auto cluster = StartOrDie(c);
  ASSERT_TRUE(cluster);
  std::atomic<int> unavailable{0};
  const auto start = std::chrono::steady_clock::now();
  Status st = cluster->RunWorkers([&](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, RowRange(0, 10)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    if (ps.rank() == 1) return InternalError("the application gave up");
    Status loop = [&]() -> Status {
      for (int i = 0; i < 100; ++i) {
        GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(r));
        (void)v;
        GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
        GEEPS_RETURN_IF_ERROR(ps.Clock());
      }
      return Status::OK();
    }();
    if (loop.code() == StatusCode::kUnavailable) {
      unavailable++;
      W_CHECK(loop.message().find("worker 1 failed") != std::string::npos, loop.ToString());
    }
    return loop;
  });
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  EXPECT_NE(st.message().find("worker 1"), std::string::npos) << st;
  EXPECT_EQ(unavailable.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
}

// After a peer failed, every iteration call returns kUnavailable naming it,
// the calls that never wait (PostRead, PreUpdate, Update, Clock) too, as
// docs/api.md ("Errors") says: a trainer checks every Status.
TEST(FailureTest, AfterAPeerFailsEveryIterationCallSaysSo) {
  Config c = OneTable(2);
  c.timeout = milliseconds(20000);
  auto cluster = StartOrDie(c);
  ASSERT_TRUE(cluster);
  Status st = cluster->RunWorkers([&](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                           testing::RecordReadUpdateClock(ps, 0, RowRange(0, 10)));
    if (ps.rank() == 1) return InternalError("the application gave up");
    // Iterations until a call fails: worker 1 never clocks, so at the
    // latest the second Read does.
    Status first;
    for (int i = 0; i < 100 && first.ok(); ++i) {
      StatusOr<const float*> v = ps.Read(h.read);
      first = v.status();
      if (first.ok()) first = ps.PostRead(h.read);
      StatusOr<float*> d = first.ok() ? ps.PreUpdate(h.update) : StatusOr<float*>(first);
      if (first.ok()) first = d.status();
      if (first.ok()) first = ps.Update(h.update);
      if (first.ok()) first = ps.Clock();
    }
    W_CHECK(first.code() == StatusCode::kUnavailable, first.ToString());
    const Status later[] = {ps.PostRead(h.read), ps.PreUpdate(h.update).status(),
                            ps.Update(h.update), ps.Clock(), ps.Read(h.read).status()};
    for (const Status& l : later) {
      W_CHECK(l.code() == StatusCode::kUnavailable, l.ToString());
      W_CHECK(l.message().find("worker 1 failed") != std::string::npos, l.ToString());
    }
    return first;
  });
  // Worker 1's error, the cause (a failed check of worker 0 would come first).
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  EXPECT_NE(st.message().find("worker 1: the application gave up"), std::string::npos) << st;
}

// Shutdown while workers are blocked in Read returns promptly, the blocked
// calls return kCancelled, and no thread is left behind.
TEST(ShutdownTest, WithWorkInFlightIsPromptAndLeaksNoThread) {
  // Sanitizer runtimes start a helper thread of their own with the first
  // thread the process makes: make one before counting.
  std::thread([] {}).join();
  const int threads_before = testing::ThreadCount();
  {
    Config c = OneTable(3);
    c.num_shards = 2;
    c.num_channels = 2;
    c.timeout = milliseconds(20000);
    // The host's threads are the ones counted: a GPU's driver starts helper
    // threads with its first context that live until the process ends.
    c.device = DeviceKind::kHost;
    auto cluster = StartOrDie(c);
    ASSERT_TRUE(cluster);
    Status results[2];
    std::vector<std::thread> apps;
    for (int w = 0; w < 2; ++w) {
      apps.emplace_back([&, w] {
        results[w] = [&]() -> Status {
          GeePS& ps = *cluster->worker(w);
          GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, RowRange(0, 10)));
          GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
          GEEPS_ASSIGN_OR_RETURN(UpdateHandle u, ps.VirtualPreUpdate(0, RowRange(0, 10)));
          GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(u));
          GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
          GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
          GEEPS_RETURN_IF_ERROR(ps.StartIterations());
          for (;;) {  // worker 2 never starts, so this blocks in Read
            GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(r));
            (void)v;
            GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
            GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
            GEEPS_RETURN_IF_ERROR(WriteBuffer(ps, d, {1.0f}));
            GEEPS_RETURN_IF_ERROR(ps.Update(u));
            GEEPS_RETURN_IF_ERROR(ps.Clock());
          }
        }();
      });
    }
    // Each worker's first Read waits for worker 2, which never starts, so
    // it cannot return before the Shutdown. It counts as waiting just before
    // it waits, and from then on a Shutdown cancels it: wait for that count
    // (an event, not a sleep).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int w = 0; w < 2; ++w) {
      while (cluster->worker(w)->GetStats().reads_waited < 1 &&
             std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(milliseconds(1));
      EXPECT_EQ(cluster->worker(w)->GetStats().reads_waited, 1) << "worker " << w;
    }
    EXPECT_GT(testing::ThreadCount(), threads_before);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_OK(cluster->Shutdown());
    for (auto& t : apps) t.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
    for (const Status& st : results) EXPECT_EQ(st.code(), StatusCode::kCancelled) << st;
  }
  // At most as many as before: the thread joined before counting can still
  // be listed in /proc for a moment after its join (seen once: 2 before, 1
  // after), so "before" may be one high; a leaked thread makes it more.
  EXPECT_LE(testing::ThreadCount(), threads_before);
}

// Destroying the cluster while RunWorkers runs (docs forbid it; an
// exception unwinding main, a test that gives up, will do it): never a
// crash, whenever it comes. The workers' calls fail, the functions return,
// RunWorkers returns their error, and only then is the cluster freed. It
// segfaulted in 5 of 12 runs before the destructor waited for RunWorkers.
TEST(ShutdownTest, DestroyingTheClusterDuringRunWorkersIsNeverACrash) {
  constexpr int kRounds = 50;
  int ended_with_error = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Config c = OneTable(2);
    c.timeout = milliseconds(10000);
    auto cluster = StartOrDie(c);
    ASSERT_TRUE(cluster);
    std::atomic<int> entered{0}, started{0};
    Status result;
    EmbeddedCluster* running = cluster.get();
    std::thread caller([&] {
      result = running->RunWorkers([&](GeePS& ps) -> Status {
        entered.fetch_add(1);
        GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                               testing::RecordReadUpdateClock(ps, 0, RowRange(0, 10)));
        started.fetch_add(1);
        for (int i = 0; i < 100000; ++i) {
          GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(h.read));
          (void)v;
          GEEPS_RETURN_IF_ERROR(ps.PostRead(h.read));
          GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.update));
          (void)d;
          GEEPS_RETURN_IF_ERROR(ps.Update(h.update));
          GEEPS_RETURN_IF_ERROR(ps.Clock());
        }
        return Status::OK();
      });
    });
    // Once RunWorkers runs (calling a destroyed cluster is beyond help);
    // early in some rounds (while the workers record), later in others
    // (while they iterate).
    while (entered.load() < 1) std::this_thread::yield();
    if (round % 2 == 1) {
      while (started.load() < 2) std::this_thread::yield();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 10)));
    cluster.reset();
    caller.join();
    if (!result.ok()) {
      ++ended_with_error;
      EXPECT_TRUE(result.code() == StatusCode::kCancelled ||
                  result.code() == StatusCode::kFailedPrecondition ||
                  result.code() == StatusCode::kUnavailable)
          << result;
    }
  }
  EXPECT_GT(ended_with_error, 0);  // the destruction did come during the runs
}

}  // namespace
}  // namespace geeps
