#!/usr/bin/env bash
# Configures (Ninja, RelWithDebInfo) and builds libgeeps with its tests and
# examples. Extra arguments go to the configure step, e.g.
#   bash scripts/build.sh -DGEEPS_SANITIZE=address,undefined
# GEEPS_BUILD_DIR (default: build) names the build folder; GEEPS_JOBS
# (default: 2) the number of parallel jobs.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${GEEPS_BUILD_DIR:-build}"
jobs="${GEEPS_JOBS:-2}"

cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  "$@"
# GEEPS_BUILD_TARGETS: build only these targets (space-separated), e.g. the
# example the README's first command runs; default: everything configured.
targets=()
for t in ${GEEPS_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
