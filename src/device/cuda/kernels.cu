// The CUDA backend's kernels. Kept small: this is the only file nvcc
// compiles for the library, and CI compiles it on two cores.
#include "device/cuda/kernels.h"

#include <algorithm>

namespace geeps::device::cuda {

namespace {

constexpr int kThreads = 256;

// One element (a float or a float4) of a row operation.
template <RowOp Op, typename V>
__device__ __forceinline__ void RowElement(V* dst, const V* src, size_t d,
                                           size_t s);

template <>
__device__ __forceinline__ void RowElement<RowOp::kGather, float>(
    float* dst, const float* src, size_t d, size_t s) {
  dst[d] = src[s];
}
template <>
__device__ __forceinline__ void RowElement<RowOp::kScatter, float>(
    float* dst, const float* src, size_t d, size_t s) {
  dst[d] = src[s];
}
template <>
__device__ __forceinline__ void RowElement<RowOp::kScatterAdd, float>(
    float* dst, const float* src, size_t d, size_t s) {
  dst[d] += src[s];
}
template <>
__device__ __forceinline__ void RowElement<RowOp::kGather, float4>(
    float4* dst, const float4* src, size_t d, size_t s) {
  dst[d] = src[s];
}
template <>
__device__ __forceinline__ void RowElement<RowOp::kScatter, float4>(
    float4* dst, const float4* src, size_t d, size_t s) {
  dst[d] = src[s];
}
template <>
__device__ __forceinline__ void RowElement<RowOp::kScatterAdd, float4>(
    float4* dst, const float4* src, size_t d, size_t s) {
  float4 a = dst[d];
  const float4 b = src[s];
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
  dst[d] = a;
}

// Flat grid-stride loop over n * width elements (width in units of V). The
// indexed side is src for kGather, dst otherwise. I is the offset type.
template <RowOp Op, typename V, typename I>
__global__ void RowKernel(V* __restrict__ dst, const V* __restrict__ src,
                          const uint32_t* __restrict__ index, I n, I width) {
  const I total = n * width;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const I row = e / width;
    const I col = e - row * width;
    const size_t indexed = static_cast<size_t>(index[row]) * width + col;
    if (Op == RowOp::kGather) {
      RowElement<Op, V>(dst, src, e, indexed);
    } else {
      RowElement<Op, V>(dst, src, indexed, e);
    }
  }
}

__global__ void AddKernel(float* __restrict__ dst,
                          const float* __restrict__ src, size_t count,
                          bool vector) {
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

__global__ void FillKernel(float* __restrict__ dst, float value, size_t count,
                           bool vector) {
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

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

int Blocks(size_t elements, int max_blocks) {
  const size_t wanted = (elements + kThreads - 1) / kThreads;
  return static_cast<int>(
      std::max<size_t>(1, std::min<size_t>(wanted, std::max(max_blocks, 1))));
}

template <RowOp Op, typename V>
cudaError_t LaunchRowsAs(V* dst, const V* src, const uint32_t* index,
                         size_t n, size_t width, int max_blocks,
                         cudaStream_t stream) {
  const size_t total = n * width;  // the caller checked for overflow
  const int blocks = Blocks(total, max_blocks);
  if (total < (size_t{1} << 32)) {
    RowKernel<Op, V, uint32_t><<<blocks, kThreads, 0, stream>>>(
        dst, src, index, static_cast<uint32_t>(n),
        static_cast<uint32_t>(width));
  } else {
    RowKernel<Op, V, size_t><<<blocks, kThreads, 0, stream>>>(dst, src, index,
                                                              n, width);
  }
  return cudaGetLastError();
}

template <RowOp Op>
cudaError_t LaunchRowsOp(float* dst, const float* src, const uint32_t* index,
                         size_t n, size_t width, int max_blocks,
                         cudaStream_t stream) {
  if (width % 4 == 0 && Aligned16(dst) && Aligned16(src)) {
    return LaunchRowsAs<Op, float4>(reinterpret_cast<float4*>(dst),
                                    reinterpret_cast<const float4*>(src),
                                    index, n, width / 4, max_blocks, stream);
  }
  return LaunchRowsAs<Op, float>(dst, src, index, n, width, max_blocks,
                                 stream);
}

}  // namespace

cudaError_t LaunchRows(RowOp op, float* dst, const float* src,
                       const uint32_t* index, size_t n, size_t width,
                       int max_blocks, cudaStream_t stream) {
  switch (op) {
    case RowOp::kGather:
      return LaunchRowsOp<RowOp::kGather>(dst, src, index, n, width,
                                          max_blocks, stream);
    case RowOp::kScatter:
      return LaunchRowsOp<RowOp::kScatter>(dst, src, index, n, width,
                                           max_blocks, stream);
    case RowOp::kScatterAdd:
      return LaunchRowsOp<RowOp::kScatterAdd>(dst, src, index, n, width,
                                              max_blocks, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchAdd(float* dst, const float* src, size_t count,
                      int max_blocks, cudaStream_t stream) {
  const bool vector = Aligned16(dst) && Aligned16(src);
  AddKernel<<<Blocks(vector ? count / 4 + 3 : count, max_blocks), kThreads, 0,
              stream>>>(dst, src, count, vector);
  return cudaGetLastError();
}

cudaError_t LaunchFill(float* dst, float value, size_t count, int max_blocks,
                       cudaStream_t stream) {
  const bool vector = Aligned16(dst);
  FillKernel<<<Blocks(vector ? count / 4 + 3 : count, max_blocks), kThreads, 0,
               stream>>>(dst, value, count, vector);
  return cudaGetLastError();
}

cudaError_t LaunchSpin(long long cycles, cudaStream_t stream) {
  SpinKernel<<<1, 1, 0, stream>>>(cycles);
  return cudaGetLastError();
}

}  // namespace geeps::device::cuda
