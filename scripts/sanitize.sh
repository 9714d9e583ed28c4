#!/usr/bin/env bash
# Builds libgeeps with sanitizers and runs its tests under them. Exits
# non-zero on any failing test and on any sanitizer report, including one in
# a child process whose exit status a test ignores (see "Reports" below).
#
# Stages (GEEPS_SANITIZE_STAGES, default "asan tsan"):
#   asan  build-asan, -DGEEPS_SANITIZE=address,undefined (ASan, LeakSanitizer,
#         UBSan; -fno-sanitize-recover=all): every test except label 'slow'.
#   tsan  build-tsan, -DGEEPS_SANITIZE=thread: the concurrency tests, labels
#         GEEPS_TSAN_LABELS (default 'cluster|multiproc|memory|security'), and the
#         tests of device_test and async_host_test; it builds only those
#         (the labels' geeps_tests_<label> targets and the two binaries).
# Both build type Debug with the flags "-O1 -g1" (GEEPS_SANITIZE_BUILD_TYPE,
# GEEPS_SANITIZE_CXX_FLAGS, which replace CMAKE_CXX_FLAGS_<TYPE>): assertions
# on, line tables for the reports' stacks, and a shorter compile than -O2 or
# full -g (docs/reliability.md). Both without the CUDA backend
# (-DGEEPS_WITH_CUDA=OFF): with no GPU its tests skip, and the plain build's
# tests already run its no-GPU errors; nvcc's share of each build is saved.
#
# Reports: tests/CMakeLists.txt gives each test ASAN_OPTIONS or TSAN_OPTIONS
# (halt_on_error=1, tests/tsan.supp); a report makes the process exit
# non-zero (ASan, LeakSanitizer and UBSan 1, TSan 66), and processes a test
# starts inherit the options. A few tests expect a child to fail and accept
# any non-zero status, so after each stage this script also looks for report
# lines in the test log and in the child logs the tests leave under /tmp
# (geeps-*), and fails if it finds one.
#
#   GEEPS_JOBS        build jobs (default 2)
#   GEEPS_TEST_JOBS   ctest -j (default 4, as scripts/test.sh: the tests
#                     mostly wait; ASan's suite took 104 s at -j4, 182 s at -j2)
#   GEEPS_TEST_EXCLUDE label regex left out of the asan stage (default: slow)
set -euo pipefail
cd "$(dirname "$0")/.."

stages="${GEEPS_SANITIZE_STAGES:-asan tsan}"
jobs="${GEEPS_JOBS:-2}"
test_jobs="${GEEPS_TEST_JOBS:-4}"
build_type="${GEEPS_SANITIZE_BUILD_TYPE:-Debug}"
cxx_flags="${GEEPS_SANITIZE_CXX_FLAGS:--O1 -g1}"
tsan_labels="${GEEPS_TSAN_LABELS:-cluster|multiproc|memory|security}"
exclude="${GEEPS_TEST_EXCLUDE-slow}"

# Stack traces for UBSan (its options are not set per test).
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
# libzmq's own teardown leaks (tests/lsan.supp says which and why); the
# processes tests start inherit it.
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}"

bash scripts/setup.sh

# What the stage's sanitizers print at the start and at the end of every
# report (set per stage: only the stage's own kinds, so that reports of
# another build's tests sharing /tmp are not taken for this one's).
asan_re='ERROR: (Address|Leak)Sanitizer|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer|runtime error: '
tsan_re='(WARNING|ERROR): ThreadSanitizer|SUMMARY: ThreadSanitizer'
report_re="$asan_re|$tsan_re"

build() {  # build <dir> <sanitizers> [target...]: no target = all
  local dir="$1" san="$2" t targets=()
  shift 2
  for t in "$@"; do targets+=(--target "$t"); done
  echo "sanitize.sh: building $dir (-DGEEPS_SANITIZE=$san, $build_type, $cxx_flags)"
  cmake -S . -B "$dir" -G Ninja \
    -DCMAKE_BUILD_TYPE="$build_type" \
    -DCMAKE_CXX_FLAGS_"${build_type^^}"="$cxx_flags" \
    -DGEEPS_SANITIZE="$san" \
    -DGEEPS_BUILD_TESTS=ON -DGEEPS_BUILD_EXAMPLES=ON -DGEEPS_BUILD_BENCHMARKS=OFF \
    -DGEEPS_BUILD_FUZZERS=OFF -DGEEPS_WITH_TORCH=OFF -DGEEPS_WITH_CUDA=OFF
  local start=$SECONDS
  cmake --build "$dir" -j "$jobs" "${targets[@]}"
  echo "sanitize.sh: built $dir in $((SECONDS - start)) s"
}

# Prints the report lines (and what follows them) of the files given; fails
# when there is one.
no_reports() {  # no_reports <what> <file>...
  local what="$1" f found=0
  shift
  for f in "$@"; do
    if [[ -f "$f" ]] && grep -aqE "$report_re" "$f"; then
      [[ $found -eq 0 ]] && echo "sanitize.sh: $what: sanitizer report(s):" >&2
      found=1
      echo "---- $f" >&2
      grep -aE -A 40 "$report_re" "$f" | head -n 200 >&2
    fi
  done
  return "$found"
}

# ctest, then a look for reports in its log (it also holds the output of
# tests that passed).
run_ctest() {  # run_ctest <dir> <ctest args>...
  local dir="$1" rc=0 start=$SECONDS
  shift
  echo "sanitize.sh: ctest --test-dir $dir $*"
  ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" --no-tests=error "$@" || rc=1
  no_reports "ctest $*" "$dir/Testing/Temporary/LastTest.log" || rc=1
  echo "sanitize.sh: ctest $* took $((SECONDS - start)) s"
  return "$rc"
}

# Child logs that tests left under /tmp since `stamp`.
child_logs() {  # child_logs <stamp>
  find /tmp -maxdepth 3 -path '/tmp/geeps-*' -type f -newer "$1" -size -64M 2>/dev/null || true
}

status=0
for stage in $stages; do
  stamp="$(mktemp)"
  case "$stage" in
    asan)
      report_re="$asan_re"
      build build-asan address,undefined
      args=()
      [[ -n "$exclude" ]] && args+=(-LE "$exclude")
      run_ctest build-asan "${args[@]}" || status=1
      ;;
    tsan)
      report_re="$tsan_re"
      # Only what this stage runs: each label's test binaries (the
      # geeps_tests_<label> targets of tests/CMakeLists.txt) and the two below.
      build build-tsan thread $(tr '|' '\n' <<<"$tsan_labels" | sed 's/^/geeps_tests_/') \
        device_test async_host_test
      run_ctest build-tsan -L "$tsan_labels" || status=1
      # The suites of device_test and async_host_test: the unit tests of the
      # device backends' streams and events.
      suites="$(for t in device_test async_host_test; do build-tsan/tests/$t --gtest_list_tests; done |
                grep -E '^[^ ].*\.$' | sed 's/\.$//' | paste -sd '|')"
      run_ctest build-tsan -R "^($suites)\\." || status=1
      ;;
    *)
      echo "sanitize.sh: unknown stage '$stage' (expected asan, tsan)" >&2
      exit 2
      ;;
  esac
  mapfile -t logs < <(child_logs "$stamp")
  no_reports "$stage: child processes" "${logs[@]}" || status=1
  rm -f "$stamp"
done
if [[ $status -ne 0 ]]; then
  echo "sanitize.sh: FAILED (see the test failures or sanitizer reports above)" >&2
else
  echo "sanitize.sh: stages '$stages' passed, no sanitizer reports"
fi
exit "$status"
