// Several devices per process (docs/architecture.md, "Several devices per
// machine", items 1 and 2): the device selection function, Config's
// device_ordinal and host_devices, and N host devices standing in for the
// GPUs of a machine. The CUDA backend follows the same rules (compiled, not
// run on a GPU here); these tests catch the class of bug its changes guard
// against: a worker on the wrong device, memory or a stream of another
// device, work run on a thread whose current device is another.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/host/host_device.h"
#include "device/host/host_stream.h"
#include "device/scoped_device.h"
#include "device/selection.h"
#include "geeps/embedded_cluster.h"
#include "geeps/process.h"
#include "host_view.h"
#include "test_util.h"

namespace geeps {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- The selection function -------------------------------------------------

TEST(SelectDeviceOrdinalTest, Table) {
  struct Case {
    int configured, local_rank, workers_in_process, worker, device_count, expected;
  };
  const Case cases[] = {
      // Automatic: (local_rank * workers_in_process + worker) mod count.
      {-1, 0, 1, 0, 1, 0},  // one process, one worker, one device
      {-1, 0, 4, 0, 2, 0},  // an embedded cluster of 4 on 2 devices
      {-1, 0, 4, 1, 2, 1},
      {-1, 0, 4, 2, 2, 0},
      {-1, 0, 4, 3, 2, 1},
      {-1, 3, 1, 0, 8, 3},  // mpirun -np 8 on an 8-GPU node: rank 3 on GPU 3
      {-1, 7, 1, 0, 8, 7},
      {-1, 9, 1, 0, 8, 1},  // more processes than GPUs: wraps
      {-1, 1, 2, 1, 4, 3},  // process 1 of 2 workers each, worker 1: slot 3
      {-1, 2, 2, 1, 4, 1},  // slot 5 mod 4
      {-1, 0, 3, 2, 1, 0},  // every worker shares the only device
      // Configured: taken as it is, whatever the rank.
      {0, 5, 1, 0, 2, 0},
      {1, 0, 4, 3, 2, 1},
      {3, 1, 2, 0, 4, 3},
  };
  for (const Case& c : cases) {
    StatusOr<int> got = device::SelectDeviceOrdinal(c.configured, c.local_rank,
                                                    c.workers_in_process, c.worker, c.device_count);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c.expected) << "configured " << c.configured << " local_rank " << c.local_rank
                                << " worker " << c.worker << " of " << c.workers_in_process
                                << " on " << c.device_count << " devices";
  }
}

TEST(SelectDeviceOrdinalTest, LargeLocalRankDoesNotOverflow) {
  StatusOr<int> got = device::SelectDeviceOrdinal(-1, 1 << 30, 4, 3, 7);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, static_cast<int>(((int64_t{1} << 30) * 4 + 3) % 7));
}

TEST(SelectDeviceOrdinalTest, RefusesBadArguments) {
  struct Case {
    int configured, local_rank, workers_in_process, worker, device_count;
    std::vector<std::string> named;  // in the message
  };
  const Case cases[] = {
      {5, 0, 1, 0, 3, {"device_ordinal 5", "has 3 devices"}},
      {2, 0, 1, 0, 2, {"device_ordinal 2", "has 2 devices", "0 to 1"}},
      {-2, 0, 1, 0, 2, {"-2"}},
      {-1, 0, 1, 0, 0, {"device count 0"}},
      {-1, -1, 1, 0, 2, {"local rank -1"}},
      {-1, 0, 2, 2, 2, {"worker 2 of 2"}},
  };
  for (const Case& c : cases) {
    StatusOr<int> got = device::SelectDeviceOrdinal(c.configured, c.local_rank,
                                                    c.workers_in_process, c.worker, c.device_count);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    for (const std::string& part : c.named)
      EXPECT_TRUE(Contains(got.status().message(), part)) << got.status();
  }
}

// ---- Config -------------------------------------------------------------------

Config SmallConfig() {
  Config c;
  c.tables = {{"w", 10, 4}};
  c.device = DeviceKind::kHost;
  c.timeout = std::chrono::milliseconds(10000);
  return c;
}

TEST(MultiDeviceConfigTest, ValidatesTheNewFields) {
  Config c = SmallConfig();
  EXPECT_EQ(c.device_ordinal, -1);
  EXPECT_EQ(c.host_devices, 1);
  EXPECT_OK(ValidateConfig(c));
  c.device_ordinal = -2;
  EXPECT_EQ(ValidateConfig(c).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ValidateConfig(c).message(), "device_ordinal"));
  c.device_ordinal = 3;
  EXPECT_OK(ValidateConfig(c));  // the device count is checked at Start
  c.host_devices = 0;
  EXPECT_EQ(ValidateConfig(c).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ValidateConfig(c).message(), "host_devices"));
}

