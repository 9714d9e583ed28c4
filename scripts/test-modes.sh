#!/usr/bin/env bash
# Runs the test suite again in the host backend's test modes, which make
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
#           use the alias).
#   cuda    GEEPS_HOST_AS_CUDA=1: DeviceKind::kAuto is a host device that
#           behaves like the GPU kAuto gives on the GPU machine (all three
#           properties above at once, plus the driver's thread and resident
#           memory: src/device/host/cuda_like.h); kHost chosen explicitly
#           stays the plain host. Every test except label 'slow', the
#           sprays included: the whole suite as the GPU check's suite stage
#           will meet it. Alone only (it sets the others for its devices).
#   checked GEEPS_CHECKED=1: the checked mode (Config::checked), over every
#           test that trains: the examples (label examples, which the plain
#           run already runs checked), the exact-sum, Step, deterministic
#           and checkpoint suites; a false report of misuse fails them.
#           Alone only.
# A mode may join others with '+' (GEEPS_TEST_MODES, default
# "async+noalias async+opaque cuda checked", what .ci/run runs): one run with every
# variable of the parts set, over the tests of the narrowest part. The
# asynchronous streams go with each of the other two rather than alone: the
# paths that only no-alias takes (copies through the stream) and those that
# only opaque takes (the alias translated) then also run with late streams,
# and the suite runs twice instead of three times. no-alias and opaque stay
# apart: with no alias, the translated paths opaque exists for are not taken.
# Every mode leaves out ForeignTrafficTest (label security): its four 20 s
# sprays test who gets past a handshake, which no device mode changes; the
# plain run and the sanitizer runs have them.
# GEEPS_TEST_JOBS: tests run at once (default 4, as scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${GEEPS_BUILD_DIR:-build}"
modes="${GEEPS_TEST_MODES:-async+noalias async+opaque cuda checked}"
sprays='ForeignTrafficTest\.'
run() {  # run <VAR=value...> -- <ctest args>...
  local settings=()
  while [[ "$1" != -- ]]; do settings+=("$1"); shift; done
  shift
  echo "test-modes.sh: ${settings[*]} ctest $*"
  env "${settings[@]}" ctest --test-dir "$build_dir" --output-on-failure -j "${GEEPS_TEST_JOBS:-4}" --no-tests=error "$@"
}
for mode in $modes; do
  if [[ "$mode" == cuda ]]; then
    run GEEPS_HOST_AS_CUDA=1 -- -LE slow
    continue
  fi
  if [[ "$mode" == checked ]]; then
    run GEEPS_CHECKED=1 -- -LE slow -R 'ExactSum|Step|Deterministic|Checkpoint'
    run GEEPS_CHECKED=1 -- -L examples
    continue
  fi
  settings=()
  opaque=0
  for part in ${mode//+/ }; do
    case "$part" in
      async) settings+=(GEEPS_ASYNC_HOST_STREAMS=1) ;;
      opaque) settings+=(GEEPS_HOST_OPAQUE_POINTERS=1); opaque=1 ;;
      noalias) settings+=(GEEPS_HOST_NO_ALIAS=1) ;;
      *)
        echo "test-modes.sh: unknown mode '$part' in '$mode' (expected async, opaque, noalias, joined by +, or cuda or checked alone)" >&2
        exit 2
        ;;
    esac
  done
  if [[ $opaque -eq 1 ]]; then
    run "${settings[@]}" -- -LE 'slow|examples' -E "$sprays"
    run "${settings[@]}" -- -R '^(TrainSoftmax|Shapes/TrainSoftmaxExact|ProcessMode)'
  else
    run "${settings[@]}" -- -LE slow -E "$sprays"
  fi
done
