// The host backend's opaque device pointers (DeviceOptions::opaque_pointers,
// Config::host_opaque_device_pointers, GEEPS_HOST_OPAQUE_POINTERS): device
// memory gets addresses the host cannot dereference, as on a GPU. The
// device's operations give the same results as without the mode; a host
// access to device memory dies; a worker runs correctly when the application
// touches its buffers only through CopyToHost / CopyFromHost.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/host/host_device.h"
#include "exact_sum.h"
#include "geeps/embedded_cluster.h"
#include "host_view.h"
#include "test_util.h"

namespace geeps {
namespace {

using device::CopyKind;
using device::Device;
using device::DeviceOptions;
using device::Stream;
using device::host::HostDevice;

// Whether `p` carries the opaque-pointer offset (ordinary host addresses
// never have those bits set).
bool IsOpaque(const void* p) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(p);
  return (bits & HostDevice::kOpaqueOffset) == HostDevice::kOpaqueOffset;
}

std::string PointerText(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

std::unique_ptr<Device> MakeHostDevice(bool opaque) {
  DeviceOptions options;
  options.opaque_pointers = opaque;
  auto device = device::CreateDevice(DeviceKind::kHost, options);
  EXPECT_TRUE(device.ok()) << device.status();
  return device.ok() ? std::move(device).value() : nullptr;
}

// Runs every device operation once, on device buffers and on pinned and
// ordinary host memory, and returns what ends up in host memory: the results
// of Copy (all four kinds, at offsets into blocks), Gather, ScatterAdd,
// Scatter, Add and Fill.
StatusOr<std::vector<float>> RunEveryOperation(Device& d, bool expect_opaque) {
  constexpr size_t kRows = 6, kWidth = 3, kFloats = kRows * kWidth;
  GEEPS_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s, d.CreateStream());
  GEEPS_ASSIGN_OR_RETURN(void* table_mem, d.Allocate(kFloats * sizeof(float)));
  GEEPS_ASSIGN_OR_RETURN(void* dense_mem, d.Allocate(kFloats * sizeof(float)));
  GEEPS_ASSIGN_OR_RETURN(void* index_mem, d.Allocate(4 * sizeof(uint32_t)));
  GEEPS_ASSIGN_OR_RETURN(void* pinned_mem, d.AllocatePinned(kFloats * sizeof(float)));
  auto* table = static_cast<float*>(table_mem);
  auto* dense = static_cast<float*>(dense_mem);
  auto* index = static_cast<uint32_t*>(index_mem);
  auto* pinned = static_cast<float*>(pinned_mem);
  if (IsOpaque(table) != expect_opaque || IsOpaque(index) != expect_opaque) {
    return InternalError("Allocate() returned " + PointerText(table) +
                         (expect_opaque ? ", not" : ", unexpectedly") + " an opaque address");
  }
  if (IsOpaque(pinned)) return InternalError("pinned memory must stay host memory");
  // Pinned memory is ordinary host memory in both modes.
  for (size_t k = 0; k < kFloats; ++k) pinned[k] = static_cast<float>(k + 1);
  std::vector<float> host(kFloats);
  for (size_t k = 0; k < kFloats; ++k) host[k] = 100.0f + static_cast<float>(k);
  const std::vector<uint32_t> rows = {4, 0, 5, 2};

  // table = 1..18 (from pinned), dense = 100..117 (from ordinary memory).
  GEEPS_RETURN_IF_ERROR(
      d.Copy(table, pinned, kFloats * sizeof(float), CopyKind::kHostToDevice, s.get()));
  GEEPS_RETURN_IF_ERROR(
      d.Copy(dense, host.data(), kFloats * sizeof(float), CopyKind::kHostToDevice, s.get()));
  GEEPS_RETURN_IF_ERROR(
      d.Copy(index, rows.data(), rows.size() * sizeof(uint32_t), CopyKind::kHostToDevice, s.get()));
  // Pointer arithmetic on device pointers: 2 floats into dense, 4 apart.
  GEEPS_RETURN_IF_ERROR(
      d.Copy(dense + 2, dense + 6, 4 * sizeof(float), CopyKind::kDeviceToDevice, s.get()));
  // dense[0..3) += table[3..6); dense rows 3..5 = table rows {4, 0, 5};
  // table rows {4, 0, 5, 2} += dense rows 0..3; table row 1 = dense row 4
  // (through a one-entry index at index + 3, rewritten in stream order).
  GEEPS_RETURN_IF_ERROR(d.Add(dense, table + 3, 3, s.get()));
  GEEPS_RETURN_IF_ERROR(d.Gather(dense + 9, table, index, 3, kWidth, s.get()));
  GEEPS_RETURN_IF_ERROR(d.ScatterAdd(table, dense, index, 4, kWidth, s.get()));
  const uint32_t one = 1;
  GEEPS_RETURN_IF_ERROR(d.Copy(index + 3, &one, sizeof(one), CopyKind::kHostToDevice, s.get()));
  GEEPS_RETURN_IF_ERROR(d.Scatter(table, dense + 4 * kWidth, index + 3, 1, kWidth, s.get()));
  GEEPS_RETURN_IF_ERROR(d.Fill(dense + kFloats - 2, -5.0f, 2, s.get()));
  // Everything back: table to pinned memory, dense to ordinary memory, and a
  // host-to-host copy (never translated) between them.
  GEEPS_RETURN_IF_ERROR(
      d.Copy(pinned, table, kFloats * sizeof(float), CopyKind::kDeviceToHost, s.get()));
  GEEPS_RETURN_IF_ERROR(
      d.Copy(host.data(), dense, kFloats * sizeof(float), CopyKind::kDeviceToHost, s.get()));
  std::vector<float> out(2 * kFloats);
  GEEPS_RETURN_IF_ERROR(
      d.Copy(out.data(), pinned, kFloats * sizeof(float), CopyKind::kHostToHost, s.get()));
  GEEPS_RETURN_IF_ERROR(d.Synchronize(s.get()));
  std::copy(host.begin(), host.end(), out.begin() + kFloats);
  d.Free(table);
  d.Free(dense);
  d.Free(index);
  d.FreePinned(pinned);
  if (d.bytes_in_use() != 0) {
    return InternalError("Free() left " + std::to_string(d.bytes_in_use()) + " bytes in use");
  }
  return out;
}

// The same operations on plain vectors, as the expected result.
std::vector<float> ExpectedResult() {
  constexpr size_t kWidth = 3, kFloats = 18;
  std::vector<float> table(kFloats), dense(kFloats);
  for (size_t k = 0; k < kFloats; ++k) table[k] = static_cast<float>(k + 1);
  for (size_t k = 0; k < kFloats; ++k) dense[k] = 100.0f + static_cast<float>(k);
  const std::vector<uint32_t> rows = {4, 0, 5, 2};
  std::vector<float> moved(dense.begin() + 6, dense.begin() + 10);
  std::copy(moved.begin(), moved.end(), dense.begin() + 2);
  for (size_t k = 0; k < 3; ++k) dense[k] += table[3 + k];
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < kWidth; ++j) dense[9 + i * kWidth + j] = table[rows[i] * kWidth + j];
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < kWidth; ++j) table[rows[i] * kWidth + j] += dense[i * kWidth + j];
  for (size_t j = 0; j < kWidth; ++j) table[1 * kWidth + j] = dense[4 * kWidth + j];
  dense[kFloats - 2] = dense[kFloats - 1] = -5.0f;
  table.insert(table.end(), dense.begin(), dense.end());
  return table;
}