using testing::ScopedEnv;

TEST(MultiDeviceConfigTest, EnvironmentSetsThem) {
  Config c = SmallConfig();
  {
    ScopedEnv devices("GEEPS_HOST_DEVICES", "4");
    ScopedEnv ordinal("GEEPS_DEVICE_ORDINAL", "2");
    ASSERT_OK(ApplyEnvironment(&c));
  }
  EXPECT_EQ(c.host_devices, 4);
  EXPECT_EQ(c.device_ordinal, 2);
  ScopedEnv bad("GEEPS_HOST_DEVICES", "0");
  Status st = ApplyEnvironment(&c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st.message(), "GEEPS_HOST_DEVICES")) << st;
}

// ---- N host devices -------------------------------------------------------------

std::unique_ptr<device::Device> HostDevice(int ordinal, int count, bool async = false) {
  device::DeviceOptions options;
  options.ordinal = ordinal;
  options.host_devices = count;
  options.async_streams = async;
  auto d = device::CreateDevice(DeviceKind::kHost, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return std::move(d).value();
}

TEST(HostDevicesTest, NamesAndOrdinals) {
  auto d = HostDevice(1, 4);
  EXPECT_EQ(d->name(), "host:1 of 4");
  EXPECT_EQ(d->ordinal(), 1);
  EXPECT_EQ(HostDevice(-1, 1)->name(), "host:0 of 1");
  StatusOr<int> count = device::DeviceCount(DeviceKind::kHost, 3);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 3);
}

// A kernel or copy of device 0 on memory of device 1: kInternal naming both,
// at once; device 0's own memory still works.
TEST(HostDevicesTest, OtherDevicesBufferIsInternal) {
  auto d0 = HostDevice(0, 2);
  auto d1 = HostDevice(1, 2);
  auto s0 = d0->CreateStream();
  ASSERT_TRUE(s0.ok());
  auto mine = d0->Allocate(64 * sizeof(float));
  auto theirs = d1->Allocate(64 * sizeof(float));
  ASSERT_TRUE(mine.ok() && theirs.ok());
  float* m = static_cast<float*>(*mine);
  float* t = static_cast<float*>(*theirs);
  EXPECT_OK(d0->Fill(m, 1.0f, 64, s0->get()));
  for (const Status& st : {d0->Fill(t, 1.0f, 64, s0->get()), d0->Add(m, t, 64, s0->get()),
                           d0->Copy(t, m, 16, device::CopyKind::kDeviceToDevice, s0->get())}) {
    EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
    EXPECT_TRUE(Contains(st.message(), "host:1")) << st;
    EXPECT_TRUE(Contains(st.message(), "host:0")) << st;
  }
  // Memory of no device stays kInvalidArgument.
  float outside[4] = {};
  EXPECT_EQ(d0->Fill(outside, 1.0f, 4, s0->get()).code(), StatusCode::kInvalidArgument);
  EXPECT_OK(d0->Synchronize(s0->get()));
  d0->Free(m);
  d1->Free(t);
}

TEST(HostDevicesTest, OtherDevicesStreamIsInternal) {
  auto d0 = HostDevice(0, 2);
  auto d1 = HostDevice(1, 2);
  auto s1 = d1->CreateStream();
  ASSERT_TRUE(s1.ok());
  auto mine = d0->Allocate(16);
  ASSERT_TRUE(mine.ok());
  const Status st = d0->Fill(static_cast<float*>(*mine), 0.0f, 4, s1->get());
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  EXPECT_TRUE(Contains(st.message(), "host:1") && Contains(st.message(), "host:0")) << st;
  EXPECT_EQ(d0->Synchronize(s1->get()).code(), StatusCode::kInternal);
  d0->Free(*mine);
}

// Every entry point makes its device current on the calling thread, and a
// stream's thread has the stream's device current (as cudaSetDevice does
// for the CUDA backend's entry points and threads).
TEST(HostDevicesTest, EntryPointsAndStreamThreadsMakeTheDeviceCurrent) {
  auto d0 = HostDevice(0, 2);
  auto d1 = HostDevice(1, 2, /*async=*/true);  // every task on the stream's thread
  auto s1 = d1->CreateStream();
  ASSERT_TRUE(s1.ok());
  auto p1 = d1->Allocate(16);
  ASSERT_TRUE(p1.ok());
  EXPECT_EQ(device::host::CurrentHostDevice(), 1);
  auto p0 = d0->Allocate(16);
  ASSERT_TRUE(p0.ok());
  EXPECT_EQ(device::host::CurrentHostDevice(), 0);
  int seen = -2;
  EXPECT_OK(d1->HostFunction([&seen] { seen = device::host::CurrentHostDevice(); }, s1->get()));
  EXPECT_EQ(device::host::CurrentHostDevice(), 1);
  EXPECT_OK(d1->Fill(static_cast<float*>(*p1), 2.0f, 4, s1->get()));
  EXPECT_OK(d1->Synchronize(s1->get()));
  EXPECT_EQ(seen, 1);
  d0->Free(*p0);
  d1->Free(*p1);
}

