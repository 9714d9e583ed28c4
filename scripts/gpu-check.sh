#!/usr/bin/env bash
# The GPU check: runs the GPU bundle (scripts/gpu-bundle.sh) on a machine
# with an NVIDIA GPU, with no build and no install there (the GPU machine has
# no package registry, no libzmq, GoogleTest, Boost, OpenBLAS or data set).
# Under 6 minutes on an H200; every stage under `timeout`, the whole under a
# budget (--budget, 345 s). docs/cuda.md, "The GPU check", gives the stages,
# their thresholds and why.
#
#   env          nvidia-smi -L / --query-gpu (read only: it never changes a
#                setting); cuBLAS and cuDNN found in the CUDA toolkit or the
#                Python wheels (site-packages/nvidia/...), the newest of
#                each put on the LD_LIBRARY_PATH that the bundle's binaries
#                (and nothing else) run with, their versions printed; the
#                bundle's big libraries unpacked; glibc and libstdc++
#                compared with what the bundle needs; every library of every
#                bundled binary must resolve inside the bundle or to glibc,
#                the driver, cuBLAS or cuDNN (ldd)
#   cuda-suite   device_test --gtest_filter='Cuda/*:CreateDevice*': must RUN,
#                not skip (a skip means the GPU was not seen)
#   layers-cuda  layers_cuda_test (the CUDA layer backend against the host
#                one), with cuDNN as the backend decides, then NN_CUDNN=off
#                (its own kernels); both must run, not skip. Reports whether
#                cuDNN was used and why not
#   suite        every CTest test of the bundle except labels slow and
#                examples, GEEPS_DEVICE=cuda (bundle's tests.tsv; run with
#                gtest filters, in parallel, each under its CTest timeout)
#   fmnist       fmnist_train --device cuda, one epoch of the bundle's
#                Fashion-MNIST subset (cnn, lr 0.01), without a memory budget
#                and with one that makes it swap: test accuracy >= 0.75 each
#   bench        gpu_bench --check: gather and scatter-add >= 0.5 of a
#                device-to-device copy's bandwidth, copy/compute overlap >= 0.8
#   big-net      big_net --device cuda at 4x oversubscription against its
#                unconstrained run: weights bitwise identical, relative
#                throughput >= 0.9
#   sanitize     compute-sanitizer memcheck, racecheck and synccheck over
#                device_test --gtest_filter='Cuda/*', the three at once
#
# Output: $OUT (else gpu-check-out/ beside the bundle) gets gpu-check.json
# (each stage's status, seconds and figures), gpu-check.log (this console),
# gpu_bench.json and gpu-check-logs.tar.gz (every stage's logs): 4 files.
# Exit status 0 when every stage passed, 1 otherwise, 2 bad usage.
#
# --dry-run (what CI runs, without a GPU, in a clean environment): env as
# above; the CUDA stages must FAIL the way they do without a GPU (a library
# missing from the bundle fails them differently); the host side runs for
# real: the suite on the host backend (labels but slow and examples),
# layers_test, the fmnist training on the host backend against the same
# threshold, and a short big_net on the host backend.
#
#   bash gpu-check.sh [--dry-run] [--bundle DIR] [--budget SECONDS]
#                     [--stages env,cuda-suite,...] [--keep]
# In the bundle it finds its bundle beside itself; as scripts/gpu-check.sh,
# in gpu-bundle/ at the repository root.
set -uo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
bundle=""
dry=0
keep=0
budget="${GEEPS_GPU_CHECK_SECONDS:-345}"
only=""
fmnist_min="${GEEPS_GPU_CHECK_FMNIST_MIN:-0.75}"
indexed_min="${GEEPS_GPU_CHECK_INDEXED_MIN:-0.5}"
overlap_min="${GEEPS_GPU_CHECK_OVERLAP_MIN:-0.8}"
big_net_min="${GEEPS_GPU_CHECK_BIG_NET_MIN:-0.9}"
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
if [[ -z "$bundle" ]]; then
  if [[ -f "$script_dir/tests.tsv" ]]; then bundle="$script_dir"; else bundle="$script_dir/../gpu-bundle"; fi
fi
if [[ ! -f "$bundle/tests.tsv" || ! -d "$bundle/bin" ]]; then
  echo "gpu-check: no bundle in $bundle: make it with bash scripts/gpu-bundle.sh (on a machine with the build tools)" >&2
  exit 2
fi
bundle="$(cd "$bundle" && pwd -P)"
bin="$bundle/bin"
out="${OUT:-$(dirname "$bundle")/gpu-check-out}"
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd -P)"
work="$(mktemp -d "${TMPDIR:-/tmp}/geeps-gpu-check.XXXXXX")" || exit 2
logs="$work/logs"
mkdir -p "$logs" "$work/lib" "$work/tests"
links=()  # symbolic links made from paths.map, removed at exit

