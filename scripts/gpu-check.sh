#!/usr/bin/env bash
# The GPU check: runs the GPU bundle (scripts/gpu-bundle.sh) on a machine
# with an NVIDIA GPU, with no build and no install there (the GPU machine has
# no package registry, no libzmq, GoogleTest, Boost, OpenBLAS or data set).
# The machine lent is an H100 80 GB by default (sm_90, 16 cores), an H200
# sometimes (sm_90 too): the same bundle and the same limits serve both.
# docs/cuda.md, "The GPU check", lists the stages, their gates and limits,
# what a failure of each means and how to read a cut run.
#
# Gates: a stage gated on `correctness` fails for a wrong result, a crash, a
# hang (its limit reached) or a sanitizer report; a `figure` stage measures
# and reports (gather/scatter against a copy, copy/compute overlap) and fails
# only when it crashes or hangs. Throughputs and times are never a reason to
# fail, also inside correctness stages (big_net's relative throughput,
# Fashion-MNIST's training time).
#
# Stages, in this order, each with its limit (seconds; they add up to at most
# the budget, 540 s by default, so that one 600 s call holds the whole check).
# A stage ends by the sum of its own and the earlier stages' limits, counted
# from the check's start: the time an earlier stage left unused passes on to
# the later ones (the suite uses it; the others keep their own limits), and
# the whole check still ends by the sum of the limits:
#   env          correctness  nvidia-smi (read only, under a limit; found on
#                              the PATH or in /usr/local/nvidia/bin; its
#                              absence is no failure where the driver's
#                              probe sees the device), the bundle unpacked,
#                              cuBLAS and cuDNN found, libstdc++ picked,
#                              every bundled library resolved, and the driver
#                              loaded and cuInit called (geeps_cuda_probe)
#   cuda-suite   correctness  device_test's CUDA conformance suite
#   layers-cuda  correctness  layers_cuda_test: the CUDA layer backend
#                              against the host one, cuDNN and own kernels
#   fmnist       correctness  one epoch of fmnist_train --device cuda, without
#                              a memory budget and with one that swaps:
#                              accuracy >= 0.75 (time reported)
#   big-net      correctness  big_net at 4x oversubscription: weights bitwise
#                              identical to the run without a budget
#                              (relative throughput reported)
#   sanitize     correctness  compute-sanitizer memcheck, racecheck and
#                              synccheck over the CUDA conformance suite
#                              ("unavailable" where it refuses the GPU is
#                              reported, not failed)
#   suite        correctness  every CTest test but labels slow and examples
#                              and the foreign-traffic sprays (by name),
#                              each its own process, $GEEPS_GPU_CHECK_JOBS (6)
#                              at a time; devices as each test picks them
#                              (kAuto: the GPU when there is one); which tests
#                              touched the GPU is read from GEEPS_DEVICE_TRACE;
#                              one at a time where the GPU's compute mode is
#                              Exclusive_Process (the sanitizers too); a test
#                              cut at the stage's limit is ended with its
#                              process group, not left running
#   bench        figure       gpu_bench: gather/scatter-add against a copy,
#                              copy/compute overlap
#
# The binaries run with LD_LIBRARY_PATH = the bundle's folders, cuBLAS and
# cuDNN, then the caller's LD_LIBRARY_PATH (where the driver may be).
#
# Output: $OUT (else gpu-check-out/ beside the bundle) gets gpu-check.json
# (rewritten before and after every stage: a cut run keeps what ran),
# gpu-check.log (this console), gpu_bench.json and gpu-check-logs.tar.gz
# (every stage's logs, also rewritten after every stage; a passed test's log
# is cut to its last 40 lines, and the archive is kept under 12 MiB, since
# files over 16 MiB do not come back from the GPU machine). Exit status 0
# when every stage passed (or was unavailable), 1 otherwise, 2 bad usage.
# Where a stage failed or was cut, the last line is the command that reruns
# only those stages.
#
# --dry-run (what CI runs, without a GPU, in a clean environment): the same
# stages with the same limits and parallelism; the host side runs for real
# (the suite, layers_test, the fmnist training and big_net on the host
# backend) and the CUDA parts must fail for want of a GPU ("no-gpu"), for no
# other reason; the suite runs in the host backend's CUDA-like mode
# (GEEPS_HOST_AS_CUDA=1: kAuto is a host device that behaves like CUDA), and
# must have tests that made such a device.
#
#   bash gpu-check.sh [--dry-run] [--bundle DIR] [--budget SECONDS]
#                     [--stages env,cuda-suite,...] [--keep]
# In the bundle it finds its bundle beside itself; as scripts/gpu-check.sh,
# in gpu-bundle/ at the repository root.
set -uo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
caller_ldp="${LD_LIBRARY_PATH:-}"
bundle=""
dry=0
keep=0
budget="${GEEPS_GPU_CHECK_SECONDS:-540}"
jobs="${GEEPS_GPU_CHECK_JOBS:-6}"
only=""
fmnist_min="${GEEPS_GPU_CHECK_FMNIST_MIN:-0.75}"
indexed_goal="${GEEPS_GPU_CHECK_INDEXED_GOAL:-0.5}"
overlap_goal="${GEEPS_GPU_CHECK_OVERLAP_GOAL:-0.8}"
big_net_goal="${GEEPS_GPU_CHECK_BIG_NET_GOAL:-0.9}"
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --bundle) bundle="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --stages) only=",$2,"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done

# ---- the stage table: name, gate, limit (s), function -------------------------------
stage_table=(
  "env correctness 40 stage_env"
  "cuda-suite correctness 40 stage_cuda_suite"
  "layers-cuda correctness 50 stage_layers_cuda"
  "fmnist correctness 50 stage_fmnist"
  "big-net correctness 45 stage_big_net"
  "sanitize correctness 100 stage_sanitize"
  "suite correctness 180 stage_suite"
  "bench figure 25 stage_bench"
)
limit_sum=0
for row in "${stage_table[@]}"; do
  read -r _ _ l _ <<<"$row"
  limit_sum=$((limit_sum + l))
done
if ! [[ "$budget" =~ ^[0-9]+$ ]] || ((budget < limit_sum)); then
  echo "gpu-check: --budget $budget is below the stages' limits ($limit_sum s in all)" >&2
  exit 2
fi
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu-check: GEEPS_GPU_CHECK_JOBS='$jobs': expected a positive count" >&2
  exit 2
fi

if [[ -z "$bundle" ]]; then
  if [[ -f "$script_dir/tests.tsv" ]]; then bundle="$script_dir"; else bundle="$script_dir/../gpu-bundle"; fi
fi
if [[ ! -f "$bundle/tests.tsv" || ! -d "$bundle/bin" ]]; then
  echo "gpu-check: no bundle in $bundle: make it with bash scripts/gpu-bundle.sh (on a machine with the build tools)" >&2
  exit 2
fi
bundle="$(cd "$bundle" && pwd -P)"
out="${OUT:-$(dirname "$bundle")/gpu-check-out}"
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd -P)"
work="$(mktemp -d "${TMPDIR:-/tmp}/geeps-gpu-check.XXXXXX")" || exit 2
logs="$work/logs"
bin="$work/bin"  # the bundle's binaries, unpacked by the env stage
mkdir -p "$logs" "$work/lib" "$bin" "$work/tests"