// What a forgotten MakeCurrent looks like: work of a stream of host:0 run
// inline by a thread whose current device is host:1 fails with kInternal.
TEST(HostDevicesTest, TaskOnAThreadOfAnotherDeviceIsInternal) {
  auto stream = device::host::HostStream::Create(false, std::chrono::microseconds(0), 0);
  ASSERT_TRUE(stream.ok());
  device::host::SetCurrentHostDevice(1);
  bool ran = false;
  ASSERT_OK((*stream)->Enqueue([&ran] {
    ran = true;
    return Status::OK();
  }));
  const Status st = (*stream)->Synchronize();
  EXPECT_FALSE(ran);
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  EXPECT_TRUE(Contains(st.message(), "host:0") && Contains(st.message(), "host:1")) << st;
  device::host::SetCurrentHostDevice(0);
  ASSERT_OK((*stream)->Enqueue([&ran] {
    ran = true;
    return Status::OK();
  }));
  EXPECT_OK((*stream)->Synchronize());
  EXPECT_TRUE(ran);
}

// Destroying a stream or an event makes its device current only while the
// destructor runs: afterwards the thread has the device it had, as the CUDA
// backend's destructors restore it (device/scoped_device.h). An application
// thread with its own device current (host:1 here) drops objects of
// libgeeps' devices; in the plain and the asynchronous-stream mode (where a
// stream's destructor waits for work still queued on its thread).
class DestructorsKeepTheCurrentDeviceTest : public ::testing::TestWithParam<bool> {};

TEST_P(DestructorsKeepTheCurrentDeviceTest, StreamsAndEventsOfEitherDevice) {
  const bool async = GetParam();
  auto d0 = HostDevice(0, 2, async);
  auto d1 = HostDevice(1, 2, async);
  for (device::Device* d : {d0.get(), d1.get()}) {
    SCOPED_TRACE(d->name());
    auto stream = d->CreateStream();
    auto event = d->CreateEvent();
    auto memory = d->Allocate(64 * sizeof(float));
    ASSERT_TRUE(stream.ok() && event.ok() && memory.ok());
    // Work still queued when the stream goes (asynchronous mode).
    EXPECT_OK(d->Fill(static_cast<float*>(*memory), 1.0f, 64, stream->get()));
    EXPECT_OK(d->Record(event->get(), stream->get()));
    device::host::SetCurrentHostDevice(1);  // the application's device
    stream->reset();
    EXPECT_EQ(device::host::CurrentHostDevice(), 1) << "after destroying a stream";
    event->reset();
    EXPECT_EQ(device::host::CurrentHostDevice(), 1) << "after destroying an event";
    d->Free(*memory);
  }
  // A thread with no device current yet keeps none.
  auto stream = d0->CreateStream();
  auto event = d0->CreateEvent();
  ASSERT_TRUE(stream.ok() && event.ok());
  device::host::SetCurrentHostDevice(-1);
  stream->reset();
  event->reset();
  EXPECT_EQ(device::host::CurrentHostDevice(), -1);
}

INSTANTIATE_TEST_SUITE_P(HostModes, DestructorsKeepTheCurrentDeviceTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "AsyncStreams" : "Plain";
                         });

// ScopedCurrentDevice itself, on fake device functions: what it sets and
// restores when reading or setting the device fails.
struct FakeDevice {
  static inline int current = 0;
  static inline bool get_fails = false;
  static inline bool set_fails = false;
  static inline std::vector<int> sets;
  static void Reset(int device) {
    current = device;
    get_fails = set_fails = false;
    sets.clear();
  }
  static bool Get(int* ordinal) {
    if (get_fails) return false;
    *ordinal = current;
    return true;
  }
  static bool Set(int ordinal) {
    sets.push_back(ordinal);
    if (set_fails) return false;
    current = ordinal;
    return true;
  }
};
using ScopedFakeDevice = device::ScopedCurrentDevice<FakeDevice>;

