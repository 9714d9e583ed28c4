// The host backend's CUDA-like mode (GEEPS_HOST_AS_CUDA=1,
// src/device/host/cuda_like.h): DeviceKind::kAuto without a GPU gives a
// host device with CUDA's properties and the driver's side effects; kHost
// stays the plain host. The whole suite runs in the mode as a CI stage
// (scripts/test-modes.sh, mode `cuda`); this file checks the mode itself.
//
// The first test must be the first to create a device in its process: ctest
// runs every test in a process of its own, and gtest runs this file's tests
// in the order written.
#include <gtest/gtest.h>

#include <dirent.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "device/device.h"
#include "device/host/cuda_like.h"
#include "test_util.h"

namespace geeps {
namespace {

long ResidentBytes() { return testing::ProcStatusField("VmRSS:") * 1024; }

// Threads of this process named `name` (/proc/self/task/<tid>/comm).
int ThreadsNamed(const std::string& name) {
  int n = 0;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return -1;
  while (dirent* e = readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string got;
    std::getline(comm, got);
    n += got == name;
  }
  closedir(tasks);
  return n;
}

std::unique_ptr<device::Device> Create(DeviceKind kind) {
  auto created = device::CreateDevice(kind, device::DeviceOptions{});
  EXPECT_TRUE(created.ok()) << created.status();
  return created.ok() ? std::move(created).value() : nullptr;
}

// The driver's side effects come with the first kAuto device and stay until
// the process ends: one more thread, kDriverResidentBytes more resident
// memory; a second device adds neither.
TEST(CudaLikeModeTest, TheFirstDeviceStartsAThreadAndMemoryThatOutliveIt) {
  if (device::CheckDeviceAvailable(DeviceKind::kCuda).ok())
    GTEST_SKIP() << "a GPU is here: kAuto is CUDA, the mode does not apply";
  ASSERT_FALSE(device::host::DriverStandInStarted())
      << "another test of this process made a CUDA-like device first: run this test alone";
  testing::ScopedEnv mode("GEEPS_HOST_AS_CUDA", "1");
  // Sanitizer runtimes start a thread of their own with the first thread.
  std::thread([] {}).join();
  const int threads_before = testing::ThreadCount();
  const long rss_before = ResidentBytes();
  Create(DeviceKind::kHost).reset();  // the plain host: no driver
  EXPECT_FALSE(device::host::DriverStandInStarted());
  {
    std::unique_ptr<device::Device> dev = Create(DeviceKind::kAuto);
    ASSERT_NE(dev, nullptr);
    EXPECT_TRUE(device::host::DriverStandInStarted());
  }
  const long grown = ResidentBytes() - rss_before;
  EXPECT_GE(grown, static_cast<long>(device::host::kDriverResidentBytes) * 9 / 10)
      << "resident memory grew by " << grown << " bytes";
  EXPECT_EQ(ThreadsNamed("geeps-cudalike"), 1);
  EXPECT_EQ(testing::ThreadCount(), threads_before + 1) << "the device is gone, the driver stays";
  const long rss_second = ResidentBytes();
  Create(DeviceKind::kAuto).reset();
  EXPECT_EQ(ThreadsNamed("geeps-cudalike"), 1);
  EXPECT_LT(ResidentBytes() - rss_second, long{16} << 20);
}

// kAuto's device has CUDA's properties; kHost keeps the host's.
TEST(CudaLikeModeTest, AutoIsLikeCudaAndHostStaysTheHost) {
  if (device::CheckDeviceAvailable(DeviceKind::kCuda).ok())
    GTEST_SKIP() << "a GPU is here: kAuto is CUDA, the mode does not apply";
  testing::ScopedEnv mode("GEEPS_HOST_AS_CUDA", "1");
  testing::ScopedEnv no_alias("GEEPS_HOST_NO_ALIAS", nullptr);
  auto count = device::DeviceCount(DeviceKind::kAuto, /*host_devices=*/4);
  ASSERT_OK(count.status());
  EXPECT_EQ(*count, 1) << "one GPU, as on the lent machine";
  std::unique_ptr<device::Device> like = Create(DeviceKind::kAuto);
  std::unique_ptr<device::Device> host = Create(DeviceKind::kHost);
  ASSERT_NE(like, nullptr);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(like->kind(), DeviceKind::kHost);
  EXPECT_EQ(like->name(), "host:0 of 1 (CUDA-like)");
  EXPECT_EQ(host->name().find("CUDA-like"), std::string::npos) << host->name();
  for (device::Device* dev : {like.get(), host.get()}) {
    SCOPED_TRACE(dev->name());
    const bool cuda_like = dev == like.get();
    auto mem = dev->Allocate(64);
    ASSERT_OK(mem.status());
    EXPECT_EQ(dev->HostAlias(*mem) == nullptr, cuda_like) << "no host alias, as on CUDA";
    float host_rows[16] = {};
    void* mapped = dev->MapHostMemory(host_rows, sizeof(host_rows));
    EXPECT_EQ(mapped == nullptr, cuda_like) << "no push kept in its message, as on CUDA";
    if (mapped != nullptr) dev->UnmapHostMemory(mapped);
    // Asynchronous streams: no operation runs on the thread that enqueues
    // or waits for it.
    auto stream = dev->CreateStream();
    ASSERT_OK(stream.status());
    std::thread::id ran_on;
    ASSERT_OK(dev->HostFunction([&ran_on] { ran_on = std::this_thread::get_id(); }, stream->get()));
    ASSERT_OK(dev->Synchronize(stream->get()));
    if (cuda_like) EXPECT_NE(ran_on, std::this_thread::get_id());
    dev->Free(*mem);
  }
}

// A malformed value is an error naming the variable where kAuto reads it.
TEST(CudaLikeModeTest, AMalformedValueIsAClearError) {
  if (device::CheckDeviceAvailable(DeviceKind::kCuda).ok())
    GTEST_SKIP() << "a GPU is here: kAuto is CUDA and does not read the variable";
  testing::ScopedEnv mode("GEEPS_HOST_AS_CUDA", "yes");
  auto created = device::CreateDevice(DeviceKind::kAuto, device::DeviceOptions{});
  EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument) << created.status();
  EXPECT_NE(created.status().message().find("GEEPS_HOST_AS_CUDA"), std::string::npos)
      << created.status();
  auto count = device::DeviceCount(DeviceKind::kAuto, 1);
  EXPECT_EQ(count.status().code(), StatusCode::kInvalidArgument) << count.status();
  EXPECT_OK(device::CreateDevice(DeviceKind::kHost, device::DeviceOptions{}).status());
}

}  // namespace
}  // namespace geeps