TEST(OpaquePointerDeviceTest, OperationsGiveTheSameResultsWithAndWithoutTheMode) {
  std::unique_ptr<Device> plain = MakeHostDevice(false);
  std::unique_ptr<Device> opaque = MakeHostDevice(true);
  ASSERT_TRUE(plain && opaque);
  StatusOr<std::vector<float>> plain_result = RunEveryOperation(*plain, false);
  StatusOr<std::vector<float>> opaque_result = RunEveryOperation(*opaque, true);
  ASSERT_OK(plain_result.status());
  ASSERT_OK(opaque_result.status());
  EXPECT_EQ(*plain_result, ExpectedResult());
  EXPECT_EQ(*opaque_result, ExpectedResult());
}

// The checks still take the caller's (opaque) pointers: errors name them,
// and an ordinary host pointer is not device memory.
TEST(OpaquePointerDeviceTest, ErrorsNameTheCallersPointers) {
  std::unique_ptr<Device> d = MakeHostDevice(true);
  ASSERT_TRUE(d);
  auto s = d->CreateStream();
  ASSERT_OK(s.status());
  auto mem = d->Allocate(4 * sizeof(float));
  ASSERT_OK(mem.status());
  auto* buf = static_cast<float*>(*mem);
  std::vector<float> host(8);
  // Past the end of the block, enqueue-time check.
  Status st = d->Copy(buf + 2, host.data(), 4 * sizeof(float), CopyKind::kHostToDevice, s->get());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(PointerText(buf + 2)), std::string::npos) << st;
  // A host address where device memory is expected.
  st = d->Fill(host.data(), 1.0f, 4, s->get());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  // The run-time index check reads the indexes through the translation and
  // names the indexed block by the caller's pointer.
  auto index_mem = d->Allocate(sizeof(uint32_t));
  ASSERT_OK(index_mem.status());
  auto* index = static_cast<uint32_t*>(*index_mem);
  const uint32_t too_far = 7;
  ASSERT_OK(d->Copy(index, &too_far, sizeof(too_far), CopyKind::kHostToDevice, s->get()));
  auto dst_mem = d->Allocate(4 * sizeof(float));
  ASSERT_OK(dst_mem.status());
  ASSERT_OK(d->Gather(static_cast<float*>(*dst_mem), buf, index, 1, 1, s->get()));
  st = d->Synchronize(s->get());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st;
  EXPECT_NE(st.message().find("= 7"), std::string::npos) << st;
  EXPECT_NE(st.message().find(PointerText(buf)), std::string::npos) << st;
  // A block freed by its opaque address is gone.
  d->Free(buf);
  EXPECT_EQ(d->Fill(buf, 0.0f, 1, s->get()).code(), StatusCode::kInvalidArgument);
  d->Free(index);
  d->Free(*dst_mem);
  EXPECT_EQ(d->bytes_in_use(), 0u);
}

class OpaquePointerDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// What a host read or write of a GPU pointer does, here on the host backend.
TEST_F(OpaquePointerDeathTest, HostAccessToDeviceMemoryDies) {
  std::unique_ptr<Device> d = MakeHostDevice(true);
  ASSERT_TRUE(d);
  auto mem = d->Allocate(16 * sizeof(float));
  ASSERT_OK(mem.status());
  volatile float* p = static_cast<float*>(*mem);
  EXPECT_DEATH({ std::printf("%f\n", static_cast<double>(p[3])); }, "");
  EXPECT_DEATH({ p[0] = 1.0f; }, "");
  d->Free(const_cast<float*>(p));
}

TEST_F(OpaquePointerDeathTest, WithoutTheModeDeviceMemoryIsHostMemory) {
  std::unique_ptr<Device> d = MakeHostDevice(false);
  ASSERT_TRUE(d);
  auto mem = d->Allocate(16 * sizeof(float));
  ASSERT_OK(mem.status());
  auto* p = static_cast<float*>(*mem);
  EXPECT_FALSE(IsOpaque(p));
  p[3] = 2.5f;  // fine: the host backend's device memory is host memory
  EXPECT_EQ(p[3], 2.5f);
  d->Free(p);
}

// ---- A worker in the mode ---------------------------------------------------

Config OpaqueClusterConfig(int workers) {
  Config c = testing::MakeConfig({workers, 2, 1});
  c.device = DeviceKind::kHost;
  c.host_opaque_device_pointers = true;
  return c;
}

// The exact-sum workload (BSP, several tables and widths, a prologue) reads
// and writes every buffer through CopyToHost / CopyFromHost: exact results.
TEST(OpaquePointerClusterTest, BspIterationsThroughHostCopiesAreExact) {
  const Config c = OpaqueClusterConfig(2);
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_OK(cluster.status());
  ASSERT_OK((*cluster)->RunWorkers(
      [&](GeePS& ps) { return testing::RunWorker(ps, c, 0, 4, std::chrono::milliseconds(0)); }));
  EXPECT_EQ((*cluster)->worker(0)->GetStats().iterations, 4);
  ASSERT_OK((*cluster)->Shutdown());
}

