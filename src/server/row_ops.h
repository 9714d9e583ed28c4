// The shard's inner loops over rows: adding an update message's row into a
// clock's accumulator, and folding an accumulator into the table. In a
// header so that benchmarks/micro_bench times the same code.
#ifndef GEEPS_SERVER_ROW_OPS_H_
#define GEEPS_SERVER_ROW_OPS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace geeps::server {

// dst[j] += src[j] for j < w; src is a payload that need not be aligned.
// Indexes are size_t: with 32-bit ones GCC must allow for their wrapping
// and leaves the loop scalar (it was, at a third of the shard's time).
inline void AddRow(float* __restrict dst, const unsigned char* __restrict src, uint32_t w) {
  const size_t n = w;
  for (size_t j = 0; j < n; ++j) {
    float d;
    std::memcpy(&d, src + j * sizeof(float), sizeof(float));
    dst[j] += d;
  }
}

// data += acc, then acc = 0, in one pass.
inline void FoldAndClear(float* __restrict data, float* __restrict acc, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    data[k] += acc[k];
    acc[k] = 0.0f;
  }
}

}  // namespace geeps::server

#endif  // GEEPS_SERVER_ROW_OPS_H_
