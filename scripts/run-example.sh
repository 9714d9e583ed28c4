#!/usr/bin/env bash
# Sets up, builds, then trains a small CNN on Fashion-MNIST on an embedded
# cluster of 2 workers (examples/fashion_mnist/fmnist_train) and prints the
# test accuracy after each epoch and at the end. Extra arguments go to the
# trainer (they come after the defaults, so they win), e.g.
#   bash scripts/run-example.sh --epochs 2
#   bash scripts/run-example.sh --model mlp --curve-csv curve.csv
#
# The build counts in the job's 5 minutes, so it builds only the trainer, in
# its own folder (GEEPS_EXAMPLE_BUILD_DIR, default build-example; the tests'
# folder, build, keeps its own settings), without debug information; leaves
# the CUDA backend out when no GPU is visible (nvidia-smi lists none); and
# compiles at -O3 only the layers (examples/layers, where the job spends its
# time), the rest at -O1 (libgeeps is under 1% of the job's profile). On 2
# cores that takes the build from about 290 to 135 CPU seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && grep -q '^GPU' <<<"$(nvidia-smi -L 2>/dev/null)"; then
  cuda=AUTO
fi
build_dir="${GEEPS_EXAMPLE_BUILD_DIR:-build-example}"
GEEPS_BUILD_DIR="$build_dir" GEEPS_BUILD_TARGETS=fmnist_train bash scripts/build.sh \
  -DGEEPS_BUILD_EXAMPLES=ON -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" \
  -DGEEPS_LIBRARY_OPT_LEVEL=1 -DGEEPS_WITH_CUDA="$cuda"
exec "$build_dir/examples/fashion_mnist/fmnist_train" --model cnn --workers 2 \
  --epochs 10 --batch-size 32 --lr 0.03 --lr-schedule cosine --momentum 0.9 --augment-flip \
  --test-mirror "$@"
