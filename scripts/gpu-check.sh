#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, in one call (< 8 minutes):
#   1. tools: cmake, ninja, g++, pkg-config libzmq (runs scripts/setup.sh when
#      one is missing, and goes on if that cannot install anything)
#   2. configure + build with the CUDA backend required (GEEPS_WITH_CUDA=ON),
#      tests, benchmarks and examples (for the CUDA layer backend), -j nproc,
#      in build-gpu/
#   3. the CUDA conformance suite alone (device_test Cuda/*): it must RUN,
#      not skip -- a skip here means the GPU was not seen
#   3b. the CUDA layer backend against the host one (layers_cuda_test): it
#      must be built and RUN, not skip
#   4. the whole test suite except 'slow' and 'examples' (the examples'
#      trainers run on the host backend; 3b covers the CUDA layers), with
#      GEEPS_DEVICE=cuda (tests on
#      Config::device = kAuto pick the GPU by themselves; GEEPS_DEVICE forces
#      it wherever an application reads the environment)
#   5. gpu_bench: gather / scatter-add vs cudaMemcpy D2D, pinned copies both
#      ways, copy/compute overlap
# Figures and logs go to $OUT when it is set, else build-gpu/gpu-check/.
# Exits non-zero when a stage fails or a test fails. It reads GPU settings
# (nvidia-smi -L / --query) and never changes any.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${GEEPS_GPU_BUILD_DIR:-build-gpu}"
out_dir="${OUT:-$build_dir/gpu-check}"
mkdir -p "$out_dir"
jobs="$(nproc 2>/dev/null || echo 4)"
script_start=$SECONDS
stage_start=$SECONDS
summary=()
failed=0

stage() {  # stage <name>: closes the previous stage's timer
  stage_start=$SECONDS
  echo "=== gpu-check: $1 ($(( SECONDS - script_start )) s elapsed)"
}
done_stage() {  # done_stage <name> <result>
  local line
  line="$(printf '%-12s %4d s  %s' "$1" $(( SECONDS - stage_start )) "$2")"
  summary+=("$line")
  echo "=== $line"
}
print_summary() {
  echo
  echo "=== gpu-check summary ($(( SECONDS - script_start )) s in all)"
  for line in "${summary[@]}"; do echo "  $line"; done
  echo "  outputs: $out_dir"
}
trap 'rc=$?; if (( rc != 0 )); then summary+=("ABORTED (exit $rc) at line $LINENO"); print_summary; fi' EXIT

# ---- 1. tools ----------------------------------------------------------------
stage tools
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    if [[ -x "$d/nvcc" ]]; then export PATH="$d:$PATH"; break; fi
  done
fi
need_setup=0
for tool in cmake ninja g++ pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || need_setup=1
done
if (( need_setup == 0 )) && ! pkg-config --exists libzmq 2>/dev/null; then
  need_setup=1
fi
if (( need_setup )); then
  echo "gpu-check: build tools or libzmq missing; trying scripts/setup.sh"
  bash scripts/setup.sh || echo "gpu-check: setup.sh failed; going on with what is here"
fi
nvidia-smi -L 2>/dev/null | tee "$out_dir/gpus.txt" || echo "gpu-check: no nvidia-smi"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv 2>/dev/null | tee -a "$out_dir/gpus.txt" || true
done_stage tools "nvcc: $(command -v nvcc || echo none); cmake: $(cmake --version 2>/dev/null | head -1)"

# ---- 2. configure + build ----------------------------------------------------
stage build
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGEEPS_WITH_CUDA=ON \
  -DGEEPS_BUILD_TESTS=ON \
  -DGEEPS_BUILD_BENCHMARKS=ON \
  -DGEEPS_BUILD_EXAMPLES=ON 2>&1 | tee "$out_dir/configure.log" | tail -5
cmake --build "$build_dir" -j "$jobs" 2>&1 | tee "$out_dir/build.log" | tail -3
done_stage build "built with -j $jobs"

# ---- 3. the CUDA conformance suite must run, not skip ------------------------
stage cuda-suite
set +e
timeout 180 "$build_dir/tests/device_test" --gtest_filter='Cuda/*:CreateDevice*' \
  --gtest_output="json:$out_dir/device_test_cuda.json" >"$out_dir/device_test_cuda.log" 2>&1
