// Stream ordering between the application's compute stream and the memory
// manager's swap streams (docs/cuda.md, "Streams and the application").
//
// A small trainer step whose every "kernel" is enqueued on compute_stream()
// (GeePS::EnqueueHostWork) and takes a while to run, as a GPU kernel would,
// in the asynchronous host mode (Config::async_host_streams), with a device
// memory budget that puts a local table in host memory and swaps it through
// the alloc and reclaim threads. The application hands each buffer back
// (PostRead, Update, PostLocalAccess) while its kernel on that buffer is
// still queued; the worker must order its own copies after it. Results must
// be bitwise those of the same job without a budget.
//
// The kernels here dereference device buffers on the host: they stand for
// device code, which is legitimate on the host backend only. So this test
// runs on the host backend, without opaque device pointers.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "geeps/embedded_cluster.h"
#include "test_util.h"

namespace geeps {
namespace {

constexpr uint64_t kWRows = 16;
constexpr uint32_t kWWidth = 8;
constexpr int kLayers = 4;  // local tables A0..A3: one layer's activations each
constexpr uint64_t kARows = 64;
constexpr uint32_t kAWidth = 16;
constexpr int kIterations = 5;
// How long each emulated kernel runs before it touches its buffers: far
// longer than the asynchronous mode's stream delays (<= 200 us), so a copy
// that is not ordered after the kernel runs before it.
constexpr auto kKernelTime = std::chrono::milliseconds(3);

Config MakeConfig(uint64_t budget) {
  Config c;
  c.num_workers = 1;
  c.device = DeviceKind::kHost;
  c.tables = {{"W", kWRows, kWWidth}};
  for (int l = 0; l < kLayers; ++l)
    c.tables.push_back({"A" + std::to_string(l), kARows, kAWidth, /*local=*/true});
  c.device_memory_budget = budget;
  c.memory_guarantee = MemoryGuarantee::kDoubleBuffering;
  c.async_host_streams = true;
  c.timeout = std::chrono::milliseconds(10000);
  return c;
}

struct Result {
  std::vector<float> w;
  WorkerStats stats;
};

void SlowKernel() { std::this_thread::sleep_for(kKernelTime); }

struct Handles {
  ReadHandle r;
  UpdateHandle u;
  std::vector<LocalHandle> out, in;
};

// Per iteration, as a network's trainer: read W; the forward "kernel" of
// each layer writes its activations A_l (fetch=false, keep=true) from W;
// then, in reverse, the backward "kernel" of each layer reads A_l back
// (keep=false) and adds to W's deltas. Every kernel runs on compute_stream().
StatusOr<Handles> Record(GeePS& ps) {
  Handles h;
  GEEPS_ASSIGN_OR_RETURN(h.r, ps.VirtualRead(0, RowRange(0, kWRows)));
  for (int l = 0; l < kLayers; ++l) {
    GEEPS_ASSIGN_OR_RETURN(LocalHandle a,
                           ps.VirtualLocalAccess(1 + l, RowRange(0, kARows), /*fetch=*/false));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(a, /*keep=*/true));
    h.out.push_back(a);
  }
  GEEPS_RETURN_IF_ERROR(ps.VirtualPostRead(h.r));
  GEEPS_ASSIGN_OR_RETURN(h.u, ps.VirtualPreUpdate(0, RowRange(0, kWRows)));
  h.in.resize(kLayers);
  for (int l = kLayers - 1; l >= 0; --l) {
    GEEPS_ASSIGN_OR_RETURN(h.in[l],
                           ps.VirtualLocalAccess(1 + l, RowRange(0, kARows), /*fetch=*/true));
    GEEPS_RETURN_IF_ERROR(ps.VirtualPostLocalAccess(h.in[l], /*keep=*/false));
  }
  GEEPS_RETURN_IF_ERROR(ps.VirtualUpdate(h.u));
  GEEPS_RETURN_IF_ERROR(ps.VirtualClock());
  GEEPS_RETURN_IF_ERROR(ps.FinishVirtualIteration());
  return h;
}

Status RunWorker(GeePS& ps, Result* out) {
  GEEPS_ASSIGN_OR_RETURN(Handles h, Record(ps));
  GEEPS_RETURN_IF_ERROR(ps.StartIterations());
  constexpr size_t kWFloats = kWRows * kWWidth, kAFloats = kARows * kAWidth;
  for (int i = 0; i < kIterations; ++i) {
    GEEPS_ASSIGN_OR_RETURN(const float* w, ps.Read(h.r));
    for (int l = 0; l < kLayers; ++l) {
      GEEPS_ASSIGN_OR_RETURN(float* a, ps.LocalAccess(h.out[l]));
      GEEPS_RETURN_IF_ERROR(ps.EnqueueHostWork([w, a, i, l] {
        SlowKernel();
        for (size_t k = 0; k < kAFloats; ++k)
          a[k] = w[(k + l) % kWFloats] * 0.5f + static_cast<float>((k + l) % 7 + i);
      }));
      GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(h.out[l]));
    }
    GEEPS_RETURN_IF_ERROR(ps.PostRead(h.r));
    GEEPS_ASSIGN_OR_RETURN(float* d, ps.PreUpdate(h.u));
    for (int l = kLayers - 1; l >= 0; --l) {
      GEEPS_ASSIGN_OR_RETURN(const float* a, ps.LocalAccess(h.in[l]));
      GEEPS_RETURN_IF_ERROR(ps.EnqueueHostWork([a, d, l] {
        SlowKernel();
        for (size_t k = 0; k < kWFloats; ++k) d[k] += 0.01f * a[(k * 3 + l) % kAFloats] - 0.002f;
      }));
      GEEPS_RETURN_IF_ERROR(ps.PostLocalAccess(h.in[l]));
    }
    GEEPS_RETURN_IF_ERROR(ps.Update(h.u));
    GEEPS_RETURN_IF_ERROR(ps.Clock());
  }
  GEEPS_RETURN_IF_ERROR(ps.Sync());
  out->w.resize(kWFloats);
  GEEPS_RETURN_IF_ERROR(ps.CopyRows(0, RowRange(0, kWRows), out->w.data()));
  out->stats = ps.GetStats();
  return Status::OK();
}

