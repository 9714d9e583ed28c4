#!/usr/bin/env bash
# geeps_cuda_probe (src/tools/cuda_probe.cc), which the GPU check's env stage
# runs to say why no CUDA device is seen, against a fake driver
# (fake_cuda_driver.cc, built as libcuda.so.1 in its own folder):
#   cuda_probe_test.sh <geeps_cuda_probe> <folder of the fake libcuda.so.1>
# The driver is found only through LD_LIBRARY_PATH, also when it comes after
# other folders (the check appends the caller's path to the bundle's); every
# failure names its cause.
set -uo pipefail
probe="$1" fake_dir="$2"
failures=0
probe_output() {  # probe_output <env...>: the probe's output, run with env
  env -u LD_LIBRARY_PATH "$@" "$probe" 2>&1
}
expect() {  # expect <exit> <text> <env...>: runs the probe with env
  local want_rc="$1" want_text="$2" out rc
  shift 2
  out="$(probe_output "$@")"
  rc=$?
  if [[ "$rc" != "$want_rc" || "$out" != *"$want_text"* ]]; then
    echo "FAILED: $* -> exit $rc (want $want_rc), output:"
    echo "$out"
    echo "  (want it to contain: $want_text)"
    failures=$((failures + 1))
  else
    echo "ok: $* -> exit $rc: $(tail -1 <<<"$out")"
  fi
}
# Not found: the message names the path searched.
expect 3 "searched LD_LIBRARY_PATH='/nonexistent/lib64'" LD_LIBRARY_PATH=/nonexistent/lib64
# Found through the caller's path, after a folder without it.
expect 5 "cuInit failed: error 100 (CUDA_ERROR_NO_DEVICE) (driver $fake_dir/libcuda.so.1)" \
  LD_LIBRARY_PATH="/nonexistent/lib64:$fake_dir"
expect 5 "error 999" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_INIT=999
expect 6 "no CUDA device is seen" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_INIT=0 FAKE_CUDA_DEVICES=0
expect 0 "cuInit succeeded, 2 CUDA device(s)" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_INIT=0 FAKE_CUDA_DEVICES=2
# What starting the driver cost: the fake's context takes 8 MiB.
expect 0 "device 0's primary context took" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_INIT=0 FAKE_CUDA_DEVICES=1
# At least those 8 MiB, and not twice that: the sanitizers' runtimes add a
# little of their own (ASan's run showed +9.0 MiB).
out="$(probe_output LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_INIT=0 FAKE_CUDA_DEVICES=1)"
mib="$(sed -nE "s/.*primary context took [0-9]+ ms, .*\+([0-9]+)\.[0-9] MiB resident.*/\1/p" <<<"$out")"
if [[ -z "$mib" ]] || ((mib < 8 || mib >= 16)); then
  echo "FAILED: the context's resident memory is not reported as 8 to 16 MiB (read '${mib}'), output:"
  echo "$out"
  failures=$((failures + 1))
else
  echo "ok: the fake's context reported as +$mib MiB resident"
fi
expect 0 "driver API version 13.0" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_INIT=0 FAKE_CUDA_DEVICES=1
if "$probe" extra-argument >/dev/null 2>&1; [[ $? != 2 ]]; then
  echo "FAILED: an argument is not refused as bad usage (exit 2)"
  failures=$((failures + 1))
fi
if ((failures)); then
  echo "cuda_probe_test: $failures failed"
  exit 1
fi
echo "cuda_probe_test: all passed"
