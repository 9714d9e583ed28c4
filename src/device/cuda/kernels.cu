// The CUDA backend's kernels. Kept small: this is the only file nvcc
// compiles for the library, and CI compiles it on two cores.
#include "device/cuda/kernels.h"

#include <utility>

#include "device/cuda/grid_stride.h"
#include "device/cuda/launch_error.h"
#include "device/cuda/row_groups.h"

namespace geeps::device::cuda {

namespace {

// a += b, per component.
__device__ __forceinline__ void AddTo(float& a, float b) { a += b; }
__device__ __forceinline__ void AddTo(float4& a, const float4& b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// One element (a float or a float4) of a row operation: a copy for kGather
// and kScatter, an add for kScatterAdd.
template <RowOp Op, typename V>
__device__ __forceinline__ void RowElement(V* dst, const V* src, size_t d, size_t s) {
  if constexpr (Op == RowOp::kScatterAdd) {
    V a = dst[d];
    AddTo(a, src[s]);
    dst[d] = a;
  } else {
    dst[d] = src[s];
  }
}

// Row groups (row_groups.h): G lanes per row, the groups striding over the
// rows and the lanes of a group over the row's columns, with width in units
// of V. The indexed side is src for kGather, dst otherwise. I is the counter
// and flat-offset type: the launcher picks uint32_t only where no counter or
// offset can wrap (row_groups.h, tested on the host by
// tests/row_groups_test.cc); indexed offsets are always 64-bit.
// __restrict__ holds by contract (device.h): dst overlaps neither src's rows
// nor index.
template <RowOp Op, typename V, typename I>
__global__ void RowKernel(V* __restrict__ dst, const V* __restrict__ src,
                          const uint32_t* __restrict__ index, const RowGroups<I> g) {
  const I first_col = g.FirstColumn(threadIdx.x);
  if (!g.WithinRow(first_col)) return;  // a lane past the end of a narrow row
  for (I row = g.FirstRow(blockIdx.x, blockDim.x, threadIdx.x); g.WithinRows(row);
       row = g.NextRow(row)) {
    const I flat = g.RowStart(row);
    const size_t indexed = g.IndexedRowStart(index[row]);  // one load per row
    for (I col = first_col; g.WithinRow(col); col = g.NextColumn(col)) {
      if constexpr (Op == RowOp::kGather) {
        RowElement<Op, V>(dst, src, flat + col, indexed + col);
      } else {
        RowElement<Op, V>(dst, src, indexed + col, flat + col);
      }
    }
  }
}

// No __restrict__: Add's contract (device.h) allows dst == src (each element
// is then doubled; a thread reads both operands of an element before it
// writes it, and no two threads touch the same element).
__global__ void AddKernel(float* dst, const float* src, size_t count, bool vector) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t scalar_from = 0;
  if (vector) {
    float4* d4 = reinterpret_cast<float4*>(dst);
    const float4* s4 = reinterpret_cast<const float4*>(src);
    const size_t count4 = count / 4;
    for (size_t i = first; i < count4; i += stride) {
      float4 a = d4[i];
      const float4 b = s4[i];
      a.x += b.x;
      a.y += b.y;
      a.z += b.z;
      a.w += b.w;
      d4[i] = a;
    }
    scalar_from = count4 * 4;
  }
  for (size_t i = scalar_from + first; i < count; i += stride) dst[i] += src[i];
}

__global__ void FillKernel(float* __restrict__ dst, float value, size_t count, bool vector) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t scalar_from = 0;
  if (vector) {
    float4* d4 = reinterpret_cast<float4*>(dst);
    const float4 v = make_float4(value, value, value, value);
    const size_t count4 = count / 4;
    for (size_t i = first; i < count4; i += stride) d4[i] = v;
    scalar_from = count4 * 4;
  }
  for (size_t i = scalar_from + first; i < count; i += stride) dst[i] = value;
}

__global__ void SpinKernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Launches `kernel` with `blocks` x `threads` threads on `stream` and
// returns this launch's own error, cleared from the last error if it failed
// (launch_error.h): cudaLaunchKernelEx returns it directly, so an older error
// still latched in cudaGetLastError() is never taken for a launch failure,
// as it would be after a <<<...>>> launch.
template <typename... Params, typename... Args>
cudaError_t Launch(int blocks, int threads, cudaStream_t stream, void (*kernel)(Params...),
                   Args&&... args) {
  cudaLaunchConfig_t config = {};  // no attributes, no dynamic shared memory
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = stream;
  return OwnLaunchError(
      cudaSuccess, [&] { return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...); },
      [] { return cudaGetLastError(); });
}

template <RowOp Op, typename V>
cudaError_t LaunchRowsAs(V* dst, const V* src, const uint32_t* index, size_t n, size_t width,
                         int max_blocks, cudaStream_t stream) {
  const RowGroupLaunch plan = PlanRowGroups(n, width, max_blocks);
  if (plan.narrow) {
    return Launch(plan.blocks, kThreadsPerBlock, stream, RowKernel<Op, V, uint32_t>, dst, src,
                  index, MakeRowGroups<uint32_t>(plan, n, width));
  }
  return Launch(plan.blocks, kThreadsPerBlock, stream, RowKernel<Op, V, size_t>, dst, src, index,
                MakeRowGroups<size_t>(plan, n, width));
}

template <RowOp Op>
cudaError_t LaunchRowsOp(float* dst, const float* src, const uint32_t* index, size_t n,
                         size_t width, int max_blocks, cudaStream_t stream) {
  if (width % 4 == 0 && Aligned16(dst) && Aligned16(src)) {
    return LaunchRowsAs<Op, float4>(reinterpret_cast<float4*>(dst),
                                    reinterpret_cast<const float4*>(src), index, n, width / 4,
                                    max_blocks, stream);
  }
  return LaunchRowsAs<Op, float>(dst, src, index, n, width, max_blocks, stream);
}

}  // namespace

cudaError_t LaunchRows(RowOp op, float* dst, const float* src, const uint32_t* index, size_t n,
                       size_t width, int max_blocks, cudaStream_t stream) {
  switch (op) {
    case RowOp::kGather:
      return LaunchRowsOp<RowOp::kGather>(dst, src, index, n, width, max_blocks, stream);
    case RowOp::kScatter:
      return LaunchRowsOp<RowOp::kScatter>(dst, src, index, n, width, max_blocks, stream);
    case RowOp::kScatterAdd:
      return LaunchRowsOp<RowOp::kScatterAdd>(dst, src, index, n, width, max_blocks, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchAdd(float* dst, const float* src, size_t count, int max_blocks,
                      cudaStream_t stream) {
  const bool vector = Aligned16(dst) && Aligned16(src);
  return Launch(GridBlocks(vector ? count / 4 + 3 : count, max_blocks), kThreadsPerBlock, stream,
                AddKernel, dst, src, count, vector);
}

cudaError_t LaunchFill(float* dst, float value, size_t count, int max_blocks, cudaStream_t stream) {
  const bool vector = Aligned16(dst);
  return Launch(GridBlocks(vector ? count / 4 + 3 : count, max_blocks), kThreadsPerBlock, stream,
                FillKernel, dst, value, count, vector);
}

cudaError_t LaunchSpin(long long cycles, cudaStream_t stream) {
  return Launch(1, 1, stream, SpinKernel, cycles);
}

}  // namespace geeps::device::cuda