// The buffers a worker returns in the mode are opaque, and dereferencing one
// on the host dies: the failure every test that touched buffers directly
// would have on a GPU.
class OpaquePointerClusterDeathTest : public OpaquePointerDeathTest {};

// Records one read, one update and one local access of one worker and starts
// iterations; fills the handles.
Status StartOneWorker(GeePS& ps, ReadHandle* r, UpdateHandle* u, LocalHandle* l) {
  GEEPS_ASSIGN_OR_RETURN(*r, ps.VirtualRead(0, RowRange(0, 5)));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(*r));
  GEEPS_ASSIGN_OR_RETURN(*u, ps.VirtualPreUpdate(0, RowRange(0, 5)));
  GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(*u));
  GEEPS_ASSIGN_OR_RETURN(*l, ps.VirtualLocalAccess(1, {2, 0}, true));
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(*l, true));
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  return ps.StartIterations();
}

Config OneWorkerConfig() {
  Config c;
  c.tables = {{"w", 5, 4}, {"local", 3, 2, /*local=*/true}};
  c.device = DeviceKind::kHost;
  c.host_opaque_device_pointers = true;
  c.timeout = std::chrono::milliseconds(5000);
  return c;
}

TEST_F(OpaquePointerClusterDeathTest, ReturnedBuffersAreOpaqueAndDieOnTheHost) {
  auto cluster = EmbeddedCluster::Start(OneWorkerConfig());
  ASSERT_OK(cluster.status());
  GeePS& ps = *(*cluster)->worker(0);
  ReadHandle r;
  UpdateHandle u;
  LocalHandle l;
  ASSERT_OK(StartOneWorker(ps, &r, &u, &l));
  auto read = ps.Read(r);
  ASSERT_OK(read.status());
  EXPECT_TRUE(IsOpaque(*read));
  EXPECT_DEATH({ std::printf("%f\n", static_cast<double>((*read)[0])); }, "");
  ASSERT_OK(ps.PostRead(r));
  auto delta = ps.PreUpdate(u);
  ASSERT_OK(delta.status());
  EXPECT_TRUE(IsOpaque(*delta));
  EXPECT_DEATH({ (*delta)[1] = 1.0f; }, "");
  // The portable way works: a host view.
  ASSERT_OK(testing::WriteBuffer(ps, *delta, {1.0f, 2.0f, 3.0f}));
  ASSERT_OK(ps.Update(u));
  auto local = ps.LocalAccess(l);
  ASSERT_OK(local.status());
  EXPECT_TRUE(IsOpaque(*local));
  auto view = testing::HostView::Load(ps, *local, 4);
  ASSERT_OK(view.status());
  (*view)[3] = 9.0f;  // row 0, column 1
  ASSERT_OK(view->Store());
  ASSERT_OK(ps.PostLocalAccess(l));
  ASSERT_OK(ps.Clock());
  ASSERT_OK(ps.Sync());
  std::vector<float> row0(4), local_row0(2);
  ASSERT_OK(ps.CopyRows(0, {0}, row0.data()));
  EXPECT_EQ(row0, (std::vector<float>{1.0f, 2.0f, 3.0f, 0.0f}));
  ASSERT_OK(ps.CopyRows(1, {0}, local_row0.data()));
  EXPECT_EQ(local_row0[1], 9.0f);
}

// GEEPS_HOST_OPAQUE_POINTERS=1 turns the mode on without the Config field
// (so that a whole suite can run in it); without either, buffers are plain.
TEST(OpaquePointerClusterTest, EnvironmentVariableTurnsTheModeOn) {
  testing::ScopedEnv env("GEEPS_HOST_OPAQUE_POINTERS", nullptr);
  for (const bool on : {true, false}) {
    env.Set(on ? "1" : nullptr);
    Config c = OneWorkerConfig();
    c.host_opaque_device_pointers = false;
    auto cluster = EmbeddedCluster::Start(c);
    ASSERT_OK(cluster.status());
    GeePS& ps = *(*cluster)->worker(0);
    ReadHandle r;
    UpdateHandle u;
    LocalHandle l;
    ASSERT_OK(StartOneWorker(ps, &r, &u, &l));
    auto read = ps.Read(r);
    ASSERT_OK(read.status());
    EXPECT_EQ(IsOpaque(*read), on);
    ASSERT_OK(ps.Shutdown());
  }
}

