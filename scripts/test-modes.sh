#!/usr/bin/env bash
# Runs the test suite again in the host backend's two test modes, which make
# GPU-only bugs visible on a machine without a GPU (docs/api.md, "Device
# buffers and the compute stream"). Needs a build folder with the tests
# (scripts/test.sh makes one); builds nothing.
#   async   GEEPS_ASYNC_HOST_STREAMS=1: every host stream op runs late, on its
#           own thread; every test except label 'slow'.
#   opaque  GEEPS_HOST_OPAQUE_POINTERS=1: device addresses the host cannot
#           dereference; every test except labels 'slow' and 'examples' (the
#           example layers' host kernels read device memory by design: they
#           stand for GPU kernels), plus the softmax example's tests, whose
#           trainer computes on the host and must copy through the worker.
#   noalias GEEPS_HOST_NO_ALIAS=1: device memory has no host alias
#           (Device::HostAlias returns null, as on CUDA), so the data path
#           copies where it would read device memory in place; every test
#           except label 'slow' (the example layers included: they do not
#           use the alias). .ci/run runs it as a stage of its own.
# Every mode leaves out ForeignTrafficTest (label security): its four 20 s
# sprays test who gets past a handshake, which no device mode changes; the
# plain run and the sanitizer runs have them.
#   GEEPS_TEST_MODES  which modes (default "async opaque noalias")
#   GEEPS_BUILD_DIR   build folder (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${GEEPS_BUILD_DIR:-build}"
modes="${GEEPS_TEST_MODES:-async opaque noalias}"
sprays='ForeignTrafficTest\.'
run() {  # run <VAR=value> <ctest args>...
  local setting="$1"
  shift
  echo "test-modes.sh: $setting ctest $*"
  env "$setting" ctest --test-dir "$build_dir" --output-on-failure -j2 --no-tests=error "$@"
}
for mode in $modes; do
  case "$mode" in
    async) run GEEPS_ASYNC_HOST_STREAMS=1 -LE slow -E "$sprays" ;;
    opaque)
      run GEEPS_HOST_OPAQUE_POINTERS=1 -LE 'slow|examples' -E "$sprays"
      run GEEPS_HOST_OPAQUE_POINTERS=1 -R '^(TrainSoftmax|Shapes/TrainSoftmaxExact|ProcessMode)'
      ;;
    noalias) run GEEPS_HOST_NO_ALIAS=1 -LE slow -E "$sprays" ;;
    *)
      echo "test-modes.sh: unknown mode '$mode' (expected async, opaque, noalias)" >&2
      exit 2
      ;;
  esac
done
