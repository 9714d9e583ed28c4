// Tests of the device-side tables and the data path (src/client/data_path.cc)
// alone: a recorded sequence and its plan, the host backend, no cluster and
// no sockets. Each pass moves known values to known places.
#include "client/data_path.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "client/iteration_plan.h"
#include "client/oplog.h"
#include "common/mutex.h"
#include "device_copy.h"
#include "test_util.h"

namespace geeps::client {
namespace {

constexpr uint32_t kWidth = 2;

class DataPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.tables = {{"shared", 8, kWidth, false}, {"local", 6, kWidth, true}};
    // The host backend's updates sent from their own buffers (not the
    // default: Config::send_updates_in_place), which these tests cover.
    config_.send_updates_in_place = true;
    // Read rows 4, 1, 3 (cached rows 1, 3, 4 at positions 0, 1, 2); update
    // rows 3, 4 (a direct update: positions 1, 2); a local access of the
    // scattered rows 0 and 2.
    auto r = seq_.AddRead(0, {4, 1, 3}, 0);
    ASSERT_OK(r.status());
    ASSERT_OK(seq_.AddPostRead(*r));
    auto u = seq_.AddPreUpdate(0, {3, 4});
    ASSERT_OK(u.status());
    ASSERT_OK(seq_.AddUpdate(*u));
    auto l = seq_.AddLocalAccess(1, {0, 2}, /*fetch=*/true);
    ASSERT_OK(l.status());
    ASSERT_OK(seq_.AddPostLocalAccess(*l, /*keep=*/true));
    ASSERT_OK(seq_.AddClock());
    ASSERT_OK(seq_.Finish());

    auto device = device::CreateDevice(DeviceKind::kHost, device::DeviceOptions{});
    ASSERT_OK(device.status());
    device_ = std::move(device).value();
    auto stream = device_->CreateStream();
    ASSERT_OK(stream.status());
    stream_ = std::move(stream).value();
    plan_ = std::make_unique<IterationPlan>(config_, seq_);
    data_ =
        std::make_unique<DataPath>(&config_, 0, &seq_, device_.get(), stream_.get(), &counters_);
    ASSERT_OK(data_->BuildTables(*plan_));
    ASSERT_OK(data_->Allocate());
    plan_->PlaceCaches(data_->CacheOnDevice());
    data_->PlanSendInPlace(*plan_);
    oplog_ = std::make_unique<Oplog>(&config_, 0, device_.get(), stream_.get(), &counters_,
                                     [](int, TableId, OplogSlot*) { return Status::OK(); });
  }

  void TearDown() override {
    if (!data_) return;
    data_->DropManagers();
    EXPECT_FALSE(data_->UpdateBuffersStillSending());
    data_->FreeMemory();
    EXPECT_EQ(oplog_->FreeSlots(data_->tables(), std::chrono::milliseconds(0)), 0u);
  }

  void Upload(float* dst, const std::vector<float>& values) {
    ASSERT_OK(geeps::testing::UploadFloats(*device_, stream_.get(), dst, values));
  }

  std::vector<float> Download(const float* src, size_t floats) {
    StatusOr<std::vector<float>> out =
        geeps::testing::DownloadFloats(*device_, stream_.get(), src, floats);
    EXPECT_OK(out.status());
    return out.ok() ? *out : std::vector<float>(floats);
  }

  Config config_;
  OpSequence seq_{&config_};
  std::unique_ptr<device::Device> device_;
  std::unique_ptr<device::Stream> stream_;
  std::unique_ptr<IterationPlan> plan_;
  ClientCounters counters_;
  std::unique_ptr<DataPath> data_;
  std::unique_ptr<Oplog> oplog_;
};

TEST_F(DataPathTest, TablesFollowThePlan) {
  TableCache& t = data_->table(0);
  EXPECT_EQ(t.rows, (std::vector<uint64_t>{1, 3, 4}));
  EXPECT_EQ(t.device_rows, 3u);
  EXPECT_EQ(t.host_rows, 0u);
  ASSERT_EQ(t.runs.size(), 1u);
  EXPECT_EQ(Download(t.cache, 6), std::vector<float>(6, 0.0f));
  EXPECT_EQ(Download(t.oplog, 6), std::vector<float>(6, 0.0f));
  EXPECT_EQ(data_->tables()[1], nullptr);  // local
  EXPECT_EQ(data_->CacheOnDevice(), (std::vector<bool>{true, false}));
  EXPECT_EQ(data_->memory(), nullptr);  // no budget
  EXPECT_EQ(data_->swap(), nullptr);
  // The direct update's own buffer is host-readable on the host backend: it
  // is sent in place.
  ASSERT_TRUE(plan_->direct_update(0));
  EXPECT_NE(data_->update_buf(0).send_refs, nullptr);
  // By default (isolated) it is copied into its slot instead.
  data_->update_buf(0).send_refs.reset();
  config_.send_updates_in_place = false;
  data_->PlanSendInPlace(*plan_);
  EXPECT_EQ(data_->update_buf(0).send_refs, nullptr);
}

TEST_F(DataPathTest, GatherTakesTheRowsInRequestOrder) {
  TableCache& t = data_->table(0);
  Upload(t.cache, {10, 11, 30, 31, 40, 41});  // rows 1, 3, 4
  {
    common::MutexLock lock(&t.mu);
    ASSERT_OK(data_->Gather(0, t));
  }
  EXPECT_EQ(Download(data_->read_buf(0).buffer, 6), (std::vector<float>{40, 41, 10, 11, 30, 31}));
  EXPECT_EQ(counters_.gather_bytes.load(), 6 * 4);
}

