// The host backend's no-alias test mode (DeviceOptions::no_host_alias,
// GEEPS_HOST_NO_ALIAS=1): HostAlias() returns null, as the CUDA backend's
// does, so that the paths libgeeps takes for device memory the host cannot
// read run without a GPU. scripts/test-modes.sh runs the whole suite in it;
// DataPathStatsTest checks that it reaches a worker's data path.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "device/device.h"
#include "geeps/embedded_cluster.h"
#include "test_util.h"

namespace geeps {
namespace {

std::unique_ptr<device::Device> MakeHost(bool no_alias) {
  device::DeviceOptions options;
  options.no_host_alias = no_alias;
  auto d = device::CreateDevice(DeviceKind::kHost, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(d).value() : nullptr;
}

// Without the mode device memory has a host alias; with it none, for any
// pointer; the device's own operations work the same either way.
TEST(NoAliasModeTest, HostAliasIsNullAndOperationsStillWork) {
  for (const bool no_alias : {false, true}) {
    SCOPED_TRACE(no_alias ? "no alias" : "alias");
    auto dev = MakeHost(no_alias);
    ASSERT_NE(dev, nullptr);
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

// A malformed GEEPS_HOST_NO_ALIAS is an error naming the variable, at the
// worker's FinishVirtualIteration (where the test modes are read).
TEST(NoAliasModeTest, MalformedVariableIsAClearError) {
  testing::ScopedEnv env("GEEPS_HOST_NO_ALIAS", "yes");
  Config c;
  c.num_workers = 1;
  c.device = DeviceKind::kHost;
  c.tables = {{"W", 4, 8}};
  c.timeout = std::chrono::milliseconds(10000);
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Status st = (*cluster)->RunWorkers([](GeePS& ps) -> Status {
    GEEPS_ASSIGN_OR_RETURN(ReadHandle r, ps.VirtualRead(0, RowRange(0, 4)));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(r));
    GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
    return ps.FinishVirtualIteration();
  });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("GEEPS_HOST_NO_ALIAS"), std::string::npos) << st;
}

}  // namespace
}  // namespace geeps
