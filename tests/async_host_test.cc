// The host backend's asynchronous mode (DeviceOptions::async_streams,
// Config::async_host_streams) and the API that orders host work and host
// copies with a worker's compute stream (GeePS::EnqueueHostWork,
// SynchronizeComputeStream, CopyToHost, CopyFromHost).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "device/device.h"
#include "geeps/embedded_cluster.h"
#include "test_util.h"

namespace geeps {
namespace {

std::unique_ptr<device::Device> MakeHost(bool async) {
  device::DeviceOptions options;
  options.async_streams = async;
  auto d = device::CreateDevice(DeviceKind::kHost, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(d).value() : nullptr;
}

// In the asynchronous mode no operation runs on the thread that waits for
// it (the default mode may run an idle stream's work inline there, when the
// stream's thread has not picked it up yet: a timing matter, not asserted).
TEST(AsyncHostStreamsTest, SynchronizeNeverRunsWorkInline) {
  auto dev = MakeHost(/*async=*/true);
  ASSERT_NE(dev, nullptr);
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  int inline_runs = 0, runs = 0;
  for (int i = 0; i < 40; ++i) {
    std::thread::id ran_on;
    ASSERT_OK(dev->HostFunction(
        [&ran_on, &runs] {
          ran_on = std::this_thread::get_id();
          ++runs;
        },
        stream->get()));
    ASSERT_OK(dev->Synchronize(stream->get()));
    inline_runs += ran_on == std::this_thread::get_id();
  }
  EXPECT_EQ(runs, 40);
  EXPECT_EQ(inline_runs, 0);
}

// Host functions keep stream order with the device's own operations, also
// when each operation is delayed at random.
TEST(AsyncHostStreamsTest, HostFunctionsKeepStreamOrder) {
  auto dev = MakeHost(/*async=*/true);
  ASSERT_NE(dev, nullptr);
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  constexpr size_t kN = 256;
  auto buffer = dev->Allocate(kN * sizeof(float));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  float* d = static_cast<float*>(*buffer);
  std::vector<float> host(kN);
  std::vector<int> seen;
  for (int round = 0; round < 20; ++round) {
    const float value = static_cast<float>(round);
    ASSERT_OK(dev->Fill(d, value, kN, stream->get()));
    // Reads the buffer on the host in stream order (the host backend's
    // device memory is host memory).
    ASSERT_OK(dev->HostFunction([d, &seen] { seen.push_back(static_cast<int>(d[kN - 1])); },
                                stream->get()));
  }
  ASSERT_OK(dev->Copy(host.data(), d, kN * sizeof(float), device::CopyKind::kDeviceToHost,
                      stream->get()));
  ASSERT_OK(dev->Synchronize(stream->get()));
  ASSERT_EQ(seen.size(), 20u);
  for (int round = 0; round < 20; ++round) EXPECT_EQ(seen[round], round);
  EXPECT_EQ(host[0], 19.0f);
  dev->Free(d);
}

// An event orders a second stream after work that runs late on the first.
TEST(AsyncHostStreamsTest, EventsOrderStreamsAcrossDelays) {
  auto dev = MakeHost(/*async=*/true);
  ASSERT_NE(dev, nullptr);
  auto a = dev->CreateStream();
  auto b = dev->CreateStream();
  auto e = dev->CreateEvent();
  ASSERT_TRUE(a.ok() && b.ok() && e.ok());
  std::atomic<int> step{0};
  int seen_by_b = -1;
  ASSERT_OK(dev->HostFunction(
      [&step] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        step = 1;
      },
      a->get()));
  ASSERT_OK(dev->Record(e->get(), a->get()));
  ASSERT_OK(dev->StreamWait(b->get(), e->get()));
  ASSERT_OK(dev->HostFunction([&] { seen_by_b = step.load(); }, b->get()));
  ASSERT_OK(dev->Synchronize(b->get()));
  EXPECT_EQ(seen_by_b, 1);
  ASSERT_OK(dev->Synchronize(a->get()));
}

Config OneTable() {
  Config c;
  c.num_workers = 1;
  c.device = DeviceKind::kHost;
  c.tables = {{"W", 4, 8}};
  c.read_my_writes = true;  // the first iteration's read sees its own update
  c.async_host_streams = true;
  c.timeout = std::chrono::milliseconds(10000);
  return c;
}

// CopyToHost / CopyFromHost / EnqueueHostWork / SynchronizeComputeStream on
// a worker: phases, arguments, and order with the worker's own work.
TEST(ComputeStreamApiTest, CopiesAndHostWorkFollowTheStream) {
  // The host work below reads device memory: a host-backend-only test.
  unsetenv("GEEPS_HOST_OPAQUE_POINTERS");
  auto cluster = EmbeddedCluster::Start(OneTable());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_OK((*cluster)->RunWorkers([](GeePS& ps) -> Status {
    float host[4] = {1, 2, 3, 4};
    // No device before FinishVirtualIteration.
    Status early = ps.CopyToHost(host, host, 4);
    W_CHECK(early.code() == StatusCode::kFailedPrecondition, early.ToString());
    W_CHECK(early.message().find("FinishVirtualIteration") != std::string::npos, early.ToString());
    W_CHECK(ps.EnqueueHostWork([] {}).code() == StatusCode::kFailedPrecondition, "enqueue early");
    GEEPS_ASSIGN_OR_RETURN(UpdateHandle u, ps.VirtualPreUpdate(0, RowRange(0, 4)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(u));
    GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, RowRange(0, 4)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
    W_CHECK(ps.CopyToHost(nullptr, d, 4).code() == StatusCode::kInvalidArgument, "null host");
    W_CHECK(ps.EnqueueHostWork(nullptr).code() == StatusCode::kInvalidArgument, "empty work");
    W_CHECK(ps.CopyFromHost(d, host, 0).ok(), "an empty copy is fine");
    std::vector<float> deltas(32);
    for (size_t k = 0; k < deltas.size(); ++k) deltas[k] = 0.5f * static_cast<float>(k);
    GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, deltas.data(), deltas.size()));
    // Host work queued behind the copy sees it; a copy queued behind the
    // host work sees what it wrote.
    float seen = -1;
    GEEPS_RETURN_IF_ERROR(ps.EnqueueHostWork([d, &seen] {
      seen = d[31];
      d[0] = 100.0f;
    }));
    std::vector<float> back(32);
    GEEPS_RETURN_IF_ERROR(ps.CopyToHost(back.data(), d, back.size()));
    W_CHECK(seen == 15.5f, std::to_string(seen));
    W_CHECK(back[0] == 100.0f && back[31] == 15.5f, std::to_string(back[0]));
    GEEPS_RETURN_IF_ERROR(ps.Update(u));
    GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(r));
    GEEPS_RETURN_IF_ERROR(ps.CopyToHost(back.data(), w, back.size()));
    W_CHECK(back[0] == 100.0f && back[1] == 0.5f && back[31] == 15.5f,
            "the read sees the update: " + std::to_string(back[1]));
    GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
    GEEPS_RETURN_IF_ERROR(ps.SynchronizeComputeStream());
    GEEPS_RETURN_IF_ERROR(ps.Clock());
    GEEPS_RETURN_IF_ERROR(ps.Shutdown());
    Status late = ps.SynchronizeComputeStream();
    W_CHECK(late.code() == StatusCode::kFailedPrecondition, late.ToString());
    return Status::OK();
  }));
}