// GeePS::HostAddress: where host code reads and writes a buffer in place
// (the libtorch adapter's tensors over the worker's buffers). With and
// without opaque pointers: the alias reaches the buffer's memory (what
// CopyToHost sees, and writes through it reach the servers); in the
// no-alias mode, as on CUDA, there is none; nor before the device exists.
TEST(HostAddressTest, ReachesEveryReturnedBufferWhereTheHostMay) {
  testing::ScopedEnv no_alias("GEEPS_HOST_NO_ALIAS", nullptr);  // whatever the test mode
  testing::ScopedEnv env_opaque("GEEPS_HOST_OPAQUE_POINTERS", nullptr);
  for (const bool opaque : {false, true}) {
    Config c = OneWorkerConfig();
    c.host_opaque_device_pointers = opaque;
    auto cluster = EmbeddedCluster::Start(c);
    ASSERT_OK(cluster.status());
    GeePS& ps = *(*cluster)->worker(0);
    float some = 1.0f;
    EXPECT_EQ(ps.HostAddress(&some), nullptr) << "before FinishVirtualIteration";
    ReadHandle r;
    UpdateHandle u;
    LocalHandle l;
    ASSERT_OK(StartOneWorker(ps, &r, &u, &l));
    EXPECT_EQ(ps.HostAddress(static_cast<float*>(nullptr)), nullptr);
    float* last_delta = nullptr;
    for (int clock = 0; clock < 2; ++clock) {
      auto read = ps.Read(r);
      ASSERT_OK(read.status());
      const float* rh = ps.HostAddress(*read);
      ASSERT_NE(rh, nullptr) << "opaque=" << opaque;
      EXPECT_EQ(rh == *read, !opaque);
      // Clock 1 reads what clock 0 wrote in place into its update buffer.
      for (int k = 0; k < 20; ++k) ASSERT_EQ(rh[k], static_cast<float>(clock * k)) << k;
      ASSERT_OK(ps.PostRead(r));
      auto delta = ps.PreUpdate(u);
      ASSERT_OK(delta.status());
      float* d = ps.HostAddress(*delta);
      ASSERT_NE(d, nullptr);
      EXPECT_EQ(d[2], 0.0f) << "a zeroed buffer, seen in place";
      for (int k = 0; k < 20; ++k) d[k] = static_cast<float>(k);
      ASSERT_OK(ps.Update(u));
      last_delta = *delta;
      auto local = ps.LocalAccess(l);
      ASSERT_OK(local.status());
      float* lh = ps.HostAddress(*local);
      ASSERT_NE(lh, nullptr);
      lh[3] = 7.5f;
      std::vector<float> back(4);
      ASSERT_OK(ps.CopyToHost(back.data(), *local, back.size()));
      EXPECT_EQ(back[3], 7.5f) << "a write in place is what the device holds";
      ASSERT_OK(ps.PostLocalAccess(l));
      ASSERT_OK(ps.Clock());
    }
    ASSERT_OK(ps.Shutdown());
    EXPECT_EQ(ps.HostAddress(last_delta), nullptr) << "after Shutdown";
  }
  no_alias.Set("1");
  auto cluster = EmbeddedCluster::Start(OneWorkerConfig());
  ASSERT_OK(cluster.status());
  GeePS& ps = *(*cluster)->worker(0);
  ReadHandle r;
  UpdateHandle u;
  LocalHandle l;
  ASSERT_OK(StartOneWorker(ps, &r, &u, &l));
  auto read = ps.Read(r);
  ASSERT_OK(read.status());
  EXPECT_EQ(ps.HostAddress(*read), nullptr) << "no host alias, as on CUDA";
  ASSERT_OK(ps.PostRead(r));
}

}  // namespace
}  // namespace geeps
