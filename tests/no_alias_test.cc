// The host backend's no-alias test mode (DeviceOptions::no_host_alias,
// GEEPS_HOST_NO_ALIAS=1): HostAlias() returns null, as the CUDA backend's
// does, so that the paths libgeeps takes for device memory the host cannot
// read run without a GPU. scripts/test-modes.sh runs the whole suite in it;
// DataPathStatsTest checks that it reaches a worker's data path, and
// async_host_test that a malformed variable is a clear error.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "device/device.h"
#include "test_util.h"

namespace geeps {
namespace {

// Without the mode device memory has a host alias; with it none, for any
// pointer; the device's own operations work the same either way.
TEST(NoAliasModeTest, HostAliasIsNullAndOperationsStillWork) {
  for (const bool no_alias : {false, true}) {
    SCOPED_TRACE(no_alias ? "no alias" : "alias");
    device::DeviceOptions options;
    options.no_host_alias = no_alias;
    auto created = device::CreateDevice(DeviceKind::kHost, options);
    ASSERT_OK(created.status());
    std::unique_ptr<device::Device> dev = std::move(created).value();
    auto stream = dev->CreateStream();
    ASSERT_OK(stream.status());
    constexpr size_t kFloats = 8;
    auto mem = dev->Allocate(kFloats * sizeof(float));
    ASSERT_OK(mem.status());
    auto* buffer = static_cast<float*>(*mem);
    EXPECT_EQ(dev->HostAlias(buffer) == nullptr, no_alias);
    EXPECT_EQ(dev->HostAlias(buffer + 3) == nullptr, no_alias);
    const std::vector<float> in = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<float> out(kFloats, 0.0f);
    ASSERT_OK(dev->Copy(buffer, in.data(), kFloats * sizeof(float), device::CopyKind::kHostToDevice,
                        stream->get()));
    ASSERT_OK(dev->Add(buffer, buffer, kFloats, stream->get()));
    ASSERT_OK(dev->Copy(out.data(), buffer, kFloats * sizeof(float),
                        device::CopyKind::kDeviceToHost, stream->get()));
    ASSERT_OK(dev->Synchronize(stream->get()));
    EXPECT_EQ(out, (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16}));
    dev->Free(buffer);
  }
}

}  // namespace
}  // namespace geeps