StatusOr<Result> RunJob(uint64_t budget) {
  auto cluster = EmbeddedCluster::Start(MakeConfig(budget));
  if (!cluster.ok()) return cluster.status();
  Result result;
  GEEPS_RETURN_IF_ERROR((*cluster)->RunWorkers([&](GeePS& ps) { return RunWorker(ps, &result); }));
  return result;
}

// The least budget that FinishVirtualIteration accepts (more never hurts).
uint64_t LeastBudget() {
  uint64_t lo = 1, hi = 1 << 20;  // lo is refused, hi works
  while (hi - lo > 1) {
    const uint64_t mid = (lo + hi) / 2;
    auto cluster = EmbeddedCluster::Start(MakeConfig(mid));
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    if (!cluster.ok()) return hi;
    Status st = (*cluster)->RunWorkers([](GeePS& ps) { return Record(ps).status(); });
    EXPECT_TRUE(st.ok() || st.code() == StatusCode::kResourceExhausted) << st;
    (st.ok() ? hi : lo) = mid;
  }
  return hi;
}

class StreamOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The emulated kernels dereference device buffers (see the top).
    unsetenv("GEEPS_HOST_OPAQUE_POINTERS");
  }
};

TEST_F(StreamOrderTest, SwappedLocalDataWaitsForTheApplicationsKernels) {
  auto reference = RunJob(0);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const uint64_t least = LeastBudget();
  for (uint64_t budget : {least, least + least / 4}) {
    auto got = RunJob(budget);
    ASSERT_TRUE(got.ok()) << "budget " << budget << ": " << got.status();
    // The case this test is about ran: A went to host memory and back
    // through the swap engine.
    EXPECT_GT(got->stats.bytes_device_to_host, 0u) << "budget " << budget;
    EXPECT_GT(got->stats.bytes_host_to_device, 0u) << "budget " << budget;
    ASSERT_EQ(got->w.size(), reference->w.size());
    EXPECT_EQ(0, std::memcmp(got->w.data(), reference->w.data(), got->w.size() * sizeof(float)))
        << "budget " << budget << ": W differs from the run without a budget (first value "
        << got->w[0] << " vs " << reference->w[0] << ")";
  }
}

}  // namespace
}  // namespace geeps