cleanup() {
  if ((keep)); then echo "gpu-check: scratch kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---- stages: bookkeeping --------------------------------------------------------
start=$SECONDS
deadline=$((start + budget))
names=() statuses=() secs=() notes=() figs=()
machine_json="{}"
failed=0
json_str() {  # a JSON string of $1
  local s="$1"
  s="${s//\\/\\\\}"; s="${s//\"/\\\"}"; s="${s//$'\n'/\\n}"; s="${s//$'\t'/ }"; s="${s//$'\r'/}"
  printf '"%s"' "$s"
}
num_or_null() { [[ "$1" =~ ^-?[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$ ]] && printf '%s' "$1" || printf 'null'; }
write_json() {
  local i sep=""
  {
    printf '{\n  "mode": "%s",\n  "passed": %s,\n  "seconds": %d,\n' \
      "$( ((dry)) && echo dry-run || echo gpu)" "$( ((failed)) && echo false || echo true)" $((SECONDS - start))
    printf '  "thresholds": {"fmnist_accuracy": %s, "indexed_vs_copy": %s, "overlap": %s, "big_net_relative_throughput": %s},\n' \
      "$fmnist_min" "$indexed_min" "$overlap_min" "$big_net_min"
    printf '  "bundle": %s,\n' "$(cat "$bundle/bundle.json" 2>/dev/null || echo '{}')"
    printf '  "machine": %s,\n  "stages": [\n' "$machine_json"
    for i in "${!names[@]}"; do
      printf '%s    {"name": "%s", "status": "%s", "seconds": %d, "note": %s, "figures": %s}' \
        "$sep" "${names[$i]}" "${statuses[$i]}" "${secs[$i]}" "$(json_str "${notes[$i]}")" "${figs[$i]}"
      sep=$',\n'
    done
    printf '\n  ]\n}\n'
  } >"$out/gpu-check.json"
}
# Each stage function sets st (passed | failed | unavailable), note and fig
# (a JSON object).
run_stage() {  # run_stage <name> <function>
  local name="$1" fn="$2" t0=$SECONDS
  # env always runs: the others need what it finds.
  if [[ -n "$only" && "$only" != *",$name,"* && "$name" != env ]]; then return; fi
  echo
  echo "=== gpu-check: $name ($((SECONDS - start)) s elapsed)"
  st=failed note="" fig="{}"
  if ((deadline - SECONDS < 15)); then
    note="not run: the check's $budget s budget is spent"
  else
    "$fn"
  fi
  note="${note%; }"
  [[ "$st" == passed ]] || failed=1
  names+=("$name") statuses+=("$st") secs+=($((SECONDS - t0))) notes+=("$note") figs+=("$fig")
  printf '=== %-12s %-11s %4d s  %s\n' "$name" "$st" $((SECONDS - t0)) "$note"
  write_json
}
box() {  # box <seconds>: that, or what is left of the budget
  local left=$((deadline - SECONDS - 5))
  echo $(($1 < left ? $1 : left))
}
# Our binaries run with the library path the env stage made; nothing else
# does (the bundle's libz, libstdc++, ... stay out of the system's tools).
libpath=""
run_box() {  # run_box <seconds> <command>...
  local b
  b="$(box "$1")"
  shift
  timeout -k 5 "$b" env "LD_LIBRARY_PATH=$libpath" "$@"
}
count() { grep -cE "$1" "$2" 2>/dev/null || true; }
no_gpu_re='no CUDA device|cudaErrorNoDevice|cudaErrorInsufficientDriver|no CUDA-capable device'
# In --dry-run a CUDA stage must fail because no GPU is seen: then it passes.
expect_no_gpu() {  # expect_no_gpu <log> <what the GPU run would have shown>
  if [[ "$st" == passed ]]; then
    st=failed note="dry run: $2 passed without a GPU?"
  elif grep -qE "$no_gpu_re|\[  SKIPPED \]" "$1"; then
    st=passed note="dry run: fails without a GPU, as it must ($note)"
  else
    st=failed note="dry run: failed, but not for want of a GPU (a library missing from the bundle?): $note; see $(basename "$1")"
  fi
}

# ---- env ------------------------------------------------------------------------------
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
needs_of() {  # the version names (GLIBCXX_*, CXXABI_*, GCC_*) that bundled files need
  objdump -T "$@" 2>/dev/null | grep -oE '\b(GLIBCXX|CXXABI|GCC)_[0-9.]+\b' | sort -u
}
cublas_dir="" cudnn_dir=""
stage_env() {
  local gpus="" driver="" glibc need v line problems=() figs_extra=""
  # GPU: read only.
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L >"$logs/nvidia-smi.txt" 2>&1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$logs/nvidia-smi.txt" 2>&1
    nvidia-smi --query-gpu=compute_cap,clocks.sm,clocks.max.sm,clocks.mem --format=csv \
      >>"$logs/nvidia-smi.txt" 2>&1
    cat "$logs/nvidia-smi.txt"
    gpus="$(grep -c '^GPU [0-9]' "$logs/nvidia-smi.txt" || true)"
    driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  else
    echo "gpu-check: no nvidia-smi" | tee "$logs/nvidia-smi.txt"
    gpus=0
  fi
  ((gpus > 0)) || ((dry)) || problems+=("no GPU seen by nvidia-smi")
  # glibc, and libstdc++: the system's unless it is older than the bundle's
  # files need (then the bundle's, which needs a newer glibc).
  glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
  need="$(json_get glibc_needed "$bundle/bundle.json")"
  need_gcc="$(json_get glibc_needed_with_gcc_libs "$bundle/bundle.json")"
  if [[ -n "$need" && -n "$glibc" && "$(printf '%s\n%s\n' "$need" "$glibc" | sort -V | head -1)" != "$need" ]]; then
    problems+=("glibc $glibc is older than the $need the bundle needs")
  fi
  local sys_cxx="" gcc_choice=system missing_v=""
  if [[ -n "$ldconfig_bin" ]]; then
    sys_cxx="$("$ldconfig_bin" -p 2>/dev/null | awk '$1 == "libstdc++.so.6" && /x86-64/ { print $NF; exit }')"
  fi
  [[ -z "$sys_cxx" && -e /usr/lib/x86_64-linux-gnu/libstdc++.so.6 ]] && sys_cxx=/usr/lib/x86_64-linux-gnu/libstdc++.so.6
  local sys_gcc_s
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
  echo "gpu-check: glibc ${glibc:-unknown} (bundle needs ${need:-?}); libstdc++/libgcc_s: $gcc_choice${missing_v:+ (system lacks: $missing_v)}${sys_cxx:+; system: $sys_cxx}"
  # The bundle's compressed libraries, into the scratch folder (the library
  # path below names lib/ after it, for what they need).
  local z
  for z in "$bundle"/lib/*.xz; do
    [[ -e "$z" ]] || continue
    if command -v xz >/dev/null 2>&1; then
      xz -dc "$z" >"$work/lib/$(basename "$z" .xz)"
    else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$z" "$work/lib/$(basename "$z" .xz)"
    fi || problems+=("cannot unpack $(basename "$z")")
  done
  # cuBLAS and cuDNN: the newest of the toolkit's and the wheels'.
  local r
  r="$(pick cublas "${GEEPS_CUBLAS_DIR:-}" libcublas.so.13 libcublasLt.so.13)"
  cublas_dir="${r% *}" cublas_v="${r##* }"
  r="$(pick cudnn "${GEEPS_CUDNN_DIR:-}" libcudnn.so.9 libcudnn_graph.so.9 libcudnn_ops.so.9 libcudnn_cnn.so.9)"
  cudnn_dir="${r% *}" cudnn_v="${r##* }"
  local cudnn_note=""
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
  # nvrtc and nvJitLink, which cuDNN's runtime-compiled engines and cuBLAS may load.
  local extra="" d
  for d in $(candidates libnvrtc.so.13 | head -1) $(candidates libnvJitLink.so.13 | head -1); do
    [[ "$d" == "$cublas_dir" || "$d" == "$cudnn_dir" || ":$extra:" == *":$d:"* ]] || extra+="${extra:+:}$d"
  done
  libpath="$work/lib:$bundle/lib"
  [[ "$gcc_choice" == bundled ]] && libpath+=":$bundle/lib/gcc"
  for d in "$cublas_dir" "$cudnn_dir" ${extra//:/ }; do
    [[ -z "$d" || ":$libpath:" == *":$d:"* ]] || libpath+=":$d"
  done
  echo "gpu-check: cuBLAS $cublas_v in ${cublas_dir:-nowhere} (built with $(json_get cublas_built "$bundle/bundle.json"))"
  echo "gpu-check: cuDNN $cudnn_v in ${cudnn_dir:-nowhere} (built with $(json_get cudnn_built "$bundle/bundle.json"))${cudnn_note:+: $cudnn_note}"
  echo "gpu-check: the bundle's binaries run with LD_LIBRARY_PATH=$libpath"
  # Paths compiled into the tests (helpers they start, the fuzz corpus).
  local src dst
  while IFS=$'\t' read -r src dst; do
    [[ -e "$src" || -L "$src" ]] && continue
    if mkdir -p "$(dirname "$src")" 2>/dev/null && ln -s "$bundle/$dst" "$src" 2>/dev/null; then
      links+=("$src")
    else
      problems+=("cannot link $src (tests that start it will fail)")
    fi
  done <"$bundle/paths.map"
  # Every library of every bundled file resolves inside the bundle, or to
  # glibc, the driver or the CUDA libraries found above.
  local f lib_bad=() soname arrow path
  local gcc_files=()
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
            libcuda.so.*|libcublas.so.*|libcublasLt.so.*|libcudnn*.so.*|libcudart.so.*|libnvrtc*|libnvJitLink*) ;;
            libstdc++.so.*|libgcc_s.so.*) [[ "$gcc_choice" == system ]] || lib_bad+=("$(basename "$f"): $soname from $path, not the bundle's") ;;
            *) lib_bad+=("$(basename "$f"): $soname from $path, outside the bundle") ;;
          esac ;;
      esac
    done < <(LD_LIBRARY_PATH="$libpath" ldd "$f" 2>&1)
  done
  printf '%s\n' "${lib_bad[@]}" >"$logs/libraries.txt"
  if ((${#lib_bad[@]} > 0)); then
    problems+=("${#lib_bad[@]} unresolved or foreign libraries, e.g. ${lib_bad[0]} (libraries.txt)")
  fi
  echo "gpu-check: library check: ${#lib_bad[@]} problems"
  fig="{\"gpus\": ${gpus:-0}, \"driver\": $(json_str "${driver:-}"), \"glibc\": $(json_str "${glibc:-}"), \"libstdcxx\": \"$gcc_choice\", \"cublas\": $(json_str "$cublas_v"), \"cublas_dir\": $(json_str "$cublas_dir"), \"cudnn\": $(json_str "$cudnn_v"), \"cudnn_dir\": $(json_str "$cudnn_dir"), \"library_problems\": ${#lib_bad[@]}}"
  machine_json="$fig"
  if ((${#problems[@]} == 0)); then
    st=passed note="${gpus:-0} GPU(s), cuBLAS $cublas_v, cuDNN $cudnn_v${cudnn_note:+ ($cudnn_note)}"
  else
    st=failed note="$(printf '%s; ' "${problems[@]}")"
  fi
}

# ---- cuda-suite ---------------------------------------------------------------------
gtest_counts() {  # gtest_counts <log> <prefix regex>: "ok skipped failed"
  echo "$(count "^\[       OK \] $2" "$1") $(count "^\[  SKIPPED \] $2.* ms\)$" "$1") $(grep -E '^\[  FAILED  \] .* ms\)$' "$1" 2>/dev/null | grep -cE "\] $2" || true)"
}
stage_cuda_suite() {
  local log="$logs/device_test_cuda.log" rc ok sk fl
  run_box 90 "$bin/device_test" --gtest_filter='Cuda/*:CreateDevice*' \
    --gtest_output="json:$logs/device_test_cuda.json" >"$log" 2>&1
  rc=$?
  read -r ok sk fl <<<"$(gtest_counts "$log" 'Cuda/')"
  tail -3 "$log"
  fig="{\"exit\": $rc, \"cuda_passed\": $ok, \"cuda_skipped\": $sk, \"cuda_failed\": $fl}"
  if ((rc == 0 && ok > 0 && sk == 0)); then
    st=passed note="$ok CUDA tests passed"
  elif ((rc == 0)); then
    note="$sk CUDA tests skipped, $ok passed: the GPU was not seen ($(grep -m1 -A1 'Skipped' "$log" | tail -1 | sed 's/^ *//'))"
  else
    note="exit $rc: $fl CUDA tests failed, $ok passed, $sk skipped (device_test_cuda.log)"
  fi
  ((dry)) && expect_no_gpu "$log" "the CUDA conformance suite"
}

# ---- layers-cuda ---------------------------------------------------------------------
layers_run() {  # layers_run <tag> [env...]: sets lr_rc lr_ok lr_sk lr_fl lr_line
  local tag="$1" log="$logs/layers_cuda_test_$1.log"
  shift
  run_box 60 env "$@" GEEPS_DEVICE=cuda "$bin/layers_cuda_test" \
    --gtest_output="json:$logs/layers_cuda_test_$tag.json" >"$log" 2>&1
  lr_rc=$?
  read -r lr_ok lr_sk lr_fl <<<"$(gtest_counts "$log" 'LayersCudaTest\.')"
  lr_line="$(grep -m1 '^nn: CUDA layer backend: ' "$log" | sed 's/^nn: CUDA layer backend: //')"
  echo "layers_cuda_test ($tag): exit $lr_rc, $lr_ok passed, $lr_sk skipped, $lr_fl failed${lr_line:+; $lr_line}"
}
stage_layers_cuda() {
  local ok_all=1 used="unknown" notes=() force_fig="null" own_rc=null
  layers_run default
  local d_rc=$lr_rc d_ok=$lr_ok d_sk=$lr_sk d_line="$lr_line"
  ((lr_rc == 0 && lr_ok > 0 && lr_sk == 0)) || { ok_all=0; notes+=("with cuDNN as decided: exit $lr_rc, $lr_ok passed, $lr_sk skipped, $lr_fl failed"); }
  case "$d_line" in
    *"cuDNN"*": used"*) used=yes ;;
    *"NOT used"*) used=no ;;
  esac
  if grep -q '^nn: CUDA layer backend: cuDNN cannot start' "$logs/layers_cuda_test_default.log"; then
    used=no
    d_line+="; $(grep -m1 '^nn: CUDA layer backend: cuDNN cannot start' "$logs/layers_cuda_test_default.log" | sed 's/^nn: CUDA layer backend: //')"
  fi
  if ((!dry)) || ((ok_all)); then
    layers_run own-kernels NN_CUDNN=off
    own_rc=$lr_rc
    ((lr_rc == 0 && lr_ok > 0 && lr_sk == 0)) || { ok_all=0; notes+=("NN_CUDNN=off: exit $lr_rc, $lr_ok passed, $lr_sk skipped, $lr_fl failed"); }
  fi
  # An older cuDNN is left out by default: try it anyway, for the record.
  if [[ "$d_line" == *"NOT used, older than the build's"* ]]; then
    layers_run force NN_CUDNN=force
    force_fig="{\"exit\": $lr_rc, \"passed\": $lr_ok, \"failed\": $lr_fl}"
    notes+=("NN_CUDNN=force (older cuDNN, for the record): exit $lr_rc, $lr_ok passed")
  fi
  fig="{\"exit\": $d_rc, \"passed\": $d_ok, \"skipped\": $d_sk, \"cudnn_used\": \"$used\", \"backend\": $(json_str "$d_line"), \"own_kernels_exit\": $own_rc, \"forced_older_cudnn\": $force_fig}"
  if ((ok_all)); then
    st=passed note="$d_ok tests with cuDNN used: $used, and with the own kernels${notes[*]:+; ${notes[*]}}"
  else
    note="$(printf '%s; ' "${notes[@]}")"
    note="${note%; }"
  fi
  if ((dry)); then
    expect_no_gpu "$logs/layers_cuda_test_default.log" "layers_cuda_test"
    # The host backend's own test (OpenBLAS from the bundle) must pass here.
    run_box 90 "$bin/layers_test" >"$logs/layers_test_host.log" 2>&1
    local h=$?
    tail -1 "$logs/layers_test_host.log"
    if ((h != 0)); then st=failed note+="; layers_test (host backend) exit $h (layers_test_host.log)"; fi
  fi
}

