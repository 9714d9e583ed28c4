// GPU microbenchmarks of the CUDA backend (built only with CUDA; run by
// scripts/gpu-check.sh). Everything is measured in the same run, with CUDA
// events, so that ratios are meaningful whatever the GPU:
//   1. Gather and ScatterAdd by index (the library's kernels, through the
//      Device interface) against a plain device-to-device cudaMemcpy of the
//      same bytes, for several row widths and sizes. Effective bandwidth =
//      bytes the operation must move / time (gather: read + write;
//      scatter-add: 2 reads + 1 write), the copy's likewise (read + write).
//   2. Pinned host <-> device copy bandwidth, both directions.
//   3. Overlap: a copy on one stream and a compute kernel on another;
//      time(copy) + time(kernel) against time(both at once).
// Then the checked figures (scripts/gpu-check.sh, docs/cuda.md):
//   * gather and scatter-add, each at least --min-indexed-ratio (0.5) of the
//     device-to-device copy's bandwidth, taken as the lowest ratio over the
//     widths of at least 32 floats (128-byte rows) at the largest row count
//     measured for that width. Narrower rows are reported, not checked: a
//     random 4- or 12-byte row uses a fraction of each 32-byte memory
//     sector, whatever the kernel;
//   * copy/compute overlap at least --min-overlap (0.8).
// They go to the JSON's "checks" and to one line, "gpu_bench: check: ...:
// PASS|MISS"; with --check a miss makes the exit status 3.
// Usage: gpu_bench [--out file.json] [--quick] [--check]
//                  [--min-indexed-ratio R] [--min-overlap F]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda/kernels.h"
#include "device/device.h"
#include "flags.h"