cleanup() {
  if ((keep)); then echo "gpu-check: scratch kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---- bookkeeping: gpu-check.json ------------------------------------------------------
start=$SECONDS
names=() gates=() limits=() ends=() fns=() statuses=() secs=() notes=() figs=()
for row in "${stage_table[@]}"; do
  read -r n g l f <<<"$row"
  names+=("$n") gates+=("$g") limits+=("$l") fns+=("$f")
  ends+=($((${#ends[@]} > 0 ? ends[-1] + l : l)))  # this and the earlier stages' limits
  statuses+=(pending) secs+=(0) notes+=("") figs+=("{}")
done
machine_json="{}"
libpath=""
json_str() {  # a JSON string of $1
  local s="$1"
  s="${s//\\/\\\\}"; s="${s//\"/\\\"}"; s="${s//$'\n'/\\n}"; s="${s//$'\t'/ }"; s="${s//$'\r'/}"
  printf '"%s"' "$s"
}
num_or_null() { [[ "$1" =~ ^-?[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$ ]] && printf '%s' "$1" || printf 'null'; }
# What a stage's status means for the whole run.
stage_ok() {  # stage_ok <status> <gate>
  case "$1" in
    passed|unavailable|skipped) return 0 ;;
    no-gpu) ((dry)) ;;
    *) return 1 ;;
  esac
}
overall() {  # "true" when every stage that ran (or is running) is ok so far
  local i
  for i in "${!names[@]}"; do
    [[ "${statuses[$i]}" == pending ]] && continue
    stage_ok "${statuses[$i]}" "${gates[$i]}" || { echo false; return; }
  done
  echo true
}
write_json() {
  local i sep=""
  {
    printf '{\n  "mode": "%s",\n  "passed": %s,\n  "finished": %s,\n  "seconds": %d,\n' \
      "$( ((dry)) && echo dry-run || echo gpu)" "$(overall)" "${finished:-false}" $((SECONDS - start))
    printf '  "budget": %d,\n  "limits_total": %d,\n  "jobs": %d,\n' "$budget" "$limit_sum" "$jobs"
    printf '  "library_path": %s,\n  "caller_library_path": %s,\n' "$(json_str "$libpath")" "$(json_str "$caller_ldp")"
    printf '  "goals": {"fmnist_accuracy_min": %s, "indexed_vs_copy": %s, "overlap": %s, "big_net_relative_throughput": %s},\n' \
      "$fmnist_min" "$indexed_goal" "$overlap_goal" "$big_net_goal"
    printf '  "bundle": %s,\n' "$(cat "$bundle/bundle.json" 2>/dev/null || echo '{}')"
    printf '  "machine": %s,\n  "stages": [\n' "$machine_json"
    for i in "${!names[@]}"; do
      printf '%s    {"name": "%s", "gate": "%s", "limit_s": %d, "status": "%s", "seconds": %d, "note": %s, "figures": %s}' \
        "$sep" "${names[$i]}" "${gates[$i]}" "${limits[$i]}" "${statuses[$i]}" "${secs[$i]}" \
        "$(json_str "${notes[$i]}")" "${figs[$i]}"
      sep=$',\n'
    done
    printf '\n  ]\n}\n'
  } >"$out/gpu-check.json.tmp" && mv -f "$out/gpu-check.json.tmp" "$out/gpu-check.json"
}
logs_cap=$((12 << 20))  # files over 16 MiB do not come back from the GPU machine
# The logs archive; over logs_cap, the biggest logs are cut to their last
# 2000 lines (then 200) until it fits.
save_logs() {
  local tmp="$out/gpu-check-logs.tar.gz.tmp" keep f
  for keep in all 2000 200; do
    if [[ "$keep" != all ]]; then
      find "$logs" -type f -size +128k -print 2>/dev/null | while read -r f; do
        tail -n "$keep" "$f" >"$f.cut" && mv -f "$f.cut" "$f"
        echo "[gpu-check: cut to its last $keep lines to keep the archive under $((logs_cap >> 20)) MiB]" >>"$f"
      done
    fi
    tar -czf "$tmp" -C "$logs" . 2>/dev/null || return 0
    (($(stat -c %s "$tmp") < logs_cap)) && break
  done
  mv -f "$tmp" "$out/gpu-check-logs.tar.gz"
}

# Each stage function sets st (passed | failed | no-gpu | unavailable | cut),
# note and fig (a JSON object), within its limit: `box` gives the seconds
# left of it. stage_deadline is the check's start plus the limits of the
# stages up to this one (the head's "Stages").
stage_deadline=0
box() {  # box <seconds>: that, or what is left of the stage's limit (at least 1)
  local left=$((stage_deadline - SECONDS - 5))  # timeout -k 5: ends by the limit
  ((left < 1)) && left=1
  echo $(($1 < left ? $1 : left))
}
run_stage() {  # run_stage <index>
  local i="$1" t0=$SECONDS
  if [[ -n "$only" && "$only" != *",${names[$i]},"* && "${names[$i]}" != env ]]; then
    statuses[$i]=skipped notes[$i]="not asked for (--stages)"
    write_json
    return
  fi
  echo
  echo "=== gpu-check: ${names[$i]} (${gates[$i]}, limit ${limits[$i]} s; $((SECONDS - start)) s elapsed)"
  statuses[$i]=running
  write_json
  local own_deadline=$((SECONDS + limits[$i]))
  stage_deadline=$((start + ends[$i]))
  st=failed note="" fig="{}"
  "${fns[$i]}"
  note="${note%; }"
  if ((SECONDS > stage_deadline + 5)); then note+="; overran its limit by $((SECONDS - stage_deadline)) s"
  elif ((SECONDS > own_deadline)); then note+="; ran $((SECONDS - own_deadline)) s past its own limit, on time the earlier stages left unused"
  fi
  statuses[$i]="$st" secs[$i]=$((SECONDS - t0)) notes[$i]="$note" figs[$i]="$fig"
  printf '=== %-12s %-11s %4d s  %s\n' "${names[$i]}" "$st" $((SECONDS - t0)) "$note"
  write_json
  save_logs
}
# Our binaries run with the library path the env stage made; nothing else
# does (the bundle's libz, libstdc++, ... stay out of the system's tools).
run_box() {  # run_box <seconds> <command>...
  local b
  b="$(box "$1")"
  shift
  timeout -k 5 "$b" env "LD_LIBRARY_PATH=$libpath" "$@"
}
count() { grep -cE "$1" "$2" 2>/dev/null || true; }
timed_out() { [[ "$1" == 124 || "$1" == 137 ]]; }
no_gpu_re='no CUDA device|cudaErrorNoDevice|cudaErrorInsufficientDriver|no CUDA-capable device|CUDA driver .*not found'
# In --dry-run a CUDA part must fail because no GPU is seen.
expect_no_gpu() {  # expect_no_gpu <log> <what the GPU run would have shown>
  if [[ "$st" == passed ]]; then
    st=failed note="dry run: $2 passed without a GPU?"
  elif grep -qE "$no_gpu_re|\[  SKIPPED \]" "$1"; then
    st=no-gpu note="dry run: fails for want of a GPU, as it must ($note)"
  else
    st=failed note="dry run: failed, but not for want of a GPU (a library missing from the bundle?): $note; see $(basename "$1")"
  fi
}

# ---- env --------------------------------------------------------------------------------
ldconfig_bin="$(command -v ldconfig || { [[ -x /sbin/ldconfig ]] && echo /sbin/ldconfig; } || { [[ -x /usr/sbin/ldconfig ]] && echo /usr/sbin/ldconfig; } || true)"
site_dirs() {
  local py
  for py in python3 /opt/torch/.venv/bin/python3; do
    if command -v "$py" >/dev/null 2>&1; then
      "$py" -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null
    fi
  done
  ls -d /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
    /usr/lib/python3/dist-packages 2>/dev/null
}
candidates() {  # candidates <file>...: folders holding all of them
  local d f ok
  {
    [[ -n "${CUDA_HOME:-}" ]] && echo "$CUDA_HOME/lib64"
    ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib \
      /usr/local/cuda*/targets/x86_64-linux/lib 2>/dev/null
    [[ -n "$ldconfig_bin" ]] && "$ldconfig_bin" -p 2>/dev/null | awk -v f="$1" '$1 == f { print $NF }' | xargs -r -n1 dirname
    for d in $(site_dirs | sort -u); do
      [[ -d "$d/nvidia" ]] && find "$d/nvidia" -maxdepth 3 -name "$1" -printf '%h\n' 2>/dev/null
    done
  } | while read -r d; do
    ok=1
    for f in "$@"; do [[ -e "$d/$f" ]] || ok=0; done
    ((ok)) && readlink -f "$d"
  done | awk '!seen[$0]++'
}
probe_version() {  # probe_version cublas|cudnn <dir> [extra library dirs]: x.y.z, or ""
  local py
  py="$(command -v python3 || echo /opt/torch/.venv/bin/python3)"
  [[ -x "$py" ]] || return 0
  LD_LIBRARY_PATH="$2${3:+:$3}" timeout 30 "$py" - "$1" "$2" 2>/dev/null <<'EOF' || true
import ctypes, sys
kind, d = sys.argv[1], sys.argv[2]
if kind == "cublas":
    lib = ctypes.CDLL(d + "/libcublas.so.13")
    v = [ctypes.c_int(0) for _ in range(3)]
    for i in range(3):
        lib.cublasGetProperty(i, ctypes.byref(v[i]))
    print("%d.%d.%d" % tuple(x.value for x in v))
else:
    lib = ctypes.CDLL(d + "/libcudnn.so.9")
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    n = lib.cudnnGetVersion()
    print("%d.%d.%d" % (n // 10000, n % 10000 // 100, n % 100))
EOF
}
pick() {  # pick cublas|cudnn <override dir> <files>...: "dir version" of the newest
  local kind="$1" override="$2" d v best="" best_v=""
  shift 2
  local list
  if [[ -n "$override" ]]; then list="$override"; else list="$(candidates "$@")"; fi
  for d in $list; do
    [[ "$d" == "$bundle"/* ]] && continue
    v="$(probe_version "$kind" "$d" "${cublas_dir:-}")"
    echo "gpu-check:   $kind candidate $d: ${v:-version unknown}" >&2
    if [[ -z "$best" ]] || { [[ -n "$v" ]] && [[ -z "$best_v" || "$(printf '%s\n%s\n' "$best_v" "$v" | sort -V | tail -1)" == "$v" ]]; }; then
      best="$d" best_v="$v"
    fi
  done
  echo "$best ${best_v:-unknown}"
}
json_get() {  # json_get <key> <file>: a string or number value of bundle.json
  sed -n "s/^ *\"$1\": *\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$2" | head -1
}
unxz_to() {  # unxz_to <file.xz> <destination>
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$1" >"$2"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi
}
# The bundle's binaries and big libraries into the scratch folder: binaries
# to bin/ (RUNPATH $ORIGIN/../lib finds the unpacked libraries in lib/).
unpack_bundle() {
  local z f
  for z in "$bundle"/lib/*.xz; do
    [[ -e "$z" ]] || continue
    unxz_to "$z" "$work/lib/$(basename "$z" .xz)" || problems+=("cannot unpack $(basename "$z")")
  done
  for f in "$bundle"/bin/*; do
    case "$f" in
      *.xz) unxz_to "$f" "$bin/$(basename "$f" .xz)" || problems+=("cannot unpack $(basename "$f")") ;;
      *) cp "$f" "$bin/" || problems+=("cannot copy $(basename "$f")") ;;
    esac
  done
  chmod +x "$bin"/* 2>/dev/null
}
# libstdc++ and libgcc_s: the system's unless it lacks a version the bundle
# needs (then the bundle's, which needs a newer glibc). Sets gcc_choice.
pick_gcc_libs() {
  local glibc="$1" need_gcc v sys_cxx="" sys_gcc_s missing_v=""
  need_gcc="$(json_get glibc_needed_with_gcc_libs "$bundle/bundle.json")"
  gcc_choice=system
  if [[ -n "$ldconfig_bin" ]]; then
    sys_cxx="$("$ldconfig_bin" -p 2>/dev/null | awk '$1 == "libstdc++.so.6" && /x86-64/ { print $NF; exit }')"
  fi
  [[ -z "$sys_cxx" && -e /usr/lib/x86_64-linux-gnu/libstdc++.so.6 ]] && sys_cxx=/usr/lib/x86_64-linux-gnu/libstdc++.so.6
  sys_gcc_s="$(dirname "${sys_cxx:-/usr/lib/x86_64-linux-gnu/x}")/libgcc_s.so.1"
  [[ -e "$sys_gcc_s" ]] || sys_gcc_s=/lib/x86_64-linux-gnu/libgcc_s.so.1
  if [[ -z "$sys_cxx" ]]; then
    missing_v="no system libstdc++"
  else
    for v in $(cat "$bundle/gcc.needs" 2>/dev/null); do
      if ! grep -qaF "$v" "$sys_cxx" "$sys_gcc_s" 2>/dev/null; then missing_v+="${missing_v:+ }$v"; fi
    done
  fi
  if ((dry)) || [[ -n "$missing_v" ]]; then
    gcc_choice=bundled
    if [[ -n "$need_gcc" && -n "$glibc" && "$(printf '%s\n%s\n' "$need_gcc" "$glibc" | sort -V | head -1)" != "$need_gcc" ]]; then
      problems+=("the system libstdc++ lacks $missing_v and the bundle's needs glibc $need_gcc (have $glibc)")
    fi
  fi
  echo "gpu-check: libstdc++/libgcc_s: $gcc_choice${missing_v:+ (system lacks: $missing_v)}${sys_cxx:+; system: $sys_cxx}"
}
# cuBLAS, cuDNN, nvrtc and nvJitLink, then the caller's path: sets libpath.
find_cuda_libraries() {
  local r d extra=""
  r="$(pick cublas "${GEEPS_CUBLAS_DIR:-}" libcublas.so.13 libcublasLt.so.13)"
  cublas_dir="${r% *}" cublas_v="${r##* }"
  r="$(pick cudnn "${GEEPS_CUDNN_DIR:-}" libcudnn.so.9 libcudnn_graph.so.9 libcudnn_ops.so.9 libcudnn_cnn.so.9)"
  cudnn_dir="${r% *}" cudnn_v="${r##* }"
  cudnn_note=""
  if [[ -z "$cublas_dir" ]]; then
    problems+=("cuBLAS (libcublas.so.13) not found: the layer backend's binaries cannot start")
    cublas_v=none
  fi
  if [[ -z "$cudnn_dir" ]]; then
    cudnn_v=none
    if [[ -d "$bundle/lib/cudnn-stub" ]]; then
      cudnn_dir="$bundle/lib/cudnn-stub"
      cudnn_note="no cuDNN on this machine: the bundle's stand-in (the backend uses its own kernels)"
    fi
  fi
  for d in $(candidates libnvrtc.so.13 | head -1) $(candidates libnvJitLink.so.13 | head -1); do
    [[ "$d" == "$cublas_dir" || "$d" == "$cudnn_dir" || ":$extra:" == *":$d:"* ]] || extra+="${extra:+:}$d"
  done
  libpath="$work/lib:$bundle/lib"
  [[ "$gcc_choice" == bundled ]] && libpath+=":$bundle/lib/gcc"
  for d in "$cublas_dir" "$cudnn_dir" ${extra//:/ }; do
    [[ -z "$d" || ":$libpath:" == *":$d:"* ]] || libpath+=":$d"
  done
  # The caller's path last: the driver (libcuda.so.1) may be found only
  # there (a container's /usr/local/nvidia/lib64, say).
  [[ -n "$caller_ldp" ]] && libpath+=":$caller_ldp"
  echo "gpu-check: cuBLAS $cublas_v in ${cublas_dir:-nowhere} (built with $(json_get cublas_built "$bundle/bundle.json"))"
  echo "gpu-check: cuDNN $cudnn_v in ${cudnn_dir:-nowhere} (built with $(json_get cudnn_built "$bundle/bundle.json"))${cudnn_note:+: $cudnn_note}"
}
# The driver, as the CUDA runtime loads it: geeps_cuda_probe with the
# binaries' library path. Where it is not found there, the usual driver
# folders are searched and the one holding it is appended. Sets probe_rc,
# probe_line.
probe_driver() {
  local log="$logs/cuda-probe.log" d
  run_box 30 "$bin/geeps_cuda_probe" >"$log" 2>&1
  probe_rc=$?
  if ((probe_rc == 3)); then
    for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 \
             /usr/local/cuda/compat /usr/local/cuda/lib64; do
      if [[ -e "$d/libcuda.so.1" ]]; then
        echo "gpu-check: libcuda.so.1 not on the library path; found in $d: appended" | tee -a "$log"
        libpath+=":$d"
        run_box 30 "$bin/geeps_cuda_probe" >>"$log" 2>&1
        probe_rc=$?
        break
      fi
    done
  fi
  cat "$log"
  probe_line="$(grep 'cuda-probe:' "$log" | tail -1 | sed 's/^cuda-probe: //')"
  [[ -n "$probe_line" ]] || probe_line="geeps_cuda_probe exit $probe_rc, no output (cuda-probe.log)"
}
# Every library of every bundled file resolves inside the bundle, or to
# glibc, the driver or the CUDA libraries found above.
check_libraries() {
  local f lib_bad=() soname arrow path gcc_files=()
  [[ "$gcc_choice" == bundled ]] && gcc_files=("$bundle"/lib/gcc/*.so*)
  for f in "$bin"/* "$bundle"/lib/*.so* "$work"/lib/*.so* "${gcc_files[@]}"; do
    [[ -f "$f" ]] || continue
    while read -r soname arrow path _; do
      [[ "$arrow" == "=>" ]] || continue
      case "$path" in
        not) lib_bad+=("$(basename "$f"): $soname not found") ;;
        "$bundle"/*|"$work"/*) ;;
        *)
          case "$soname" in
            libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*|\
            libcuda.so.*|libcublas.so.*|libcublasLt.so.*|libcudnn*.so.*|libnvrtc*|libnvJitLink*) ;;
            libstdc++.so.*|libgcc_s.so.*) [[ "$gcc_choice" == system ]] || lib_bad+=("$(basename "$f"): $soname from $path, not the bundle's") ;;
            *) lib_bad+=("$(basename "$f"): $soname from $path, outside the bundle") ;;
          esac ;;
      esac
    done < <(LD_LIBRARY_PATH="$libpath" ldd "$f" 2>&1)
  done
  printf '%s\n' "${lib_bad[@]}" >"$logs/libraries.txt"
  lib_problems=${#lib_bad[@]}
  if ((lib_problems > 0)); then
    problems+=("$lib_problems unresolved or foreign libraries, e.g. ${lib_bad[0]} (libraries.txt)")
  fi
  echo "gpu-check: library check: $lib_problems problems"
}
exclusive=0  # the GPU's compute mode is Exclusive_Process: one CUDA process at a time
find_nvidia_smi() {
  local d
  command -v nvidia-smi 2>/dev/null && return
  for d in /usr/local/nvidia/bin /usr/bin /usr/local/bin /opt/nvidia/bin; do
    [[ -x "$d/nvidia-smi" ]] && { echo "$d/nvidia-smi"; return; }
  done
}
# nvidia-smi, read only (it never changes a setting), each call under 20 s.
# Sets gpus, gpu_name (an H100 80 GB by default, an H200 sometimes), driver,
# compute_mode, smi_note; one job at a time where the
# compute mode lets one process use the GPU.
query_nvidia_smi() {
  local smi
  smi="$(find_nvidia_smi)"
  gpus=0 driver="" compute_mode="" smi_note="" gpu_name=""
  if [[ -z "$smi" ]]; then
    smi_note="no nvidia-smi (PATH, /usr/local/nvidia/bin)"
    echo "gpu-check: $smi_note" | tee "$logs/nvidia-smi.txt"
    return
  fi
  timeout -k 2 20 "$smi" -L >"$logs/nvidia-smi.txt" 2>&1 || smi_note="nvidia-smi -L: exit $?"
  timeout -k 2 20 "$smi" --query-gpu=name,driver_version,memory.total,compute_cap,compute_mode,clocks.sm,clocks.max.sm,clocks.mem \
    --format=csv >>"$logs/nvidia-smi.txt" 2>&1
  cat "$logs/nvidia-smi.txt"
  gpus="$(grep -c '^GPU [0-9]' "$logs/nvidia-smi.txt" || true)"
  driver="$(timeout -k 2 20 "$smi" --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  compute_mode="$(timeout -k 2 20 "$smi" --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)"
  gpu_name="$(timeout -k 2 20 "$smi" --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  if [[ "$compute_mode" == *Exclusive_Process* ]]; then
    exclusive=1 jobs=1
    smi_note="compute mode Exclusive_Process: the suite runs one test at a time, the sanitizers one after another"
    echo "gpu-check: $smi_note"
  fi
}
# The driver's start-up cost, as geeps_cuda_probe measured it.
driver_start_line() {
  grep -E "^cuda-probe: (cuInit|device 0's primary context) took" "$logs/cuda-probe.log" 2>/dev/null |
    sed 's/^cuda-probe: //' | tr '\n' ';' | sed 's/;$//; s/;/; /g'
}
stage_env() {
  local gpus=0 driver="" glibc need compute_mode smi_note gpu_name
  problems=()
  query_nvidia_smi
  glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
  need="$(json_get glibc_needed "$bundle/bundle.json")"
  if [[ -n "$need" && -n "$glibc" && "$(printf '%s\n%s\n' "$need" "$glibc" | sort -V | head -1)" != "$need" ]]; then
    problems+=("glibc $glibc is older than the $need the bundle needs")
  fi
  echo "gpu-check: glibc ${glibc:-unknown} (bundle needs ${need:-?})"
  unpack_bundle
  pick_gcc_libs "$glibc"
  find_cuda_libraries
  probe_driver
  echo "gpu-check: the bundle's binaries run with LD_LIBRARY_PATH=$libpath"
  check_libraries
  local probe_ok=0
  ((probe_rc == 0)) && probe_ok=1
  # The probe's "device found" is enough where nvidia-smi is missing or mute.
  ((gpus > 0 || probe_ok || dry)) || problems+=("no GPU seen by nvidia-smi${smi_note:+ ($smi_note)}")
  if ((!dry && !probe_ok)); then problems+=("the CUDA driver: $probe_line"); fi
  if ((dry && probe_ok)); then problems+=("dry run, yet the driver sees a GPU: $probe_line"); fi
  fig="{\"gpus\": ${gpus:-0}, \"driver\": $(json_str "${driver:-}"), \"gpu_name\": $(json_str "${gpu_name:-}"), \"compute_mode\": $(json_str "${compute_mode:-}"), \"nvidia_smi\": $(json_str "${smi_note:-ok}"), \"driver_start\": $(json_str "$(driver_start_line)"), \"cuda_probe_exit\": $probe_rc, \"cuda_probe\": $(json_str "$probe_line"), \"glibc\": $(json_str "${glibc:-}"), \"libstdcxx\": \"$gcc_choice\", \"cublas\": $(json_str "$cublas_v"), \"cublas_dir\": $(json_str "$cublas_dir"), \"cudnn\": $(json_str "$cudnn_v"), \"cudnn_dir\": $(json_str "$cudnn_dir"), \"library_problems\": $lib_problems}"
  machine_json="$fig"
  if ((${#problems[@]} == 0)); then
    st=passed note="${gpus:-0} GPU(s) by nvidia-smi${gpu_name:+ ($gpu_name)}${smi_note:+ ($smi_note)}; driver: $probe_line; cuBLAS $cublas_v, cuDNN $cudnn_v${cudnn_note:+ ($cudnn_note)}"
  else
    note="$(printf '%s; ' "${problems[@]}")"
  fi
}

# ---- cuda-suite ------------------------------------------------------------------------
gtest_counts() {  # gtest_counts <log> <prefix regex>: "ok skipped failed"
  echo "$(count "^\[       OK \] $2" "$1") $(count "^\[  SKIPPED \] $2.* ms\)$" "$1") $(grep -E '^\[  FAILED  \] .* ms\)$' "$1" 2>/dev/null | grep -cE "\] $2" || true)"
}
stage_cuda_suite() {
  local log="$logs/device_test_cuda.log" rc ok sk fl
  run_box 40 "$bin/device_test" --gtest_filter='Cuda/*:CreateDevice*' \
    --gtest_output="json:$logs/device_test_cuda.json" >"$log" 2>&1
  rc=$?
  read -r ok sk fl <<<"$(gtest_counts "$log" 'Cuda/')"
  tail -3 "$log"
  fig="{\"exit\": $rc, \"cuda_passed\": $ok, \"cuda_skipped\": $sk, \"cuda_failed\": $fl}"
  if ((rc == 0 && ok > 0 && sk == 0)); then
    st=passed note="$ok CUDA tests passed"
  elif timed_out "$rc"; then
    note="timed out (a hang?) after $ok passed (device_test_cuda.log)"
  elif ((rc == 0)); then
    note="$sk CUDA tests skipped, $ok passed: the GPU was not seen ($(grep -m1 -A1 'Skipped' "$log" | tail -1 | sed 's/^ *//'))"
  else
    note="exit $rc: $fl CUDA tests failed, $ok passed, $sk skipped (device_test_cuda.log)"
  fi
  ((dry)) && expect_no_gpu "$log" "the CUDA conformance suite"
}

# ---- layers-cuda -----------------------------------------------------------------------
layers_run() {  # layers_run <tag> <seconds> [env...]: sets lr_rc lr_ok lr_sk lr_fl lr_line
  local tag="$1" secs="$2" log="$logs/layers_cuda_test_$1.log"
  shift 2
  run_box "$secs" env "$@" "$bin/layers_cuda_test" \
    --gtest_output="json:$logs/layers_cuda_test_$tag.json" >"$log" 2>&1
  lr_rc=$?
  read -r lr_ok lr_sk lr_fl <<<"$(gtest_counts "$log" 'LayersCudaTest\.')"
  lr_line="$(grep -m1 '^nn: CUDA layer backend: ' "$log" | sed 's/^nn: CUDA layer backend: //')"
  echo "layers_cuda_test ($tag): exit $lr_rc, $lr_ok passed, $lr_sk skipped, $lr_fl failed${lr_line:+; $lr_line}"
}
stage_layers_cuda() {
  local ok_all=1 used="unknown" parts=() force_fig="null" own_rc=null
  layers_run default 20
  local d_rc=$lr_rc d_ok=$lr_ok d_sk=$lr_sk d_line="$lr_line"
  ((lr_rc == 0 && lr_ok > 0 && lr_sk == 0)) || { ok_all=0; parts+=("with cuDNN as decided: exit $lr_rc, $lr_ok passed, $lr_sk skipped, $lr_fl failed"); }
  case "$d_line" in
    *"cuDNN"*": used"*) used=yes ;;
    *"NOT used"*) used=no ;;
  esac
  if grep -q '^nn: CUDA layer backend: cuDNN cannot start' "$logs/layers_cuda_test_default.log"; then
    used=no
    d_line+="; $(grep -m1 '^nn: CUDA layer backend: cuDNN cannot start' "$logs/layers_cuda_test_default.log" | sed 's/^nn: CUDA layer backend: //')"
  fi
  if ((!dry)) || ((ok_all)); then
    layers_run own-kernels 15 NN_CUDNN=off
    own_rc=$lr_rc
    ((lr_rc == 0 && lr_ok > 0 && lr_sk == 0)) || { ok_all=0; parts+=("NN_CUDNN=off: exit $lr_rc, $lr_ok passed, $lr_sk skipped, $lr_fl failed"); }
  fi
  # An older cuDNN is left out by default: try it anyway, for the record.
  if [[ "$d_line" == *"NOT used, older than the build's"* ]]; then
    layers_run force 12 NN_CUDNN=force
    local forced_failures
    forced_failures="$(grep -oE '^\[  FAILED  \] LayersCudaTest\.[A-Za-z0-9_/.]+' "$logs/layers_cuda_test_force.log" |
      sed 's/^.*\] //' | sort -u | paste -sd, - | sed 's/,/, /g' | cut -c1-400)"
    force_fig="{\"exit\": $lr_rc, \"passed\": $lr_ok, \"failed\": $lr_fl, \"failures\": $(json_str "$forced_failures")}"
    parts+=("finding, not gated: NN_CUDNN=force (the older cuDNN) exit $lr_rc, $lr_ok passed, $lr_fl failed${forced_failures:+: $forced_failures}")
  fi
  fig="{\"exit\": $d_rc, \"passed\": $d_ok, \"skipped\": $d_sk, \"cudnn_used\": \"$used\", \"backend\": $(json_str "$d_line"), \"own_kernels_exit\": $own_rc, \"forced_older_cudnn\": $force_fig}"
  if ((ok_all)); then
    st=passed note="$d_ok tests with cuDNN used: $used, and with the own kernels${parts[*]:+; ${parts[*]}}"
  else
    note="$(printf '%s; ' "${parts[@]}")"
    note="${note%; }"
  fi
  if ((dry)); then
    expect_no_gpu "$logs/layers_cuda_test_default.log" "layers_cuda_test"
    # The host backend's own test (OpenBLAS from the bundle) must pass here.
    run_box 20 "$bin/layers_test" >"$logs/layers_test_host.log" 2>&1
    local h=$?
    tail -1 "$logs/layers_test_host.log"
    if ((h != 0)); then st=failed note+="; layers_test (host backend) exit $h (layers_test_host.log)"; fi
  fi
}

# ---- fmnist ------------------------------------------------------------------------------
fmnist_run() {  # fmnist_run <tag> <device> <budget bytes> <seconds>: sets fr_rc fr_acc fr_secs fr_line
  local log="$logs/fmnist_train_$1.log"
  run_box "$4" "$bin/fmnist_train" --device "$2" --epochs 1 --lr 0.01 --seed 1 \
    --device-memory-budget "$3" --data-dir "$bundle/data/fashion-mnist" \
    --curve-csv "$logs/fmnist_curve_$1.csv" >"$log" 2>&1
  fr_rc=$?
  fr_acc="$(sed -n 's/^final test accuracy: //p' "$log")"
  fr_secs="$(sed -n 's/^training took \([0-9.]*\) s.*/\1/p' "$log")"
  fr_line="$(grep -m1 '^nn: CUDA layer backend: ' "$log" | sed 's/^nn: CUDA layer backend: //')"
  tail -2 "$log"
}
above() { awk -v a="${1:-0}" -v t="$2" 'BEGIN { exit !(a >= t) }'; }
# One epoch of the cnn (2 workers, batch 64, lr 0.01, seed 1) on the
# bundle's subset, without a device memory budget and with 20 MB (local
# data 20.7 MB + parameters 1.7 MB: the memory manager swaps, and the
# layers compute on swapped buffers). The accuracy is the gate; the time a
# figure.
stage_fmnist() {
  local device=cuda runs=(free:0 budget:20000000) r tag budget parts=() ok=1 f="{"
  for r in "${runs[@]}"; do
    tag="${r%%:*}" budget="${r#*:}"
    if ((dry)); then
      # The same training on the host backend, held to the same accuracy.
      fmnist_run "host-$tag" host "$budget" 20
      f+="$([[ "$f" == "{" ]] || echo ", ")\"host_$tag\": {\"exit\": $fr_rc, \"accuracy\": $(num_or_null "${fr_acc:-}"), \"train_seconds\": $(num_or_null "${fr_secs:-}")}"
      if ((fr_rc != 0)) || ! above "$fr_acc" "$fmnist_min"; then
        ok=0 parts+=("host $tag: exit $fr_rc, accuracy ${fr_acc:-none} (fmnist_train_host-$tag.log)")
      else
        parts+=("host $tag: accuracy $fr_acc (${fr_secs:-?} s)")
      fi
      continue
    fi
    fmnist_run "$tag" "$device" "$budget" 22
    f+="$([[ "$f" == "{" ]] || echo ", ")\"$tag\": {\"budget\": $budget, \"exit\": $fr_rc, \"accuracy\": $(num_or_null "${fr_acc:-}"), \"train_seconds\": $(num_or_null "${fr_secs:-}"), \"backend\": $(json_str "$fr_line")}"
    if timed_out "$fr_rc"; then
      ok=0 parts+=("$tag: timed out (a hang?)")
    elif ((fr_rc != 0)); then
      ok=0 parts+=("$tag: exit $fr_rc (fmnist_train_$tag.log): $(grep -m1 'fmnist_train:' "$logs/fmnist_train_$tag.log")")
    elif [[ -z "$fr_line" ]]; then
      ok=0 parts+=("$tag: the CUDA layer backend never started (no 'nn: CUDA layer backend' line)")
    elif above "$fr_acc" "$fmnist_min"; then
      parts+=("$tag: accuracy $fr_acc, ${fr_secs:-?} s")
    else
      ok=0 parts+=("$tag: accuracy ${fr_acc:-none} < $fmnist_min")
    fi
  done
  fig="$f, \"accuracy_min\": $fmnist_min}"
  note="$(printf '%s; ' "${parts[@]}")(accuracy >= $fmnist_min)"
  ((ok)) && st=passed
  if ((dry && ok)); then
    # The CUDA training must fail for want of a GPU.
    run_box 5 "$bin/fmnist_train" --device cuda --epochs 1 --data-dir "$bundle/data/fashion-mnist" \
      >"$logs/fmnist_train_cuda.log" 2>&1
    local crc=$?
    st=failed note+="; cuda: exit $crc"
    expect_no_gpu "$logs/fmnist_train_cuda.log" "fmnist_train --device cuda"
  fi
}

# ---- big-net --------------------------------------------------------------------------------
stage_big_net() {
  local log="$logs/big_net.log" rc rel sb su stall ident device=cuda iters=200
  if ((dry)); then device=host iters=8; fi
  run_box 40 "$bin/big_net" --device "$device" --copy-gbs 0 --oversubscription 4 \
    --iterations "$iters" --out "$logs/big_net.json" >"$log" 2>&1
  rc=$?
  tail -8 "$log"
  rel="$(sed -n 's/^relative throughput: //p' "$log")"
  sb="$(sed -n 's/^with the budget: *\([0-9.]*\) samples.*/\1/p' "$log")"
  su="$(sed -n 's/^without a budget: *\([0-9.]*\) samples.*/\1/p' "$log")"
  stall="$(sed -n 's/.*(fraction \([0-9.]*\)).*/\1/p' "$log" | head -1)"
  ident="$(sed -n 's/^weights bitwise identical to the run without a budget: //p' "$log")"
  local goal_met=null
  if [[ -n "$rel" ]]; then above "$rel" "$big_net_goal" && goal_met=true || goal_met=false; fi
  fig="{\"device\": \"$device\", \"exit\": $rc, \"weights_identical\": $(json_str "${ident:-}"), \"relative_throughput\": $(num_or_null "${rel:-}"), \"goal\": $big_net_goal, \"goal_met\": $goal_met, \"samples_per_second_budget\": $(num_or_null "${sb:-}"), \"samples_per_second_no_budget\": $(num_or_null "${su:-}"), \"stall_fraction\": $(num_or_null "${stall:-}")}"
  if timed_out "$rc"; then
    note="timed out (a hang?) on $device (big_net.log)"
  elif ((rc == 0)) && [[ "$ident" == yes ]]; then
    st=passed note="$device: weights bitwise identical at 4x oversubscription; relative throughput ${rel:-?} (goal $big_net_goal, reported), $sb vs $su samples/s"
  else
    note="$device: exit $rc, weights identical: ${ident:-?} (big_net.log): $(grep -m1 'big_net:' "$log")"
  fi
  if ((dry)) && [[ "$st" == passed ]]; then
    run_box 5 "$bin/big_net" --device cuda --iterations 8 >"$logs/big_net_cuda.log" 2>&1
    local crc=$?
    st=failed note+="; cuda: exit $crc"
    expect_no_gpu "$logs/big_net_cuda.log" "big_net --device cuda"
  fi
}

# ---- sanitize ---------------------------------------------------------------------------
stage_sanitize() {
  local cs
  cs="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer \
    /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)"
  if ((dry)); then
    st=no-gpu note="dry run: not run (needs a GPU); compute-sanitizer: ${cs:-not found here}"
    fig="{\"compute_sanitizer\": $(json_str "${cs:-}")}"
    return
  fi
  if [[ -z "$cs" ]]; then st=unavailable note="compute-sanitizer not found"; return; fi
  local tool pids=() rcs=() b k=0 port_opt
  # Each instance talks to its target over its own TCP ports: three at once
  # must not meet on the default base port. The option's name is read from
  # this compute-sanitizer's help (none given where it has neither).
  port_opt="$("$cs" --help 2>/dev/null | grep -oE -- '--(base-port|port)\b' | head -1)"
  b="$(box 95)"
  ((exclusive)) && b=$(( $(box 95) / 3 ))
  # API errors are not reported: tests provoke failed allocations on purpose
  # (FailedAllocationLeavesNoErrorBehind) and check every status themselves.
  for tool in memcheck racecheck synccheck; do
    timeout -k 5 "$b" env "LD_LIBRARY_PATH=$libpath" "$cs" --tool "$tool" --error-exitcode 86 \
      --report-api-errors no --print-limit 100 ${port_opt:+"$port_opt" $((49152 + 64 * k))} \
      "$bin/device_test" --gtest_filter='Cuda/*' >"$logs/sanitize_$tool.log" 2>&1 &
    pids+=($!)
    k=$((k + 1))
    if ((exclusive)); then  # one CUDA process at a time
      wait "${pids[-1]}"
      rcs+=($?)
    fi
  done
  local i=0 rc errs ok parts=() bad=0 unavailable=0 cut=0 f="{"
  for tool in memcheck racecheck synccheck; do
    if ((exclusive)); then
      rc=${rcs[$i]}
    else
      wait "${pids[$i]}"
      rc=$?
    fi
    i=$((i + 1))
    local log="$logs/sanitize_$tool.log"
    errs="$(grep -oE '(ERROR SUMMARY|RACECHECK SUMMARY): [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')"
    ok=$(count '^\[       OK \] Cuda/' "$log")
    local s=passed
    if grep -qE 'Device not supported|Unable to find injection library|unsupported' "$log" && ((ok == 0)); then
      s=unavailable unavailable=1
    elif ((rc == 86)) || [[ -n "$errs" && "$errs" != 0 ]]; then
      s=failed bad=1
    elif timed_out "$rc"; then
      s=cut cut=1
    elif ((rc != 0 || ok == 0)); then
      s=failed bad=1
    fi
    parts+=("$tool $s (exit $rc, ${errs:-?} errors, $ok tests)")
    f+="$([[ "$f" == "{" ]] || echo ", ")\"$tool\": {\"status\": \"$s\", \"exit\": $rc, \"errors\": $(num_or_null "${errs:-}"), \"tests\": $ok}"
    tail -2 "$log"
  done
  fig="$f, \"port_option\": $(json_str "${port_opt:-none}"), \"one_at_a_time\": $exclusive}"
  note="$(printf '%s; ' "${parts[@]}")ports: ${port_opt:-the default (no port option in its help)}"
  if ((bad)); then st=failed
  elif ((cut)); then st=cut note="a sanitizer reached the limit with no report so far: $note"
  elif ((unavailable)); then st=unavailable note="compute-sanitizer cannot use this GPU here (reported, not failed): $note"
  else st=passed
  fi
}

# ---- suite -----------------------------------------------------------------------------
# One CTest test: its number, then name, binary, gtest filter, label,
# timeout (a tests.tsv line). Records "result exit name label ms devices";
# a device is its trace's kind ("cuda", "host"), or "cuda-like" for the host
# backend's CUDA-like devices. While it runs, running/<idx> holds the
# process group of its `timeout` (which makes a group of its own), its name
# and label: a stage cut at its limit ends those groups (end_cut_tests). A
# passed test's log is cut to its last 40 lines.
write_runner() {
  cat >"$work/run1.sh" <<'EOF'
#!/usr/bin/env bash
IFS=$'\t' read -r idx name binary filter label to <<<"$1"
base="$LOGS/suite/$idx-$(printf '%s' "$name" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-80)"
trace="$base.devices"
t0=$(date +%s%N)
(cd "$WD" && exec timeout -k 5 "$to" env "LD_LIBRARY_PATH=$LDP" "GEEPS_DEVICE_TRACE=$trace" \
  ${CUDA_LIKE:+GEEPS_HOST_AS_CUDA=1} \
  "$BIN/$binary" --gtest_filter="$filter" --gtest_also_run_disabled_tests) >"$base.log" 2>&1 &
pid=$!
printf '%s\t%s\t%s\n' "$pid" "$name" "$label" >"$RUNNING/$idx"
wait "$pid"
rc=$?
rm -f "$RUNNING/$idx"
if ((rc == 0)); then
  if grep -q '^\[  SKIPPED \]' "$base.log"; then r=skipped; else r=passed; fi
elif ((rc == 124 || rc == 137)); then r=timeout
else r=failed
fi
if [[ "$r" == passed && $(wc -l <"$base.log") -gt 40 ]]; then
  { echo "[gpu-check: passed; its last 40 lines]"; tail -n 40 "$base.log"; } >"$base.log.cut"
  mv -f "$base.log.cut" "$base.log"
fi
devices="$(sed -E 's/^[0-9]+ //; s/^.*\(CUDA-like\).*$/cuda-like/; s/:.*//' "$trace" 2>/dev/null | sort -u | tr '\n' ',' | sed 's/,$//')"
printf '%s\t%d\t%s\t%s\t%d\t%s\n' "$r" "$rc" "$name" "$label" $((($(date +%s%N) - t0) / 1000000)) "${devices:-none}" >>"$RESULTS"
EOF
}
# The tests still running when the stage was cut: their process groups
# ended (TERM, then KILL), each recorded as "cut".
end_cut_tests() {
  local f pgid name label n=0
  for f in "$work/running"/*; do
    [[ -e "$f" ]] || continue
    IFS=$'\t' read -r pgid name label <"$f"
    kill -TERM -- "-$pgid" 2>/dev/null || kill -TERM "$pgid" 2>/dev/null
    printf 'cut\t-\t%s\t%s\t-\tunknown\n' "$name" "$label" >>"$work/suite.results"
    n=$((n + 1))
  done
  ((n > 0)) || return 0
  sleep 2
  for f in "$work/running"/*; do
    [[ -e "$f" ]] || continue
    IFS=$'\t' read -r pgid _ <"$f"
    kill -KILL -- "-$pgid" 2>/dev/null || kill -KILL "$pgid" 2>/dev/null
    rm -f "$f"
  done
  echo "gpu-check: $n tests were still running at the stage's limit: ended"
}
# "passed skipped failed timeout cut lines on_gpu cuda_like cuda_skips" of
# the results file $1.
suite_counts() {
  awk -F'\t' '{ c[$1]++ } $6 ~ /(^|,)cuda(,|$)/ { g++ } $6 ~ /cuda-like/ { l++ }
    $1 == "skipped" && $3 ~ /[Cc]uda/ { k++ }
    END { printf "%d %d %d %d %d %d %d %d %d\n", c["passed"], c["skipped"], c["failed"], c["timeout"],
          c["cut"], NR, g, l, k }' "$1"
}
stage_suite() {
  local labels_re="${GEEPS_GPU_CHECK_SUITE_EXCLUDE:-^(slow|examples)$}"
  # The four 30 s sprays of foreign frames test who gets past a handshake,
  # which no device changes (CI runs them, also in the CUDA-like mode).
  local names_re="${GEEPS_GPU_CHECK_SUITE_SKIP-^Transports/ForeignTrafficTest[.]}"
  awk -F'\t' -v re="$labels_re" -v skip="$names_re" '$4 !~ re && (skip == "" || $1 !~ skip) { print ++n "\t" $0 }' \
    "$bundle/tests.tsv" | sort -t$'\t' -k6,6nr -s >"$work/suite.tsv"  # the longest limits first
  local total cuda_like_env="" left_out
  total=$(wc -l <"$work/suite.tsv")
  left_out=$(awk -F'\t' -v re="$labels_re" -v skip="$names_re" '$4 !~ re && skip != "" && $1 ~ skip' "$bundle/tests.tsv" | wc -l)
  echo "gpu-check: left out by name (${names_re:-none}): $left_out tests"
  mkdir -p "$logs/suite" "$work/running"
  : >"$work/suite.results"
  write_runner
  ((dry)) && cuda_like_env=1  # kAuto behaves like the GPU machine's CUDA
  echo "gpu-check: $total tests (labels not matching $labels_re), $jobs at a time, devices as each test picks them${cuda_like_env:+ (kAuto: the CUDA-like host device)}"
  LOGS="$logs" WD="$work/tests" BIN="$bin" RESULTS="$work/suite.results" LDP="$libpath" \
    RUNNING="$work/running" CUDA_LIKE="$cuda_like_env" \
    GEEPS_TEST_BIN_DIR="$bin" GEEPS_TEST_SOURCE_DIR="$bundle/share/src" \
    timeout -k 5 "$(box "$budget")" xargs -d '\n' -n 1 -P "$jobs" bash "$work/run1.sh" <"$work/suite.tsv"
  local xrc=$?
  end_cut_tests
  cp "$work/suite.results" "$logs/suite-results.tsv"
  suite_verdict "$total" "$xrc"
}
suite_verdict() {  # suite_verdict <total> <xargs exit>: sets st, note, fig
  local total="$1" xrc="$2" passed skipped fails timeouts cut ran on_gpu cuda_like cuda_skips bad skips cuts
  read -r passed skipped fails timeouts cut ran on_gpu cuda_like cuda_skips <<<"$(suite_counts "$work/suite.results")"
  ran=$((ran - cut))
  skips="$(awk -F'\t' '$1 == "skipped" { printf "%s%s", (n++ ? ", " : ""), $3 }' "$work/suite.results" | cut -c1-600)"
  bad="$(awk -F'\t' '$1 == "failed" || $1 == "timeout" { printf "%s%s (%s)", (n++ ? ", " : ""), $3, $1 }' "$work/suite.results" | cut -c1-600)"
  cuts="$(awk -F'\t' '$1 == "cut" { printf "%s%s", (n++ ? ", " : ""), $3 }' "$work/suite.results" | cut -c1-300)"
  echo "gpu-check: $passed passed, $skipped skipped, $fails failed, $timeouts timed out, $((total - ran)) not run ($cut cut while running); $on_gpu touched the GPU, $cuda_like a CUDA-like host device${bad:+: $bad}"
  fig="{\"tests\": $total, \"left_out_by_name\": ${left_out:-0}, \"jobs\": $jobs, \"passed\": $passed, \"skipped\": $skipped, \"failed\": $fails, \"timed_out\": $timeouts, \"not_run\": $((total - ran)), \"cut_while_running\": $cut, \"touched_gpu\": $on_gpu, \"cuda_like\": $cuda_like, \"cuda_tests_skipped\": $cuda_skips, \"failures\": $(json_str "$bad"), \"cut_tests\": $(json_str "$cuts"), \"skipped_tests\": $(json_str "$skips")}"
  note="$passed passed, $skipped skipped, $fails failed, $timeouts timed out, $((total - ran)) not run of $total (${left_out:-0} left out by name); $on_gpu created a CUDA device, $cuda_like a CUDA-like host device"
  if ((fails > 0 || timeouts > 0)); then
    note+=": $bad"
  elif ((ran < total)); then
    st=cut note+=" (cut at the stage's limit, xargs exit $xrc${cuts:+; ended while running: $cuts})"
  elif ((passed == 0)); then
    note+=" (none passed)"
  elif ((!dry && (on_gpu == 0 || cuda_skips > 0))); then
    note+="; the GPU was not used as it should be ($cuda_skips CUDA tests skipped)"
  elif ((dry && on_gpu > 0)); then
    note+="; dry run, yet tests created CUDA devices"
  elif ((dry && cuda_like == 0)); then
    note+="; dry run, yet no test made a CUDA-like device (GEEPS_HOST_AS_CUDA did not reach them?)"
  else
    st=passed
  fi
}

# ---- bench --------------------------------------------------------------------------------
# Figures only: the stage fails when gpu_bench crashes or hangs, never for a
# ratio below its goal.
stage_bench() {
  local log="$logs/gpu_bench.log" rc line
  run_box 25 "$bin/gpu_bench" --check --out "$logs/gpu_bench.json" \
    --min-indexed-ratio "$indexed_goal" --min-overlap "$overlap_goal" >"$log" 2>&1
  rc=$?
  [[ -f "$logs/gpu_bench.json" ]] && cp "$logs/gpu_bench.json" "$out/gpu_bench.json"
  line="$(grep -m1 '^gpu_bench: check: ' "$log" | sed 's/^gpu_bench: check: //')"
  grep -E '^(pinned|overlap|gpu_bench)' "$log"
  local g s o
  g="$(sed -n 's/.*gather_min_ratio=\([0-9.]*\).*/\1/p' <<<"$line")"
  s="$(sed -n 's/.*scatter_add_min_ratio=\([0-9.]*\).*/\1/p' <<<"$line")"
  o="$(sed -n 's/.*overlap_fraction=\([-0-9.]*\).*/\1/p' <<<"$line")"
  fig="{\"exit\": $rc, \"gather_min_ratio\": $(num_or_null "${g:-}"), \"scatter_add_min_ratio\": $(num_or_null "${s:-}"), \"overlap_fraction\": $(num_or_null "${o:-}"), \"indexed_goal\": $indexed_goal, \"overlap_goal\": $overlap_goal, \"goals_met\": $([[ $rc == 0 ]] && echo true || { [[ $rc == 3 ]] && echo false || echo null; })}"
  case "$rc" in
    0) st=passed note="figures: $line (goals met)" ;;
    3) st=passed note="figures: $line (below a goal: reported, not failed)" ;;
    124|137) note="timed out (a hang?) (gpu_bench.log)" ;;
    *) note="exit $rc (gpu_bench.log): $(grep -m1 'gpu_bench:' "$log")" ;;
  esac
  ((dry)) && expect_no_gpu "$log" "gpu_bench"
}

# The command that reruns only the stages that failed or were cut (env
# always runs first: it unpacks the bundle and finds the libraries).
rerun_line() {
  local i again=()
  for i in "${!names[@]}"; do
    stage_ok "${statuses[$i]}" "${gates[$i]}" || again+=("${names[$i]}")
  done
  ((${#again[@]})) || return 0
  local list
  list="$(IFS=,; echo "${again[*]}")"
  echo "gpu-check: to rerun only these: bash $script_dir/$(basename "${BASH_SOURCE[0]}") $( ((dry)) && echo '--dry-run ')--bundle $bundle --stages $list"
}
main() {
  echo "gpu-check: $( ((dry)) && echo 'dry run (no GPU needed)' || echo 'GPU run') of $bundle, budget $budget s (stage limits $limit_sum s), $jobs jobs, outputs to $out"
  echo "gpu-check: bundle: $(tr -d '\n' <"$bundle/bundle.json" | sed 's/  */ /g' | cut -c1-400)"
  echo "gpu-check: caller's LD_LIBRARY_PATH: ${caller_ldp:-(empty)}"
  write_json
  local i
  for i in "${!names[@]}"; do run_stage "$i"; done
  finished=true
  write_json
  save_logs
  echo
  echo "=== gpu-check summary ($((SECONDS - start)) s in all; $out/gpu-check.json)"
  for i in "${!names[@]}"; do
    printf '  %-12s %-11s %-11s %4d/%3d s  %s\n' "${names[$i]}" "${gates[$i]}" "${statuses[$i]}" "${secs[$i]}" "${limits[$i]}" "${notes[$i]}"
  done
  if [[ "$(overall)" != true ]]; then
    echo "gpu-check: FAILED"
    rerun_line
    return 1
  fi
  echo "gpu-check: all passed"
}

mkdir -p "$out"
rm -f "$out/gpu-check.log"
main 2>&1 | tee "$out/gpu-check.log"
exit "${PIPESTATUS[0]}"
