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
#   GEEPS_TEST_JOBS    tests run at once (default 4 on any machine: most
#                      tests wait on sockets, timeouts and child processes;
#                      on 2 cores the suite used 104 s of CPU in 144 s at
#                      -j2, and took 76 s at -j4: docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/build.sh -DGEEPS_BUILD_TESTS=ON -DGEEPS_BUILD_BENCHMARKS=ON "$@"

build_dir="${GEEPS_BUILD_DIR:-build}"
args=(--test-dir "$build_dir" --output-on-failure -j "${GEEPS_TEST_JOBS:-4}" --no-tests=error)
if [[ -n "${GEEPS_TEST_LABELS:-}" ]]; then
  args+=(-L "$GEEPS_TEST_LABELS")
fi
exclude="${GEEPS_TEST_EXCLUDE-slow}"
if [[ -n "$exclude" ]]; then
  args+=(-LE "$exclude")
fi
exec ctest "${args[@]}"
