// Backend selection as the application sees it: Config::device and
// GEEPS_DEVICE through EmbeddedCluster and GeePS, and the stream accessors.
// On a machine without a GPU, forcing CUDA must fail cleanly with the reason;
// with one, the same tests check that CUDA is picked.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "device/device.h"
#include "geeps/embedded_cluster.h"
#include "process_util.h"
#include "test_util.h"

namespace geeps {
namespace {

Config SmallConfig(DeviceKind device) {
  Config c;
  c.num_workers = 1;
  c.tables = {{"w", 10, 4}};
  c.device = device;
  c.timeout = std::chrono::milliseconds(5000);
  return c;
}

// Records and finishes a one-read iteration; returns the worker's status.
Status FinishOneRead(GeePS& ps) {
  StatusOr<ReadHandle> read = ps.VirtualRead(0, {0, 1, 2});
  if (!read.ok()) return read.status();
  Status st = ps.VirtualPostRead(*read);
  if (!st.ok()) return st;
  st = ps.VirtualClock();
  if (!st.ok()) return st;
  return ps.FinishVirtualIteration();
}

bool GpuHere() { return device::CheckDeviceAvailable(DeviceKind::kCuda).ok(); }

TEST(DeviceSelectionTest, HostWorkerHasNoNativeStream) {
  auto cluster = EmbeddedCluster::Start(SmallConfig(DeviceKind::kHost));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  GeePS& ps = *(*cluster)->worker(0);
  EXPECT_EQ(ps.device_kind(), DeviceKind::kHost);
  EXPECT_EQ(ps.compute_stream().native_handle(), nullptr);
  EXPECT_EQ(ps.compute_stream().cuda().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(FinishOneRead(ps).ok());
  EXPECT_EQ(ps.device_kind(), DeviceKind::kHost);
  EXPECT_EQ(ps.compute_stream().kind(), DeviceKind::kHost);
  EXPECT_EQ(ps.compute_stream().native_handle(), nullptr);
  // Never a null cudaStream_t (CUDA's legacy default stream): an error.
  EXPECT_EQ(ps.compute_stream().cuda().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(ps.compute_stream().cuda().status().message().find("EnqueueHostWork"),
            std::string::npos);
}

TEST(DeviceSelectionTest, AutoPicksCudaOnlyWithAGpu) {
  auto cluster = EmbeddedCluster::Start(SmallConfig(DeviceKind::kAuto));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  GeePS& ps = *(*cluster)->worker(0);
  EXPECT_EQ(ps.device_kind(), DeviceKind::kAuto);  // not resolved yet
  EXPECT_NE(ps.compute_stream().cuda().status().message().find("before FinishVirtualIteration"),
            std::string::npos);
  ASSERT_TRUE(FinishOneRead(ps).ok());
  if (GpuHere()) {
    EXPECT_EQ(ps.device_kind(), DeviceKind::kCuda);
    ASSERT_TRUE(ps.compute_stream().cuda().ok()) << ps.compute_stream().cuda().status();
    EXPECT_NE(*ps.compute_stream().cuda(), nullptr);
  } else {
    EXPECT_EQ(ps.device_kind(), DeviceKind::kHost);
    EXPECT_EQ(ps.compute_stream().native_handle(), nullptr);
  }
}

TEST(DeviceSelectionTest, ForcedCudaFailsCleanlyWithoutAGpu) {
  auto cluster = EmbeddedCluster::Start(SmallConfig(DeviceKind::kCuda));
  if (GpuHere()) {
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    GeePS& ps = *(*cluster)->worker(0);
    ASSERT_TRUE(FinishOneRead(ps).ok());
    EXPECT_EQ(ps.device_kind(), DeviceKind::kCuda);
    EXPECT_EQ(ps.compute_stream().kind(), DeviceKind::kCuda);
    EXPECT_NE(ps.compute_stream().native_handle(), nullptr);
    return;
  }
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), StatusCode::kUnavailable);
  const std::string& why = cluster.status().message();
  EXPECT_TRUE(why.find("no CUDA device") != std::string::npos ||
              why.find("CUDA backend not built") != std::string::npos)
      << why;
}

// GEEPS_DEVICE=cuda, as a user would set it: ApplyEnvironment takes it, and
// the cluster refuses to start with the reason instead of crashing later.
TEST(DeviceSelectionTest, EnvironmentForcedCuda) {
  const char* saved = std::getenv("GEEPS_DEVICE");
  const std::string saved_value = saved ? saved : "";
  setenv("GEEPS_DEVICE", "cuda", 1);
  Config c = SmallConfig(DeviceKind::kAuto);
  Status applied = ApplyEnvironment(&c);
  if (saved) {
    setenv("GEEPS_DEVICE", saved_value.c_str(), 1);
  } else {
    unsetenv("GEEPS_DEVICE");
  }
  ASSERT_TRUE(applied.ok()) << applied;
  EXPECT_EQ(c.device, DeviceKind::kCuda);
  auto cluster = EmbeddedCluster::Start(c);
  if (GpuHere()) {
    EXPECT_TRUE(cluster.ok()) << cluster.status();
  } else {
    ASSERT_FALSE(cluster.ok());
    EXPECT_EQ(cluster.status().code(), StatusCode::kUnavailable) << cluster.status();
    std::cout << "GEEPS_DEVICE=cuda here: " << cluster.status() << "\n";
  }
}

// GEEPS_DEVICE_TRACE: every device created appends "<pid> <name>" to the
// file (the GPU check's record of which tests touched a GPU); none is
// written without the variable.
TEST(DeviceSelectionTest, TraceRecordsEveryDeviceCreated) {
  const std::string trace = testing::TempFile("trace");
  unlink(trace.c_str());
  {
    testing::ScopedEnv env("GEEPS_DEVICE_TRACE", trace.c_str());
    device::DeviceOptions options;
    options.host_devices = 2;
    for (const int ordinal : {0, 1}) {
      options.ordinal = ordinal;
      auto d = device::CreateDevice(DeviceKind::kHost, options);
      ASSERT_TRUE(d.ok()) << d.status();
    }
  }
  auto d = device::CreateDevice(DeviceKind::kHost, {});  // not traced
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(testing::ReadFile(trace), pid + " host:0 of 2\n" + pid + " host:1 of 2\n");
  unlink(trace.c_str());
}

}  // namespace
}  // namespace geeps