suite_rc=$?
set -e
tail -4 "$out_dir/device_test_cuda.log"
skipped="$(grep -cE '^\[  SKIPPED \] Cuda/.* ms\)$' "$out_dir/device_test_cuda.log" || true)"
if (( suite_rc != 0 )); then
  failed=1
  done_stage cuda-suite "FAILED (exit $suite_rc; see device_test_cuda.log)"
elif (( skipped > 0 )); then
  failed=1
  grep -m1 -A1 'Skipped' "$out_dir/device_test_cuda.log" || true
  done_stage cuda-suite "FAILED: $skipped CUDA tests skipped (GPU not seen)"
else
  done_stage cuda-suite "passed"
fi

# ---- 3b. the CUDA layer backend must run, not skip ---------------------------
stage layers-cuda
layers_bin="$build_dir/tests/layers_cuda_test"
# Whether convolution, pooling and ReLU ran through cuDNN (found at configure
# time) or through the backend's own kernels.
layers_cudnn="$(grep -oE 'CUDA layer backend with cuDNN: [A-Z]+' "$out_dir/configure.log" 2>/dev/null | tail -1 | sed 's/.*: //' || true)"
layers_cudnn="${layers_cudnn:-unknown}"
if [[ ! -x "$layers_bin" ]]; then
  failed=1
  done_stage layers-cuda "FAILED: $layers_bin not built (OpenBLAS missing? see configure.log)"
else
  set +e
  GEEPS_DEVICE=cuda timeout 120 "$layers_bin" \
    --gtest_output="json:$out_dir/layers_cuda_test.json" >"$out_dir/layers_cuda_test.log" 2>&1
  layers_rc=$?
  set -e
  tail -4 "$out_dir/layers_cuda_test.log"
  layers_skipped="$(grep -cE '^\[  SKIPPED \] LayersCudaTest\..* ms\)$' "$out_dir/layers_cuda_test.log" || true)"
  layers_ok="$(grep -cE '^\[       OK \] LayersCudaTest\.' "$out_dir/layers_cuda_test.log" || true)"
  if (( layers_rc != 0 )); then
    failed=1
    done_stage layers-cuda "FAILED (exit $layers_rc; see layers_cuda_test.log)"
  elif (( layers_skipped > 0 || layers_ok == 0 )); then
    failed=1
    grep -m1 -A1 'Skipped' "$out_dir/layers_cuda_test.log" || true
    done_stage layers-cuda "FAILED: $layers_skipped tests skipped, $layers_ok passed (GPU not seen)"
  else
    done_stage layers-cuda "passed ($layers_ok tests; cuDNN: $layers_cudnn)"
  fi
fi

# ---- 4. the whole suite, CUDA forced -----------------------------------------
stage ctest
set +e
GEEPS_DEVICE=cuda timeout 300 ctest --test-dir "$build_dir" -LE 'slow|examples' \
  -j "$(( jobs < 8 ? jobs : 8 ))" --output-on-failure --no-tests=error \
  --output-junit "$(realpath "$out_dir")/ctest-junit.xml" \
  >"$out_dir/ctest.log" 2>&1
ctest_rc=$?
set -e
grep -E 'tests passed|tests failed|Total Test time' "$out_dir/ctest.log" || true
grep -A40 'The following tests' "$out_dir/ctest.log" | head -40 || true
if (( ctest_rc != 0 )); then
  failed=1
  done_stage ctest "FAILED (exit $ctest_rc): $(grep -E 'tests passed' "$out_dir/ctest.log" || echo 'see ctest.log')"
else
  done_stage ctest "$(grep -E 'tests passed' "$out_dir/ctest.log")"
fi

# ---- 5. GPU microbenchmarks --------------------------------------------------
stage bench
set +e
timeout 150 "$build_dir/benchmarks/gpu_bench" --out "$out_dir/gpu_bench.json" \
  2>&1 | tee "$out_dir/gpu_bench.log"
bench_rc=${PIPESTATUS[0]}
set -e
if (( bench_rc != 0 )); then
  failed=1
  done_stage bench "FAILED (exit $bench_rc)"
else
  done_stage bench "$(grep -E '^pinned' "$out_dir/gpu_bench.log"); $(grep -E '^overlap' "$out_dir/gpu_bench.log" | sed 's/.*(overlap/overlap/; s/)//')"
fi

trap - EXIT
print_summary
if (( failed )); then
  echo "gpu-check: FAILED"
  exit 1
fi
echo "gpu-check: all passed"