TEST(ScopedCurrentDeviceTest, SetsAndRestores) {
  FakeDevice::Reset(1);
  {
    const ScopedFakeDevice scope(0);
    EXPECT_EQ(FakeDevice::current, 0);
  }
  EXPECT_EQ(FakeDevice::current, 1);
  EXPECT_EQ(FakeDevice::sets, (std::vector<int>{0, 1}));
}

TEST(ScopedCurrentDeviceTest, TheCurrentDeviceAlreadyIsNotSetAgain) {
  FakeDevice::Reset(2);
  { const ScopedFakeDevice scope(2); }
  EXPECT_EQ(FakeDevice::current, 2);
  EXPECT_TRUE(FakeDevice::sets.empty());
}

TEST(ScopedCurrentDeviceTest, AFailedSetRestoresNothing) {
  FakeDevice::Reset(1);
  FakeDevice::set_fails = true;
  { const ScopedFakeDevice scope(0); }
  EXPECT_EQ(FakeDevice::current, 1);
  EXPECT_EQ(FakeDevice::sets, (std::vector<int>{0}));
}

// The previous device is unknown: the scope's device is still set (its work
// needs it), and nothing is restored.
TEST(ScopedCurrentDeviceTest, AnUnreadableDeviceIsSetButNotRestored) {
  FakeDevice::Reset(1);
  FakeDevice::get_fails = true;
  { const ScopedFakeDevice scope(0); }
  EXPECT_EQ(FakeDevice::current, 0);
  EXPECT_EQ(FakeDevice::sets, (std::vector<int>{0}));
}

// ---- Embedded clusters on N host devices -------------------------------------

constexpr uint64_t kRows = 24;
constexpr uint32_t kWidth = 5;

// A BSP training loop whose deltas depend on the values read (as in
// deterministic_test.cc); returns the final parameters.
Status Train(GeePS& ps, int iterations, std::vector<float>* out) {
  const auto rows = RowRange(0, kRows);
  GEEPS_ASSIGN_OR_RETURN(const testing::ReadUpdateHandles h,
                         testing::RecordReadUpdateClock(ps, 0, rows));
  std::mt19937 values(99 + ps.rank());
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> w(kRows * kWidth);
  for (int i = 0; i < iterations; ++i) {
    GEEPS_ASSIGN_OR_RETURN(const float* v, ps.Read(h.read));
    GEEPS_ASSIGN_OR_RETURN(w, testing::ReadBuffer(ps, v, w.size()));
    GEEPS_RETURN_IF_ERROR(ps.PostRead(h.read));
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.update));
    std::vector<float> deltas(w.size());
    for (size_t k = 0; k < w.size(); ++k)
      deltas[k] =
          dist(values) * 1e-3f + 0.1f * std::sin(w[k]) / (1.0f + std::fabs(w[(k + 1) % w.size()]));
    GEEPS_RETURN_IF_ERROR(testing::WriteBuffer(ps, d, deltas));
    GEEPS_RETURN_IF_ERROR(ps.Update(h.update));
    GEEPS_RETURN_IF_ERROR(ps.Clock());
  }
  GEEPS_RETURN_IF_ERROR(ps.Sync());
  out->resize(w.size());
  return ps.CopyRows(0, rows, out->data());
}

struct JobResult {
  std::vector<std::vector<float>> params;
  std::vector<std::string> devices;  // WorkerStats::device per rank
};

JobResult RunJob(int host_devices, bool test_modes) {
  Config c = SmallConfig();
  c.num_workers = 4;
  c.num_shards = 2;
  c.deterministic_bsp = true;
  c.host_devices = host_devices;
  c.async_host_streams = test_modes;
  c.host_opaque_device_pointers = test_modes;
  c.tables = {{"w", kRows, kWidth}};
  JobResult result;
  result.params.resize(4);
  result.devices.resize(4);
  auto cluster = EmbeddedCluster::Start(c);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return result;
  EXPECT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    Status st = Train(ps, 8, &result.params[ps.rank()]);
    result.devices[ps.rank()] = ps.GetStats().device;
    return st;
  }));
  return result;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// 4 workers on 2 host devices: worker w on host:(w mod 2), and the same
// parameters, bit for bit, as on one device.
TEST(MultiDeviceClusterTest, FourWorkersOnTwoHostDevicesTrainAsOnOne) {
  const JobResult one = RunJob(1, false);
  const JobResult two = RunJob(2, false);
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(one.devices[w], "host:0 of 1") << "worker " << w;
    EXPECT_EQ(two.devices[w], "host:" + std::to_string(w % 2) + " of 2") << "worker " << w;
    ASSERT_EQ(one.params[w].size(), kRows * kWidth);
    EXPECT_TRUE(SameBits(one.params[0], one.params[w])) << "worker " << w;
    EXPECT_TRUE(SameBits(one.params[0], two.params[w])) << "worker " << w;
  }
}

