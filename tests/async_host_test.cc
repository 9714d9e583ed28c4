// The host backend's asynchronous mode (DeviceOptions::async_streams,
// Config::async_host_streams) and the API that orders host work and host
// copies with a worker's compute stream (GeePS::EnqueueHostWork,
// SynchronizeComputeStream, CopyToHost, CopyFromHost).
#include <gtest/gtest.h>

#include <atomic>
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

// A malformed test-mode variable is an error naming it, at the worker's
// FinishVirtualIteration (where every worker reads them).
TEST(ComputeStreamApiTest, MalformedTestModeVariableIsAClearError) {
  for (const char* name :
       {"GEEPS_ASYNC_HOST_STREAMS", "GEEPS_HOST_OPAQUE_POINTERS", "GEEPS_HOST_NO_ALIAS"}) {
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
