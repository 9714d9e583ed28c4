// Launchers of the CUDA backend's kernels (kernels.cu). Each enqueues one
// kernel on `stream` and returns that launch's own error (cudaSuccess when it
// was queued), never an older error left in cudaGetLastError(); a failed
// launch is cleared from it. The caller has checked the arguments and skips
// empty operations.
//
// Rows move as 16-byte vectors (float4) when the row width is a multiple of
// four floats and both row arrays are 16-byte aligned; otherwise one float at
// a time, which handles any width and any float alignment. A group of up to
// 32 lanes handles one row at a time (row_groups.h), counting in 32 bits
// when no counter or flat offset can wrap, else in 64 bits. Add and Fill
// likewise vectorise when their pointers are 16-byte aligned (with a scalar
// tail).
//
// `max_blocks` caps the grid (the kernels loop over what is left).
#ifndef GEEPS_DEVICE_CUDA_KERNELS_H_
#define GEEPS_DEVICE_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace geeps::device::cuda {

enum class RowOp { kGather, kScatter, kScatterAdd };

// kGather:     dst[i*w + j]  = src[index[i]*w + j]
// kScatter:    dst[index[i]*w + j]  = src[i*w + j]
// kScatterAdd: dst[index[i]*w + j] += src[i*w + j]   (indexes distinct)
// for i < n, j < w. REQUIRES: n > 0, w > 0.
cudaError_t LaunchRows(RowOp op, float* dst, const float* src, const uint32_t* index, size_t n,
                       size_t width, int max_blocks, cudaStream_t stream);

// dst[i] += src[i] for i < count. REQUIRES: count > 0; dst == src or the
// two ranges are disjoint (device.h).
cudaError_t LaunchAdd(float* dst, const float* src, size_t count, int max_blocks,
                      cudaStream_t stream);

// dst[i] = value for i < count. REQUIRES: count > 0.
cudaError_t LaunchFill(float* dst, float value, size_t count, int max_blocks, cudaStream_t stream);

// A kernel that spins for about `cycles` clock cycles (benchmarks: a stand-in
// for compute to overlap copies with).
cudaError_t LaunchSpin(long long cycles, cudaStream_t stream);

}  // namespace geeps::device::cuda

#endif  // GEEPS_DEVICE_CUDA_KERNELS_H_