# ---- suite -----------------------------------------------------------------------------
stage_suite() {
  local labels_re='^(slow|examples)$' device=cuda par
  if ((dry)); then device=host; fi
  labels_re="${GEEPS_GPU_CHECK_SUITE_EXCLUDE:-$labels_re}"
  awk -F'\t' -v re="$labels_re" '$4 !~ re { print ++n "\t" $0 }' "$bundle/tests.tsv" >"$work/suite.tsv"
  local total
  total=$(wc -l <"$work/suite.tsv")
  par=$(nproc 2>/dev/null || echo 2)
  ((par > 12)) && par=12
  mkdir -p "$logs/suite"
  : >"$work/suite.results"
  cat >"$work/run1.sh" <<'EOF'
#!/usr/bin/env bash
# One CTest test: its number, then name, binary, gtest filter, label,
# timeout (a tests.tsv line).
IFS=$'\t' read -r idx name binary filter label to <<<"$1"
log="$LOGS/suite/$idx-$(printf '%s' "$name" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-80).log"
t0=$(date +%s%N)
(cd "$WD" && exec timeout -k 5 "$to" env "LD_LIBRARY_PATH=$LDP" "$BIN/$binary" --gtest_filter="$filter" --gtest_also_run_disabled_tests) >"$log" 2>&1
rc=$?
if ((rc == 0)); then
  if grep -q '^\[  SKIPPED \]' "$log"; then r=skipped; else r=passed; fi
elif ((rc == 124 || rc == 137)); then r=timeout
else r=failed
fi
printf '%s\t%d\t%s\t%s\t%d\n' "$r" "$rc" "$name" "$label" $((($(date +%s%N) - t0) / 1000000)) >>"$RESULTS"
EOF
  echo "gpu-check: $total tests (labels not matching $labels_re), GEEPS_DEVICE=$device, $par at a time"
  LOGS="$logs" WD="$work/tests" BIN="$bin" RESULTS="$work/suite.results" LDP="$libpath" GEEPS_DEVICE="$device" \
    timeout -k 5 "$(box 170)" xargs -d '\n' -n 1 -P "$par" bash "$work/run1.sh" <"$work/suite.tsv"
  local xrc=$?
  cp "$work/suite.results" "$logs/suite-results.tsv"
  local passed skipped fails timeouts ran
  passed=$(count '^passed' "$work/suite.results")
  skipped=$(count '^skipped' "$work/suite.results")
  fails=$(count '^failed' "$work/suite.results")
  timeouts=$(count '^timeout' "$work/suite.results")
  ran=$(wc -l <"$work/suite.results")
  local bad skips
  skips="$(awk -F'\t' '$1 == "skipped" { printf "%s%s", (n++ ? ", " : ""), $3 }' "$work/suite.results" | cut -c1-600)"
  bad="$(awk -F'\t' '$1 == "failed" || $1 == "timeout" { printf "%s%s (%s)", (n++ ? ", " : ""), $3, $1 }' "$work/suite.results" | cut -c1-600)"
  echo "gpu-check: $passed passed, $skipped skipped, $fails failed, $timeouts timed out, $((total - ran)) not run${bad:+: $bad}"
  fig="{\"device\": \"$device\", \"tests\": $total, \"passed\": $passed, \"skipped\": $skipped, \"failed\": $fails, \"timed_out\": $timeouts, \"not_run\": $((total - ran)), \"failures\": $(json_str "$bad"), \"skipped_tests\": $(json_str "$skips")}"
  if ((fails == 0 && timeouts == 0 && ran == total && passed > 0)); then
    st=passed note="$passed passed, $skipped skipped of $total"
  else
    note="$fails failed, $timeouts timed out, $((total - ran)) not run (xargs exit $xrc) of $total${bad:+: $bad}"
  fi
}

