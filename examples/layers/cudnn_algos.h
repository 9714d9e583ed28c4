// Which cuDNN convolution algorithms the CUDA layer backend may take from
// cuDNN's heuristics, as plain numbers (the values of cuDNN's enums;
// cuda_backend.cu checks them against cuDNN's headers at compile time), so
// that the rules are tested on the host (tests/layers_test.cc) and the GPU
// run meets only what needs a GPU.
#ifndef GEEPS_EXAMPLES_LAYERS_CUDNN_ALGOS_H_
#define GEEPS_EXAMPLES_LAYERS_CUDNN_ALGOS_H_

namespace nn::cudnn_algos {

enum class Pass { kForward, kBackwardData, kBackwardFilter };

// cuDNN's numbers of the algorithms named below.
inline constexpr int kFwdFft = 4, kFwdFftTiling = 5, kFwdWinograd = 6, kFwdWinogradNonfused = 7;
inline constexpr int kDataAlgo0 = 0, kDataFft = 2, kDataFftTiling = 3, kDataWinograd = 4,
                     kDataWinogradNonfused = 5;
inline constexpr int kFilterAlgo0 = 0, kFilterFft = 2, kFilterAlgo3 = 3, kFilterWinograd = 4,
                     kFilterWinogradNonfused = 5, kFilterFftTiling = 6;

// The FFT, FFT-tiling and Winograd (fused or not) algorithms: they compute
// in a transformed basis and round there, so their results are coarser than
// the layers' checks against the host backend allow (1e-4).
constexpr bool Coarse(Pass pass, int algo) {
  switch (pass) {
    case Pass::kForward:
      return algo == kFwdFft || algo == kFwdFftTiling || algo == kFwdWinograd ||
             algo == kFwdWinogradNonfused;
    case Pass::kBackwardData:
      return algo == kDataFft || algo == kDataFftTiling || algo == kDataWinograd ||
             algo == kDataWinogradNonfused;
    case Pass::kBackwardFilter:
      return algo == kFilterFft || algo == kFilterFftTiling || algo == kFilterWinograd ||
             algo == kFilterWinogradNonfused;
  }
  return true;
}

// The algorithms cuDNN documents as non-deterministic (atomics), excluded
// whatever its heuristics' determinism field says.
constexpr bool KnownNondeterministic(Pass pass, int algo) {
  return (pass == Pass::kBackwardData && algo == kDataAlgo0) ||
         (pass == Pass::kBackwardFilter && (algo == kFilterAlgo0 || algo == kFilterAlgo3));
}

// Whether the backend may use `algo` for `pass` when cuDNN's heuristics
// offer it (supported, deterministic and without tensor-op math are checked
// apart, from the heuristics' own fields).
constexpr bool Allowed(Pass pass, int algo) {
  return !Coarse(pass, algo) && !KnownNondeterministic(pass, algo);
}

}  // namespace nn::cudnn_algos

#endif  // GEEPS_EXAMPLES_LAYERS_CUDNN_ALGOS_H_
