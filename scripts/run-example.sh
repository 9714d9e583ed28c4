#!/usr/bin/env bash
# Sets up, builds, then trains softmax regression on Fashion-MNIST on an
# embedded cluster of 2 workers and prints the test accuracy. Extra arguments
# go to the example (they come after the defaults, so they win), e.g.
#   bash scripts/run-example.sh --epochs 5
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/build.sh -DGEEPS_BUILD_EXAMPLES=ON
build_dir="${GEEPS_BUILD_DIR:-build}"
exec "$build_dir/examples/fashion_mnist/softmax_fmnist" --workers 2 --epochs 3 "$@"
