// Which elements dropout keeps: a pure function of (seed, index), so that
// the backward pass recomputes the forward pass's mask without storing it,
// and every backend (the host loop, the CUDA kernel) draws the same mask.
#ifndef GEEPS_EXAMPLES_LAYERS_DROPOUT_MASK_H_
#define GEEPS_EXAMPLES_LAYERS_DROPOUT_MASK_H_

#include <cstdint>

#if defined(__CUDACC__)
#define NN_HOST_DEVICE __host__ __device__
#else
#define NN_HOST_DEVICE
#endif

namespace nn {

// The drop threshold of `rate` (in [0, 1)) on 32-bit draws: an element is
// dropped when its draw is below it, i.e. with probability rate.
NN_HOST_DEVICE inline uint32_t DropoutThreshold(float rate) {
  return rate <= 0.0f ? 0u : static_cast<uint32_t>(static_cast<double>(rate) * 4294967296.0);
}

// The 32-bit draw of element i (SplitMix64's finaliser of seed and i).
NN_HOST_DEVICE inline uint32_t DropoutDraw(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<uint32_t>(z >> 32);
}

NN_HOST_DEVICE inline bool DropoutKeeps(uint64_t seed, uint64_t i, uint32_t threshold) {
  return DropoutDraw(seed, i) >= threshold;
}

}  // namespace nn

#endif  // GEEPS_EXAMPLES_LAYERS_DROPOUT_MASK_H_