# ---- sanitize ---------------------------------------------------------------------------
stage_sanitize() {
  local cs
  cs="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer \
    /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)"
  if ((dry)); then
    st=passed note="dry run: not run (needs a GPU); compute-sanitizer: ${cs:-not found}"
    fig="{\"compute_sanitizer\": $(json_str "${cs:-}")}"
    return
  fi
  if [[ -z "$cs" ]]; then note="compute-sanitizer not found"; return; fi
  local tool pids=() b
  b="$(box 150)"
  # API errors are not reported: tests provoke failed allocations on purpose
  # (FailedAllocationLeavesNoErrorBehind) and check every status themselves.
  for tool in memcheck racecheck synccheck; do
    timeout -k 5 "$b" env "LD_LIBRARY_PATH=$libpath" "$cs" --tool "$tool" --error-exitcode 86 \
      --report-api-errors no --print-limit 100 \
      "$bin/device_test" --gtest_filter='Cuda/*' >"$logs/sanitize_$tool.log" 2>&1 &
    pids+=($!)
  done
  local i=0 rc errs ok parts=() all=1 unavailable=0 f="{"
  for tool in memcheck racecheck synccheck; do
    wait "${pids[$i]}"
    rc=$?
    i=$((i + 1))
    local log="$logs/sanitize_$tool.log"
    errs="$(grep -oE '(ERROR SUMMARY|RACECHECK SUMMARY): [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')"
    ok=$(count '^\[       OK \] Cuda/' "$log")
    local s=passed
    if grep -qE 'Device not supported|Unable to find injection library|unsupported' "$log" && ((ok == 0)); then
      s=unavailable unavailable=1
    elif ((rc == 124 || rc == 137)); then s="timed out"
    elif ((rc != 0 || ok == 0)) || [[ "${errs:-x}" != 0 ]]; then s=failed
    fi
    [[ "$s" == passed ]] || all=0
    parts+=("$tool $s (exit $rc, ${errs:-?} errors, $ok tests)")
    f+="$([[ "$f" == "{" ]] || echo ", ")\"$tool\": {\"status\": \"$s\", \"exit\": $rc, \"errors\": $(num_or_null "${errs:-}"), \"tests\": $ok}"
    tail -2 "$log"
  done
  fig="$f}"
  note="$(printf '%s; ' "${parts[@]}")"
  note="${note%; }"
  if ((all)); then st=passed; elif ((unavailable)); then st=unavailable note="compute-sanitizer cannot use this GPU here: $note"; fi
}

# ---- fmnist ------------------------------------------------------------------------------
stage_fmnist() {
  local data="$bundle/data/fashion-mnist" log="$logs/fmnist_train.log" rc acc secs line
  if ((dry)); then
    # The GPU run's training on the host backend (a few seconds), held to
    # the same threshold; then the CUDA one, which must fail for want of a
    # GPU.
    run_box 120 "$bin/fmnist_train" --device host --epochs 1 --lr 0.01 --seed 1 \
      --data-dir "$data" >"$logs/fmnist_train_host.log" 2>&1
    rc=$?
    acc="$(sed -n 's/^final test accuracy: //p' "$logs/fmnist_train_host.log")"
    tail -2 "$logs/fmnist_train_host.log"
    run_box 60 "$bin/fmnist_train" --device cuda --epochs 1 --data-dir "$data" >"$log" 2>&1
    local crc=$?
    fig="{\"host_exit\": $rc, \"host_accuracy\": $(num_or_null "${acc:-}"), \"cuda_exit\": $crc}"
    note="host backend: exit $rc, accuracy ${acc:-none} (threshold $fmnist_min); cuda: exit $crc"
    if ((rc == 0)) && awk -v a="${acc:-0}" -v t="$fmnist_min" 'BEGIN { exit !(a >= t) }'; then
      st=failed  # as a GPU run without a GPU: expect_no_gpu turns it around
      expect_no_gpu "$log" "fmnist_train --device cuda"
    else
      note="host run failed or below the threshold: $note"
    fi
    return
  fi
  # One epoch of the cnn (2 workers, batch 64, lr 0.01, seed 1), without a
  # device memory budget and with 20 MB (local data 20.7 MB + parameters
  # 1.7 MB: the memory manager swaps, and the layers compute on swapped
  # buffers).
  local runs=(free:0 budget:20000000) r tag budget accs=() parts=() ok=1 f="{"
  for r in "${runs[@]}"; do
    tag="${r%%:*}" budget="${r#*:}" log="$logs/fmnist_train_$tag.log"
    run_box 90 "$bin/fmnist_train" --device cuda --epochs 1 --lr 0.01 --seed 1 \
      --device-memory-budget "$budget" --data-dir "$data" \
      --curve-csv "$logs/fmnist_curve_$tag.csv" >"$log" 2>&1
    rc=$?
    acc="$(sed -n 's/^final test accuracy: //p' "$log")"
    secs="$(sed -n 's/^training took \([0-9.]*\) s.*/\1/p' "$log")"
    line="$(grep -m1 '^nn: CUDA layer backend: ' "$log" | sed 's/^nn: CUDA layer backend: //')"
    tail -2 "$log"
    f+="$([[ "$f" == "{" ]] || echo ", ")\"$tag\": {\"budget\": $budget, \"exit\": $rc, \"accuracy\": $(num_or_null "${acc:-}"), \"train_seconds\": $(num_or_null "${secs:-}"), \"backend\": $(json_str "$line")}"
    if ((rc != 0)); then
      ok=0 parts+=("$tag: exit $rc ($(basename "$log")): $(grep -m1 'fmnist_train:' "$log")")
    elif [[ -z "$line" ]]; then
      ok=0 parts+=("$tag: the CUDA layer backend never started (no 'nn: CUDA layer backend' line)")
    elif awk -v a="${acc:-0}" -v t="$fmnist_min" 'BEGIN { exit !(a >= t) }'; then
      parts+=("$tag: accuracy $acc (${secs:-?} s)")
    else
      ok=0 parts+=("$tag: accuracy ${acc:-none} < $fmnist_min")
    fi
  done
  fig="$f, \"threshold\": $fmnist_min}"
  note="$(printf '%s; ' "${parts[@]}")(threshold $fmnist_min)"
  ((ok)) && st=passed
}

# ---- bench --------------------------------------------------------------------------------
stage_bench() {
  local log="$logs/gpu_bench.log" rc line
  run_box 120 "$bin/gpu_bench" --check --out "$logs/gpu_bench.json" \
    --min-indexed-ratio "$indexed_min" --min-overlap "$overlap_min" >"$log" 2>&1
  rc=$?
  [[ -f "$logs/gpu_bench.json" ]] && cp "$logs/gpu_bench.json" "$out/gpu_bench.json"
  line="$(grep -m1 '^gpu_bench: check: ' "$log" | sed 's/^gpu_bench: check: //')"
  grep -E '^(pinned|overlap|gpu_bench)' "$log"
  local g s o
  g="$(sed -n 's/.*gather_min_ratio=\([0-9.]*\).*/\1/p' <<<"$line")"
  s="$(sed -n 's/.*scatter_add_min_ratio=\([0-9.]*\).*/\1/p' <<<"$line")"
  o="$(sed -n 's/.*overlap_fraction=\([-0-9.]*\).*/\1/p' <<<"$line")"
  fig="{\"exit\": $rc, \"gather_min_ratio\": $(num_or_null "${g:-}"), \"scatter_add_min_ratio\": $(num_or_null "${s:-}"), \"overlap_fraction\": $(num_or_null "${o:-}"), \"min_indexed_ratio\": $indexed_min, \"min_overlap\": $overlap_min}"
  case "$rc" in
    0) st=passed note="$line" ;;
    3) note="figures below threshold: $line" ;;
    *) note="exit $rc (gpu_bench.log): $(grep -m1 'gpu_bench:' "$log")" ;;
  esac
  ((dry)) && expect_no_gpu "$log" "gpu_bench"
}

