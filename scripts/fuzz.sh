#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang++-14 (ASan + UBSan) in
# build-fuzz, replays tests/fuzz/regressions/<target>/, then fuzzes each
# target for GEEPS_FUZZ_SECONDS on a fresh copy of its seed corpus
# (tests/fuzz/corpus/<target>/). Exits non-zero when any target crashes,
# fails one of its checks, leaks, runs out of memory or hangs; the input is
# kept in build-fuzz/fuzz-out/<target>/artifacts/ (see docs/reliability.md for
# turning it into a regression input).
#
#   GEEPS_FUZZ_SECONDS   fuzzing time per target (default 60)
#   GEEPS_FUZZ_TARGETS   targets to run (default: fuzz_wire fuzz_config fuzz_process_env
#                        fuzz_checkpoint fuzz_control)
#   GEEPS_FUZZ_PARALLEL  targets fuzzed at once (default 2, one per core)
#   GEEPS_FUZZ_KEEP      1: go on from the corpus a previous run grew in
#                        build-fuzz/fuzz-out/<target>/corpus instead of a fresh copy
#   GEEPS_FUZZ_CXX       the compiler (default clang++-14)
#   GEEPS_JOBS           build jobs (default 2)
# Extra arguments go to every libFuzzer run (e.g. -seed=1 -max_len=1024).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${GEEPS_FUZZ_SECONDS:-60}"
targets="${GEEPS_FUZZ_TARGETS:-fuzz_wire fuzz_config fuzz_process_env fuzz_checkpoint fuzz_control}"
parallel="${GEEPS_FUZZ_PARALLEL:-2}"
keep="${GEEPS_FUZZ_KEEP:-0}"
cxx="${GEEPS_FUZZ_CXX:-clang++-14}"
jobs="${GEEPS_JOBS:-2}"
build_dir=build-fuzz
out="$build_dir/fuzz-out"

bash scripts/setup.sh
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx not found (scripts/setup.sh installs clang-14 and libclang-rt-14-dev)" >&2
  exit 1
fi

# Only the fuzz targets: the library, tests and examples are not built here.
start=$SECONDS
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGEEPS_BUILD_FUZZERS=ON -DGEEPS_SANITIZE= \
  -DGEEPS_BUILD_TESTS=OFF -DGEEPS_BUILD_EXAMPLES=OFF -DGEEPS_BUILD_BENCHMARKS=OFF
# shellcheck disable=SC2086
cmake --build "$build_dir" -j "$jobs" --target $targets
echo "fuzz.sh: built in $((SECONDS - start)) s"

# Leaks are reported by libFuzzer itself (-detect_leaks=1, the default).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

# Fuzzes one target; its log and exit status go to $out/<target>/.
run_one() {  # run_one <target> <libFuzzer args>...
  local t="$1" bin="$build_dir/tests/fuzz/$1" dir="$out/$1" rc=0
  shift
  mkdir -p "$dir/artifacts"
  rm -f "$dir/artifacts/"*
  if [[ "$keep" != 1 || ! -d "$dir/corpus" ]]; then
    rm -rf "$dir/corpus"
    mkdir -p "$dir/corpus"
    cp tests/fuzz/corpus/"$t"/* "$dir/corpus/"
  fi
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048
              -print_final_stats=1 -artifact_prefix="$dir/artifacts/")
  [[ -f "tests/fuzz/$t.dict" ]] && args+=(-dict="tests/fuzz/$t.dict")
  {
    # The inputs that once crashed this target: each must pass now.
    if compgen -G "tests/fuzz/regressions/$t/*" >/dev/null; then
      echo "== replaying tests/fuzz/regressions/$t"
      "$bin" "${args[@]}" tests/fuzz/regressions/"$t"/* || rc=$?
    fi
    if [[ $rc -eq 0 ]]; then
      echo "== fuzzing $t for ${seconds}s"
      "$bin" "${args[@]}" "$@" "$dir/corpus" || rc=$?
    fi
  } >"$dir/log" 2>&1
  echo "$rc" >"$dir/status"
}

rm -rf "$out"/*/status
running=0
for t in $targets; do
  if [[ $running -ge $parallel ]]; then
    wait -n || true
    running=$((running - 1))
  fi
  echo "fuzz.sh: $t (${seconds}s, log in $out/$t/log)"
  run_one "$t" "$@" &
  running=$((running + 1))
done
wait

failed=0
for t in $targets; do
  rc="$(cat "$out/$t/status" 2>/dev/null || echo missing)"
  # The final stats of the fuzzing run (the replay before it prints its own).
  stats="$(grep -E '^stat::(number_of_executed_units|new_units_added)' "$out/$t/log" | tail -n 2 |
           sed -E 's/^stat::([a-z_]+): +/\1=/' | paste -sd ' ' || true)"
  if [[ "$rc" == 0 ]]; then
    echo "fuzz.sh: $t: ok ($stats)"
  else
    failed=1
    echo "fuzz.sh: $t: FAILED (exit $rc); the end of its log:" >&2
    tail -n 60 "$out/$t/log" >&2
    for a in "$out/$t/artifacts/"*; do
      [[ -e "$a" ]] || continue
      echo "fuzz.sh: $t: input kept in $a; reproduce: $build_dir/tests/fuzz/$t $a" >&2
    done
  fi
done
exit "$failed"
