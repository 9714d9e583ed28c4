#!/usr/bin/env bash
# Sets up, builds, then trains a small CNN on Fashion-MNIST on an embedded
# cluster of 2 workers (examples/fashion_mnist/fmnist_train) and prints the
# test accuracy after each epoch and at the end. Extra arguments go to the
# trainer (they come after the defaults, so they win), e.g.
#   bash scripts/run-example.sh --epochs 2
#   bash scripts/run-example.sh --model mlp --curve-csv curve.csv
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
GEEPS_BUILD_TARGETS="${GEEPS_BUILD_TARGETS:-fmnist_train}" bash scripts/build.sh \
  -DGEEPS_BUILD_EXAMPLES=ON
build_dir="${GEEPS_BUILD_DIR:-build}"
exec "$build_dir/examples/fashion_mnist/fmnist_train" --model cnn --workers 2 \
  --epochs 8 --batch-size 64 --lr 0.05 --lr-schedule cosine --momentum 0.9 --augment-flip \
  --test-mirror "$@"