// Issue 50: a BSP read in place hands out the cache rows themselves. Work
// the application queues on its stream that reads them, before its PostRead
// and Clock, must see that clock's rows even where it runs after the next
// push has come (worker 1 updates the table, worker 0 only reads it): the
// install waits for the stream. The queued work waits up to 300 ms for an
// install to be counted (there was none in that time where installs wait for
// it), then copies the rows out.
TEST(ComputeStreamApiTest, WorkQueuedOnRowsReadInPlaceRunsBeforeTheNextPush) {
  testing::ScopedEnv plain("GEEPS_HOST_OPAQUE_POINTERS", "0");  // the work reads the rows
  static constexpr uint64_t kRows = 16;
  static constexpr uint32_t kWidth = 64;  // 4 KiB: a push is copied in, not adopted
  constexpr int kIterations = 5;
  Config c;
  c.num_workers = 2;
  c.device = DeviceKind::kHost;
  c.async_host_streams = true;
  c.tables = {{"T", kRows, kWidth}};
  c.timeout = std::chrono::milliseconds(10000);
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EmbeddedCluster* job = cluster->get();
  std::vector<std::vector<float>> seen(kIterations);
  ASSERT_OK(job->RunWorkers([&](GeePS& ps) -> Status {
    const bool reader = ps.rank() == 0;
    ReadHandle r{};
    UpdateHandle u{};
    if (reader) {
      GEEPS_ASSIGN_OR_RETURN(r, ps.VirtualRead(0, RowRange(0, kRows)));
      GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
    } else {
      GEEPS_ASSIGN_OR_RETURN(u, ps.VirtualPreUpdate(0, RowRange(0, kRows)));
      GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(u));
    }
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
    GEEPS_RETURN_IF_ERROR(ps.StartIterations());
    const std::vector<float> ones(kRows * kWidth, 1.0f);
    for (int i = 0; i < kIterations; ++i) {
      if (reader) {
        GEEPS_ASSIGN_OR_RETURN(const float* rows, ps.Read(r));
        const int64_t installed = ps.GetStats().pushes_installed;
        GEEPS_RETURN_IF_ERROR(ps.EnqueueHostWork([&ps, &seen, rows, installed, i] {
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
          while (ps.GetStats().pushes_installed == installed &&
                 std::chrono::steady_clock::now() < give_up)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          seen[i].assign(rows, rows + kRows * kWidth);
        }));
        GEEPS_RETURN_IF_ERROR(ps.PostRead(r));
        W_CHECK(ps.GetStats().reads_in_place == i + 1, "read " + std::to_string(i) + " in place");
      } else {
        GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(u));
        GEEPS_RETURN_IF_ERROR(ps.CopyFromHost(d, ones.data(), ones.size()));
        GEEPS_RETURN_IF_ERROR(ps.Update(u));
      }
      GEEPS_RETURN_IF_ERROR(ps.Clock());
    }
    return ps.SynchronizeComputeStream();
  }));
  // Read i sees worker 1's updates of clocks 0 .. i-1.
  for (int i = 0; i < kIterations; ++i) {
    ASSERT_EQ(seen[i].size(), kRows * kWidth) << "read " << i;
    EXPECT_EQ(seen[i].front(), static_cast<float>(i)) << "read " << i;
    EXPECT_EQ(seen[i].back(), static_cast<float>(i)) << "read " << i;
  }
}

// A malformed test-mode variable is an error naming it, at the worker's
// FinishVirtualIteration (where every worker reads them).
TEST(ComputeStreamApiTest, MalformedTestModeVariableIsAClearError) {
  for (const char* name : {"GEEPS_ASYNC_HOST_STREAMS", "GEEPS_HOST_OPAQUE_POINTERS",
                           "GEEPS_HOST_NO_ALIAS", "GEEPS_HOST_AS_CUDA", "GEEPS_CHECKED"}) {
    SCOPED_TRACE(name);
    testing::ScopedEnv env(name, "yes");
    auto cluster = EmbeddedCluster::Start(OneTable());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    Status st = (*cluster)->RunWorkers([](GeePS& ps) -> Status {
      GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, RowRange(0, 4)));
      GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
      GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
      return ps.FinishVirtualIteration();
    });
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(name), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace geeps
