#!/usr/bin/env bash
# Sets up, builds and runs the tests; ends with CTest's summary and its exit
# status. Extra arguments go to build.sh's configure step (after
# -DGEEPS_BUILD_TESTS=ON, so that a build folder configured without tests
# gets them back).
#   GEEPS_TEST_LABELS  CTest label regex to run (e.g. 'unit|install'); when
#                      unset, everything except label 'slow' runs.
#   GEEPS_TEST_EXCLUDE label regex to leave out (default: slow; set it to ''
#                      to run everything).
#   GEEPS_BUILD_DIR    build folder (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/build.sh -DGEEPS_BUILD_TESTS=ON -DGEEPS_BUILD_BENCHMARKS=ON "$@"

build_dir="${GEEPS_BUILD_DIR:-build}"
args=(--test-dir "$build_dir" --output-on-failure -j2 --no-tests=error)
if [[ -n "${GEEPS_TEST_LABELS:-}" ]]; then
  args+=(-L "$GEEPS_TEST_LABELS")
fi
exclude="${GEEPS_TEST_EXCLUDE-slow}"
if [[ -n "$exclude" ]]; then
  args+=(-LE "$exclude")
fi
exec ctest "${args[@]}"