TEST_F(DataPathTest, PrepareUpdateZeroesAndScatterAddsByPosition) {
  TableCache& t = data_->table(0);
  AccessBuffers& b = data_->update_buf(0);
  Upload(b.buffer, {9, 9, 9, 9});  // last clock's deltas
  auto buffer = data_->PrepareUpdate(0, *oplog_, std::chrono::milliseconds(1000));
  ASSERT_OK(buffer.status());
  EXPECT_EQ(*buffer, b.buffer);
  EXPECT_EQ(Download(*buffer, 4), std::vector<float>(4, 0.0f));
  EXPECT_EQ(counters_.zero_bytes.load(), 4 * 4);

  // Read-my-writes: into the oplog and the cache, at positions 1 and 2.
  Upload(t.cache, {10, 11, 30, 31, 40, 41});
  Upload(*buffer, {1, 2, 3, 4});
  ASSERT_OK(data_->Scatter(0, /*read_my_writes=*/true));
  EXPECT_TRUE(t.oplog_dirty);
  EXPECT_EQ(Download(t.oplog, 6), (std::vector<float>{0, 0, 1, 2, 3, 4}));
  EXPECT_EQ(Download(t.cache, 6), (std::vector<float>{10, 11, 31, 33, 43, 45}));
  EXPECT_EQ(counters_.scatter_add_bytes.load(), 2 * 4 * 4);
  // Without: the oplog only.
  ASSERT_OK(data_->Scatter(0, /*read_my_writes=*/false));
  EXPECT_EQ(Download(t.oplog, 6), (std::vector<float>{0, 0, 2, 4, 6, 8}));
  EXPECT_EQ(Download(t.cache, 6), (std::vector<float>{10, 11, 31, 33, 43, 45}));

  std::vector<float> out(4);
  ASSERT_OK(data_->CopyRows(0, {4, 3}, out.data()));
  EXPECT_EQ(out, (std::vector<float>{43, 45, 31, 33}));
  EXPECT_EQ(data_->CopyRows(0, {2}, out.data()).code(), StatusCode::kInvalidArgument);
}

TEST_F(DataPathTest, PrepareUpdateSkipsABufferZeroedWhileWaiting) {
  AccessBuffers& b = data_->update_buf(0);
  Upload(b.buffer, {9, 9, 9, 9});
  // Sent in place and released by ZeroMQ: zeroed while the thread would wait.
  b.zeroing = AccessBuffers::Zeroing::kPending;
  EXPECT_FALSE(data_->ZeroReleasedUpdateBuffers());
  EXPECT_EQ(b.zeroing, AccessBuffers::Zeroing::kDone);
  EXPECT_EQ(Download(b.buffer, 4), std::vector<float>(4, 0.0f));
  EXPECT_EQ(counters_.zero_bytes.load(), 4 * 4);
  auto buffer = data_->PrepareUpdate(0, *oplog_, std::chrono::milliseconds(1000));
  ASSERT_OK(buffer.status());
  EXPECT_EQ(counters_.zero_bytes.load(), 4 * 4);  // not zeroed again
  EXPECT_EQ(b.zeroing, AccessBuffers::Zeroing::kNone);
  // Still held by ZeroMQ: left as it is, and PreUpdate waits, then fails.
  b.zeroing = AccessBuffers::Zeroing::kPending;
  b.send_refs->store(1);
  EXPECT_TRUE(data_->ZeroReleasedUpdateBuffers());
  EXPECT_EQ(b.zeroing, AccessBuffers::Zeroing::kPending);
  EXPECT_EQ(data_->PrepareUpdate(0, *oplog_, std::chrono::milliseconds(5)).status().code(),
            StatusCode::kDeadlineExceeded);
  // A peer failure ends that wait at once with its status: ZeroMQ may
  // never release a message to a dead peer (a PreUpdate once waited out its
  // whole timeout after the process it sent to was killed).
  const auto start = std::chrono::steady_clock::now();
  const auto lost = [] { return UnavailableError("rank 0 (the coordinator) is lost"); };
  const StatusOr<float*> failed =
      data_->PrepareUpdate(0, *oplog_, std::chrono::milliseconds(20000), lost);
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable) << failed.status();
  EXPECT_NE(failed.status().message().find("rank 0"), std::string::npos) << failed.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  b.send_refs->store(0);
}

TEST_F(DataPathTest, ScatteredLocalRowsAreGatheredAndWrittenBack) {
  auto rows = data_->OpenLocal(0);
  ASSERT_OK(rows.status());
  EXPECT_EQ(Download(*rows, 4), std::vector<float>(4, 0.0f));
  Upload(*rows, {1, 2, 3, 4});
  ASSERT_OK(data_->CloseLocal(0));
  std::vector<float> out(6);
  ASSERT_OK(data_->CopyRows(1, {0, 1, 2}, out.data()));
  EXPECT_EQ(out, (std::vector<float>{1, 2, 0, 0, 3, 4}));
  // Fetched again on the next open.
  rows = data_->OpenLocal(0);
  ASSERT_OK(rows.status());
  EXPECT_EQ(Download(*rows, 4), (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace geeps::client