// The same under the host test modes (every stream operation on a stream
// thread, device pointers the host cannot dereference), on 4 devices.
TEST(MultiDeviceClusterTest, SameResultsInTheHostTestModes) {
  const JobResult one = RunJob(1, false);
  const JobResult four = RunJob(4, true);
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(four.devices[w], "host:" + std::to_string(w) + " of 4") << "worker " << w;
    EXPECT_TRUE(SameBits(one.params[0], four.params[w])) << "worker " << w;
  }
}

TEST(MultiDeviceClusterTest, ConfiguredOrdinalPutsEveryWorkerThere) {
  Config c = SmallConfig();
  c.num_workers = 2;
  c.host_devices = 3;
  c.device_ordinal = 2;
  c.tables = {{"w", kRows, kWidth}};
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ((*cluster)->worker(0)->GetStats().device, "");  // no device yet
  std::vector<std::string> devices(2);
  ASSERT_OK((*cluster)->RunWorkers([&](GeePS& ps) {
    std::vector<float> params;
    Status st = Train(ps, 2, &params);
    devices[ps.rank()] = ps.GetStats().device;
    return st;
  }));
  EXPECT_EQ(devices[0], "host:2 of 3");
  EXPECT_EQ(devices[1], "host:2 of 3");
  EXPECT_TRUE(Contains((*cluster)->worker(1)->GetStats().ToJson(), "\"device\":\"host:2 of 3\""));
}

TEST(MultiDeviceClusterTest, BadOrdinalIsRefusedAtStartNamingBothNumbers) {
  Config c = SmallConfig();
  c.host_devices = 3;
  c.device_ordinal = 5;
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(cluster.status().message(), "device_ordinal 5")) << cluster.status();
  EXPECT_TRUE(Contains(cluster.status().message(), "3 devices")) << cluster.status();
  EXPECT_TRUE(Contains(cluster.status().message(), "host_devices")) << cluster.status();
}

// Process::Join refuses it too, before it binds or meets anyone (no
// coordinator runs here): the local rank is the rank given.
TEST(MultiDeviceClusterTest, BadOrdinalIsRefusedAtJoinNamingBothNumbers) {
  Config c = SmallConfig();
  c.host_devices = 2;
  c.device_ordinal = 4;
  ProcessOptions options;
  options.rank = 1;
  options.world_size = 2;
  options.coordinator = "127.0.0.1:1";
  auto process = Process::Join(c, options);
  ASSERT_FALSE(process.ok());
  EXPECT_EQ(process.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(process.status().message(), "device_ordinal 4")) << process.status();
  EXPECT_TRUE(Contains(process.status().message(), "2 devices")) << process.status();
  EXPECT_TRUE(Contains(process.status().message(), "rank 1")) << process.status();
}

// A worker handed another worker's buffer (on another device) refuses it
// with kInternal naming both devices: what a GPU would do with a pointer of
// another GPU is undefined, here it is caught.
TEST(MultiDeviceClusterTest, AnotherWorkersBufferOnAnotherDeviceIsInternal) {
  Config c = SmallConfig();
  c.num_workers = 2;
  c.host_devices = 2;
  auto cluster = EmbeddedCluster::Start(c);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<UpdateHandle> handles(2);
  std::vector<float*> buffers(2, nullptr);
  for (int r = 0; r < 2; ++r) {
    GeePS& ps = *(*cluster)->worker(r);
    auto u = ps.VirtualPreUpdate(0, RowRange(0, 4));
    ASSERT_TRUE(u.ok()) << u.status();
    handles[r] = *u;
    ASSERT_OK(ps.VirtualUpdate(*u));
    ASSERT_OK(ps.VirtualClock());
    ASSERT_OK(ps.FinishVirtualIteration());
    ASSERT_OK(ps.StartIterations());
    auto b = ps.PreUpdate(*u);
    ASSERT_TRUE(b.ok()) << b.status();
    buffers[r] = *b;
  }
  std::vector<float> host(4 * 4, 1.0f);
  GeePS& w0 = *(*cluster)->worker(0);
  const Status st = w0.CopyFromHost(buffers[1], host.data(), host.size());
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  EXPECT_TRUE(Contains(st.message(), "host:1") && Contains(st.message(), "host:0")) << st;
  EXPECT_OK(w0.CopyFromHost(buffers[0], host.data(), host.size()));
  EXPECT_OK((*cluster)->Shutdown());
}

}  // namespace
}  // namespace geeps