namespace {

using geeps::DeviceKind;
using geeps::device::CopyKind;
using geeps::device::Device;
using geeps::device::Stream;

#define BENCH_CHECK(expr)                                                            \
  do {                                                                               \
    const auto bench_result = (expr);                                                \
    if (!Ok(bench_result)) {                                                         \
      std::fprintf(stderr, "gpu_bench: %s failed at line %d: %s\n", #expr, __LINE__, \
                   Describe(bench_result).c_str());                                  \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

bool Ok(cudaError_t e) { return e == cudaSuccess; }
bool Ok(const geeps::Status& s) { return s.ok(); }
std::string Describe(cudaError_t e) { return cudaGetErrorString(e); }
std::string Describe(const geeps::Status& s) { return s.ToString(); }

template <typename T>
T Take(geeps::StatusOr<T> v) {
  BENCH_CHECK(v.status());
  return std::move(v).value();
}

// The compute kernel of the overlap test: the library's spin kernel, whose
// launcher returns this launch's own error (kernels.h: cudaLaunchKernelEx,
// not <<<...>>> then cudaGetLastError(), which would also report an older
// error still latched, e.g. from a failed allocation).
void Spin(long long cycles, cudaStream_t stream) {
  BENCH_CHECK(geeps::device::cuda::LaunchSpin(cycles, stream));
}

// Milliseconds per call of `op` on `stream` (median of `reps` timed calls
// after two warm-up calls).
template <typename Op>
double TimeMs(cudaStream_t stream, int reps, Op op) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) op();
  BENCH_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    op();
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double GBps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "gpu_bench.json";
  bool quick = false;
  bool check = false;
  double min_indexed_ratio = 0.5;
  double min_overlap = 0.8;
  geeps::bench::Flags flags("gpu_bench");
  flags.Add("--out", &out_path, "JSON results")
      .Add("--quick", &quick, "5 repetitions instead of 20")
      .Add("--check", &check, "exit 1 unless the ratios below are met")
      .Add("--min-indexed-ratio", &min_indexed_ratio, "--check: indexed copies / plain copies")
      .Add("--min-overlap", &min_overlap, "--check: the overlap of copies and compute");
  if (const int status = flags.Parse(argc, argv); status >= 0) return status;
  std::unique_ptr<Device> dev = Take(geeps::device::CreateDevice(DeviceKind::kCuda, {}));
  std::unique_ptr<Stream> stream_a = Take(dev->CreateStream());
  std::unique_ptr<Stream> stream_b = Take(dev->CreateStream());
  auto a = static_cast<cudaStream_t>(stream_a->native_handle());
  auto b = static_cast<cudaStream_t>(stream_b->native_handle());
  const int reps = quick ? 5 : 20;

  std::ostringstream json;
  json << "{\n  \"device\": \"" << dev->name() << "\",\n";

  // ---- 1. Gather / ScatterAdd vs cudaMemcpy D2D -----------------------------
  json << "  \"indexed\": [\n";
  std::printf("%-10s %6s %9s %12s %12s %12s\n", "op", "width", "rows", "GB/s", "copy GB/s",
              "vs copy");
  bool first = true;
  // The checked figures: per width >= kCheckedWidth, the ratios at the
  // largest row count measured (later row counts are larger).
  constexpr size_t kCheckedWidth = 32;
  struct Largest {
    size_t rows = 0;
    double gather = 0, scatter = 0;
  };
  std::vector<std::pair<size_t, Largest>> largest;
  const std::vector<size_t> widths = {1, 3, 32, 128, 129, 1024};
  const std::vector<size_t> row_counts =
      quick ? std::vector<size_t>{1 << 16} : std::vector<size_t>{1 << 12, 1 << 16, 1 << 20};
  for (size_t width : widths) {
    for (size_t rows : row_counts) {
      const size_t floats = rows * width;
      if (floats * sizeof(float) > (size_t{1} << 30)) continue;  // 1 GiB cap
      const size_t bytes = floats * sizeof(float);
      auto* table = static_cast<float*>(Take(dev->Allocate(bytes)));
      auto* buffer = static_cast<float*>(Take(dev->Allocate(bytes)));
      auto* index = static_cast<uint32_t*>(Take(dev->Allocate(rows * sizeof(uint32_t))));
      std::vector<uint32_t> order(rows);
      std::iota(order.begin(), order.end(), 0u);
      std::shuffle(order.begin(), order.end(), std::mt19937(1));
      BENCH_CHECK(dev->Copy(index, order.data(), rows * sizeof(uint32_t), CopyKind::kHostToDevice,
                            stream_a.get()));
      BENCH_CHECK(dev->Fill(table, 1.0f, floats, stream_a.get()));
      BENCH_CHECK(dev->Fill(buffer, 0.5f, floats, stream_a.get()));
      BENCH_CHECK(dev->Synchronize(stream_a.get()));

      const double copy_ms = TimeMs(a, reps, [&] {
        BENCH_CHECK(cudaMemcpyAsync(buffer, table, bytes, cudaMemcpyDeviceToDevice, a));
      });
      const double gather_ms = TimeMs(a, reps, [&] {
        BENCH_CHECK(dev->Gather(buffer, table, index, rows, width, stream_a.get()));
      });
      const double scatter_ms = TimeMs(a, reps, [&] {
        BENCH_CHECK(dev->ScatterAdd(table, buffer, index, rows, width, stream_a.get()));
      });
      const double copy_gbps = GBps(2.0 * bytes, copy_ms);
      const double gather_gbps = GBps(2.0 * bytes + rows * 4.0, gather_ms);
      const double scatter_gbps = GBps(3.0 * bytes + rows * 4.0, scatter_ms);
      if (width >= kCheckedWidth) {
        if (largest.empty() || largest.back().first != width) {
          largest.push_back({width, Largest()});
        }
        largest.back().second = {rows, gather_gbps / copy_gbps, scatter_gbps / copy_gbps};
      }
      for (int k = 0; k < 2; ++k) {
        const char* op = k == 0 ? "gather" : "scatter_add";
        const double gbps = k == 0 ? gather_gbps : scatter_gbps;
        const double ms = k == 0 ? gather_ms : scatter_ms;
        std::printf("%-10s %6zu %9zu %12.1f %12.1f %11.2fx\n", op, width, rows, gbps, copy_gbps,
                    gbps / copy_gbps);
        json << (first ? "" : ",\n") << "    {\"op\": \"" << op << "\", \"width\": " << width
             << ", \"rows\": " << rows << ", \"ms\": " << ms << ", \"gbps\": " << gbps
             << ", \"copy_ms\": " << copy_ms << ", \"copy_gbps\": " << copy_gbps
             << ", \"ratio_to_copy\": " << gbps / copy_gbps << "}";
        first = false;
      }
      dev->Free(table);
      dev->Free(buffer);
      dev->Free(index);
    }
  }
  json << "\n  ],\n";

  // ---- 2. Pinned host <-> device ---------------------------------------------
  const size_t copy_bytes = quick ? (size_t{64} << 20) : (size_t{256} << 20);
  void* pinned = Take(dev->AllocatePinned(copy_bytes));
  void* on_device = Take(dev->Allocate(copy_bytes));
  std::memset(pinned, 1, copy_bytes);
  const double h2d_ms = TimeMs(a, reps, [&] {
    BENCH_CHECK(dev->Copy(on_device, pinned, copy_bytes, CopyKind::kHostToDevice, stream_a.get()));
  });
  const double d2h_ms = TimeMs(a, reps, [&] {
    BENCH_CHECK(dev->Copy(pinned, on_device, copy_bytes, CopyKind::kDeviceToHost, stream_a.get()));
  });
  std::printf("pinned H2D %.1f GB/s, D2H %.1f GB/s (%zu MiB)\n", GBps(copy_bytes, h2d_ms),
              GBps(copy_bytes, d2h_ms), copy_bytes >> 20);
  json << "  \"pinned_copy\": {\"bytes\": " << copy_bytes << ", \"h2d_ms\": " << h2d_ms
       << ", \"h2d_gbps\": " << GBps(copy_bytes, h2d_ms) << ", \"d2h_ms\": " << d2h_ms
       << ", \"d2h_gbps\": " << GBps(copy_bytes, d2h_ms) << "},\n";

  // ---- 3. Copy stream overlapped with a compute kernel -----------------------
  // A spin kernel of about the copy's duration (calibrated), on stream B.
  const long long probe_cycles = 1000000;
  const double probe_ms = TimeMs(b, 3, [&] { Spin(probe_cycles, b); });
  const long long cycles = static_cast<long long>(probe_cycles * h2d_ms / std::max(probe_ms, 1e-6));
  const double kernel_ms = TimeMs(b, reps, [&] { Spin(cycles, b); });
  const double copy_ms = h2d_ms;
  cudaEvent_t start, done_a, done_b;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&done_a));
  BENCH_CHECK(cudaEventCreate(&done_b));
  std::vector<double> both;
  for (int i = 0; i < reps; ++i) {
    BENCH_CHECK(cudaDeviceSynchronize());  // benchmark only: a clean start
    BENCH_CHECK(cudaEventRecord(start, a));
    BENCH_CHECK(cudaStreamWaitEvent(b, start, 0));
    BENCH_CHECK(dev->Copy(on_device, pinned, copy_bytes, CopyKind::kHostToDevice, stream_a.get()));
    Spin(cycles, b);
    BENCH_CHECK(cudaEventRecord(done_b, b));
    BENCH_CHECK(cudaStreamWaitEvent(a, done_b, 0));
    BENCH_CHECK(cudaEventRecord(done_a, a));
    BENCH_CHECK(cudaEventSynchronize(done_a));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, done_a));
    both.push_back(ms);
  }
  std::sort(both.begin(), both.end());
  const double both_ms = both[both.size() / 2];
  const double serial_ms = copy_ms + kernel_ms;
  // 1 = perfect overlap (both take the longer one's time), 0 = none.
  const double overlap = (serial_ms - both_ms) / std::max(1e-9, std::min(copy_ms, kernel_ms));
  std::printf(
      "overlap: copy %.2f ms + kernel %.2f ms = %.2f ms serial; "
      "concurrent %.2f ms (overlap %.0f%%)\n",
      copy_ms, kernel_ms, serial_ms, both_ms, 100 * overlap);
  json << "  \"overlap\": {\"copy_ms\": " << copy_ms << ", \"kernel_ms\": " << kernel_ms
       << ", \"serial_ms\": " << serial_ms << ", \"concurrent_ms\": " << both_ms
       << ", \"overlap_fraction\": " << overlap << "},\n";

  // ---- The checked figures --------------------------------------------------
  double gather_min = 0, scatter_min = 0;
  std::ostringstream checked;
  for (size_t i = 0; i < largest.size(); ++i) {
    const Largest& l = largest[i].second;
    gather_min = i == 0 ? l.gather : std::min(gather_min, l.gather);
    scatter_min = i == 0 ? l.scatter : std::min(scatter_min, l.scatter);
    checked << (i == 0 ? "" : ", ") << "{\"width\": " << largest[i].first
            << ", \"rows\": " << l.rows << ", \"gather_ratio\": " << l.gather
            << ", \"scatter_add_ratio\": " << l.scatter << "}";
  }
  const bool indexed_ok =
      !largest.empty() && gather_min >= min_indexed_ratio && scatter_min >= min_indexed_ratio;
  const bool overlap_ok = overlap >= min_overlap;
  const bool pass = indexed_ok && overlap_ok;
  json << "  \"checks\": {\"indexed_min_width\": " << kCheckedWidth << ", \"indexed\": ["
       << checked.str() << "], "
       << "\"gather_min_ratio\": " << gather_min << ", \"scatter_add_min_ratio\": " << scatter_min
       << ", \"min_indexed_ratio\": " << min_indexed_ratio << ", \"overlap_fraction\": " << overlap
       << ", \"min_overlap\": " << min_overlap
       << ", \"indexed_pass\": " << (indexed_ok ? "true" : "false")
       << ", \"overlap_pass\": " << (overlap_ok ? "true" : "false")
       << ", \"pass\": " << (pass ? "true" : "false") << "}\n}\n";

  dev->FreePinned(pinned);
  dev->Free(on_device);
  stream_a.reset();
  stream_b.reset();
  std::ofstream(out_path) << json.str();
  std::printf("gpu_bench: wrote %s\n", out_path.c_str());
  std::printf(
      "gpu_bench: check: gather_min_ratio=%.3f scatter_add_min_ratio=%.3f "
      "(>= %.2f, widths >= %zu) overlap_fraction=%.3f (>= %.2f): %s\n",
      gather_min, scatter_min, min_indexed_ratio, kCheckedWidth, overlap, min_overlap,
      pass ? "PASS" : "MISS");
  return check && !pass ? 3 : 0;
}