# ---- big-net --------------------------------------------------------------------------------
stage_big_net() {
  local log="$logs/big_net.log" rc rel sb su stall ident
  if ((dry)); then
    run_box 90 "$bin/big_net" --device host --iterations 8 --batch-size 64 \
      >"$logs/big_net_host.log" 2>&1
    local h=$?
    tail -2 "$logs/big_net_host.log"
    run_box 60 "$bin/big_net" --device cuda --iterations 8 >"$log" 2>&1
    rc=$?
    fig="{\"host_exit\": $h, \"cuda_exit\": $rc}"
    note="host: exit $h; cuda: exit $rc"
    if ((h == 0)); then expect_no_gpu "$log" "big_net --device cuda"; else note="host run failed: $note (big_net_host.log)"; fi
    return
  fi
  run_box 120 "$bin/big_net" --device cuda --copy-gbs 0 --oversubscription 4 \
    --iterations 200 --out "$logs/big_net.json" >"$log" 2>&1
  rc=$?
  tail -8 "$log"
  rel="$(sed -n 's/^relative throughput: //p' "$log")"
  sb="$(sed -n 's/^with the budget: *\([0-9.]*\) samples.*/\1/p' "$log")"
  su="$(sed -n 's/^without a budget: *\([0-9.]*\) samples.*/\1/p' "$log")"
  stall="$(sed -n 's/.*(fraction \([0-9.]*\)).*/\1/p' "$log" | head -1)"
  ident="$(sed -n 's/^weights bitwise identical to the run without a budget: //p' "$log")"
  fig="{\"exit\": $rc, \"relative_throughput\": $(num_or_null "${rel:-}"), \"goal\": $big_net_min, \"samples_per_second_budget\": $(num_or_null "${sb:-}"), \"samples_per_second_no_budget\": $(num_or_null "${su:-}"), \"stall_fraction\": $(num_or_null "${stall:-}"), \"weights_identical\": $(json_str "${ident:-}")}"
  if ((rc != 0)); then
    note="exit $rc (big_net.log): weights identical: ${ident:-?}; $(grep -m1 'big_net:' "$log")"
  elif awk -v r="${rel:-0}" -v t="$big_net_min" 'BEGIN { exit !(r >= t) }'; then
    st=passed note="relative throughput $rel >= $big_net_min at 4x oversubscription ($sb vs $su samples/s), weights identical"
  else
    note="relative throughput ${rel:-none} < $big_net_min at 4x oversubscription ($sb vs $su samples/s; stall fraction ${stall:-?}); weights identical: ${ident:-?}"
  fi
}

