// Microbenchmarks of the host backend's kernels and of the wire decoder.
// The benchmarks issue compares gather/scatter-add against a plain copy of
// the same bytes measured in the same run (BM_Copy).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "device/device.h"
#include "transport/wire.h"

namespace geeps {
namespace {

struct DeviceFixture {
  std::unique_ptr<device::Device> dev;
  std::unique_ptr<device::Stream> stream;
  float* src = nullptr;
  float* dst = nullptr;
  uint32_t* index = nullptr;

  DeviceFixture(size_t rows, size_t width) {
    dev = std::move(device::CreateDevice(DeviceKind::kHost, {})).value();
    stream = std::move(dev->CreateStream()).value();
    src = static_cast<float*>(dev->Allocate(rows * width * sizeof(float)).value());
    dst = static_cast<float*>(dev->Allocate(rows * width * sizeof(float)).value());
    index = static_cast<uint32_t*>(dev->Allocate(rows * sizeof(uint32_t)).value());
    std::vector<uint32_t> idx(rows);
    std::iota(idx.begin(), idx.end(), 0u);
    // Reverse order: every row moves.
    std::reverse(idx.begin(), idx.end());
    dev->Copy(index, idx.data(), rows * sizeof(uint32_t), device::CopyKind::kHostToDevice,
              stream.get()).ok();
    dev->Fill(src, 1.0f, rows * width, stream.get()).ok();
    dev->Fill(dst, 0.0f, rows * width, stream.get()).ok();
    dev->Synchronize(stream.get()).ok();
  }
  ~DeviceFixture() {
    dev->Free(src);
    dev->Free(dst);
    dev->Free(index);
  }
};

constexpr size_t kWidth = 128;

// Times one device operation over `rows` rows of kWidth floats (enqueue and
// wait), as bytes moved per second.
template <typename Op>
void TimeDeviceOp(benchmark::State& state, Op op) {
  const size_t rows = state.range(0);
  DeviceFixture f(rows, kWidth);
  for (auto _ : state) {
    op(f, rows).ok();
    f.dev->Synchronize(f.stream.get()).ok();
  }
  state.SetBytesProcessed(state.iterations() * rows * kWidth * sizeof(float));
}

void BM_Copy(benchmark::State& state) {
  TimeDeviceOp(state, [](DeviceFixture& f, size_t rows) {
    return f.dev->Copy(f.dst, f.src, rows * kWidth * sizeof(float),
                       device::CopyKind::kDeviceToDevice, f.stream.get());
  });
}

void BM_Gather(benchmark::State& state) {
  TimeDeviceOp(state, [](DeviceFixture& f, size_t rows) {
    return f.dev->Gather(f.dst, f.src, f.index, rows, kWidth, f.stream.get());
  });
}

void BM_ScatterAdd(benchmark::State& state) {
  TimeDeviceOp(state, [](DeviceFixture& f, size_t rows) {
    return f.dev->ScatterAdd(f.dst, f.src, f.index, rows, kWidth, f.stream.get());
  });
}

void BM_DecodeUpdate(benchmark::State& state) {
  const size_t rows = state.range(0);
  transport::WireHeader h;
  h.type = static_cast<uint16_t>(transport::MsgType::kUpdate);
  h.row_count = rows;
  h.row_width = kWidth;
  std::vector<unsigned char> header(transport::kHeaderBytes);
  transport::EncodeHeader(h, header.data());
  std::vector<uint64_t> row_ids(rows);
  std::iota(row_ids.begin(), row_ids.end(), 0u);
  std::vector<float> payload(rows * kWidth);
  transport::FrameView frames[3] = {{header.data(), header.size()},
                                    {row_ids.data(), rows * sizeof(uint64_t)},
                                    {payload.data(), payload.size() * sizeof(float)}};
  for (auto _ : state) {
    auto m = transport::DecodeFrames(frames, 3);
    benchmark::DoNotOptimize(m.ok() && transport::ValidateRows(*m, 0, rows).ok());
  }
  state.SetItemsProcessed(state.iterations() * rows);
}

BENCHMARK(BM_Copy)->Arg(64)->Arg(4096)->UseRealTime();
BENCHMARK(BM_Gather)->Arg(64)->Arg(4096)->UseRealTime();
BENCHMARK(BM_ScatterAdd)->Arg(64)->Arg(4096)->UseRealTime();
BENCHMARK(BM_DecodeUpdate)->Arg(64)->Arg(4096)->UseRealTime();

}  // namespace
}  // namespace geeps
