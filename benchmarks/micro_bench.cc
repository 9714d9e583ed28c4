// Microbenchmarks of the host backend's kernels and of the wire decoder.
// The benchmarks issue compares gather/scatter-add against a plain copy of
// the same bytes measured in the same run (BM_Copy).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "device/device.h"
#include "memory/planner.h"
#include "server/row_ops.h"
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
              stream.get())
        .ok();
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

void BM_EncodeHeader(benchmark::State& state) {
  transport::WireHeader h;
  h.type = static_cast<uint16_t>(transport::MsgType::kUpdate);
  h.row_width = kWidth;
  unsigned char out[transport::kHeaderBytes];
  for (auto _ : state) {
    h.clock++;
    transport::EncodeHeader(h, out);
    benchmark::DoNotOptimize(out);
  }
}

// A shard applying one clock's update of `rows` rows from one worker: each
// row added into the clock's accumulator, then the accumulator folded into
// the table (the two passes of PartitionTable::Update).
void BM_ShardApplyUpdate(benchmark::State& state) {
  const size_t rows = state.range(0), width = 1024;
  std::vector<float> data(rows * width, 0.0f), acc(rows * width, 0.0f);
  std::vector<float> payload(rows * width, 0.5f);
  const auto* bytes = reinterpret_cast<const unsigned char*>(payload.data());
  for (auto _ : state) {
    for (size_t r = 0; r < rows; ++r)
      server::AddRow(acc.data() + r * width, bytes + r * width * sizeof(float), width);
    server::FoldAndClear(data.data(), acc.data(), acc.size());
    benchmark::DoNotOptimize(data.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * width * sizeof(float));
}

// The memory planner against sequence length: `n` layers, each a Read and
// an Update of its weights and a forward and backward local access (4n
// accesses, 8n ops), at a budget that forces eviction.
void BM_Plan(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  memory::PlanInput in;
  for (int l = 0; l < n; ++l) {
    in.tables.push_back({64, 4096});
    in.local_batches.push_back({1 << 20});
  }
  auto access = [&](memory::AccessKind kind, int table, uint64_t bytes) {
    memory::AccessInfo a;
    a.kind = kind;
    a.table = table;
    a.bytes = bytes;
    if (kind != memory::AccessKind::kLocal)
      for (uint64_t r = 0; r < 64; ++r) a.cache_rows.push_back(r);
    in.accesses.push_back(a);
    return static_cast<int>(in.accesses.size()) - 1;
  };
  auto open_close = [&](int a) {
    in.ops.push_back({memory::OpKind::kOpen, a});
    in.ops.push_back({memory::OpKind::kClose, a});
  };
  for (int l = 0; l < n; ++l) {
    open_close(access(memory::AccessKind::kRead, l, 64 * 4096));
    open_close(access(memory::AccessKind::kLocal, l, 1 << 20));
  }
  for (int l = n - 1; l >= 0; --l) {
    open_close(access(memory::AccessKind::kLocal, l, 1 << 20));
    open_close(access(memory::AccessKind::kUpdate, l, 64 * 4096));
  }
  in.required_level = memory::Level::kNone;
  in.budget_bytes = static_cast<uint64_t>(n) * (1 << 20) / 4 + (8 << 20);
  for (auto _ : state) {
    auto plan = memory::MakePlan(in);
    if (!plan.ok()) state.SkipWithError(plan.status().message().c_str());
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(state.iterations() * in.ops.size());
}

BENCHMARK(BM_Copy)->Arg(64)->Arg(4096)->UseRealTime();
BENCHMARK(BM_Gather)->Arg(64)->Arg(4096)->UseRealTime();
BENCHMARK(BM_ScatterAdd)->Arg(64)->Arg(4096)->UseRealTime();
BENCHMARK(BM_DecodeUpdate)->Arg(64)->Arg(4096)->UseRealTime();
BENCHMARK(BM_EncodeHeader);
BENCHMARK(BM_ShardApplyUpdate)->Arg(16)->Arg(1024)->UseRealTime();
BENCHMARK(BM_Plan)->Arg(8)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace geeps