remove_links() {
  local l
  for l in "${links[@]}"; do [[ -L "$l" ]] && rm -f "$l"; done
}

main() {
  trap remove_links EXIT  # main runs in a subshell (| tee): its own trap
  echo "gpu-check: $( ((dry)) && echo 'dry run (no GPU needed)' || echo 'GPU run') of $bundle, budget $budget s, outputs to $out"
  echo "gpu-check: bundle: $(tr -d '\n' <"$bundle/bundle.json" | sed 's/  */ /g' | cut -c1-400)"
  run_stage env stage_env
  run_stage cuda-suite stage_cuda_suite
  run_stage layers-cuda stage_layers_cuda
  run_stage suite stage_suite
  run_stage fmnist stage_fmnist
  run_stage bench stage_bench
  run_stage big-net stage_big_net
  run_stage sanitize stage_sanitize  # last: slow, and not beside the timings
  write_json
  tar -czf "$out/gpu-check-logs.tar.gz" -C "$logs" . 2>/dev/null
  echo
  echo "=== gpu-check summary ($((SECONDS - start)) s in all; $out/gpu-check.json)"
  local i
  for i in "${!names[@]}"; do
    printf '  %-12s %-11s %4d s  %s\n' "${names[$i]}" "${statuses[$i]}" "${secs[$i]}" "${notes[$i]}"
  done
  if ((failed)); then
    echo "gpu-check: FAILED"
    return 1
  fi
  echo "gpu-check: all passed"
}

mkdir -p "$out"
rm -f "$out/gpu-check.log"
main 2>&1 | tee "$out/gpu-check.log"
exit "${PIPESTATUS[0]}"
