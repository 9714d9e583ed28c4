#!/usr/bin/env bash
# The libtorch example (examples/torch, docs/examples.md): sets up (the
# main set-up's packages and Debian's libtorch-dev, about 120 MB, which only
# this script installs), builds torch_fmnist in its own folder
# (GEEPS_TORCH_BUILD_DIR, default build-torch), then trains a libtorch CNN
# on Fashion-MNIST through libgeeps on an embedded cluster of 2 workers and
# prints "workers: 2" and "test accuracy: X". Extra arguments go to
# torch_fmnist, e.g.
#   bash scripts/run-torch-example.sh --baseline      # libtorch alone
#   bash scripts/run-torch-example.sh --workers 4 --epochs 2
#   bash scripts/run-torch-example.sh --test          # ctest -L torch instead
# --test builds the torch tests into GEEPS_TORCH_BUILD_DIR and runs them,
# then again in the host backend's CUDA-like mode (.ci/run does so in its
# own build folder, build, whose libgeeps is built already). As
# scripts/run-example.sh: without debug information, the CUDA backend left
# out when no GPU is visible, libgeeps at -O1 (libtorch's
# kernels are where the time goes).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh libtorch-dev
build_dir="${GEEPS_TORCH_BUILD_DIR:-build-torch}"
if [[ "${1:-}" == --test ]]; then
  GEEPS_BUILD_DIR="$build_dir" GEEPS_BUILD_TARGETS=geeps_tests_torch bash scripts/build.sh \
    -DGEEPS_WITH_TORCH=ON -DGEEPS_BUILD_EXAMPLES=ON -DGEEPS_BUILD_TESTS=ON
  ctest --test-dir "$build_dir" -L torch --output-on-failure -j "${GEEPS_TEST_JOBS:-4}" --no-tests=error
  # Again in the CUDA-like mode (scripts/test-modes.sh): the worker's
  # buffers are then opaque, without a host alias, as the GPU's.
  echo "run-torch-example.sh: GEEPS_HOST_AS_CUDA=1 ctest -L torch"
  GEEPS_HOST_AS_CUDA=1 exec ctest --test-dir "$build_dir" -L torch --output-on-failure \
    -j "${GEEPS_TEST_JOBS:-4}" --no-tests=error
fi
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && grep -q '^GPU' <<<"$(nvidia-smi -L 2>/dev/null)"; then
  cuda=AUTO
fi
GEEPS_BUILD_DIR="$build_dir" GEEPS_BUILD_TARGETS=torch_fmnist bash scripts/build.sh \
  -DGEEPS_WITH_TORCH=ON -DGEEPS_BUILD_EXAMPLES=ON -DGEEPS_BUILD_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
  -DGEEPS_LIBRARY_OPT_LEVEL=1 -DGEEPS_WITH_CUDA="$cuda"
exec "$build_dir/examples/torch/torch_fmnist" --workers 2 "$@"
