#!/usr/bin/env bash
# Builds, on this machine, everything that scripts/gpu-check.sh runs on the
# GPU machine, into one self-contained, git-ignored folder (default
# gpu-bundle/, at most 48 MiB) that travels with the working tree:
#
#   bin/    the CUDA conformance suite (device_test), layers_cuda_test, every
#           other test binary of the CTest suite, the helpers the tests
#           start (multiproc_worker, geeps_launch, geeps_keygen,
#           softmax_fmnist), fmnist_train, big_net, gpu_bench and
#           geeps_cuda_probe (the env stage's driver check); stripped,
#           RUNPATH $ORIGIN/../lib. Binaries over 64 KiB are stored
#           xz-compressed (*.xz); gpu-check.sh unpacks them all into a
#           scratch folder
#   lib/    libgeeps and every shared library those need that the GPU
#           machine lacks (found with ldd: ZeroMQ and what it pulls,
#           OpenBLAS with libgfortran and libquadmath, Boost.Program_options,
#           zlib, ...), RUNPATH $ORIGIN; libstdc++ and libgcc_s in lib/gcc/,
#           used only where the machine's own are too old. Never glibc
#           (libc, libm, libpthread, libdl, librt, libresolv, ld-linux), the
#           driver (libcuda, libnvidia-*), nor cuBLAS and cuDNN: cuBLAS alone
#           is 600 MB; gpu-check.sh finds them there (the CUDA toolkit or the
#           PyTorch wheels). cudart is static in the binaries. Libraries over
#           1 MiB (OpenBLAS, libgeeps, libgeeps_internal, libgfortran) are
#           stored xz-compressed too
#   lib/cudnn-stub/libcudnn.so.9
#           a stand-in with the cuDNN symbols the binaries import, whose
#           cudnnGetVersion() returns 0: gpu-check.sh puts it on the library
#           path only where the machine has no cuDNN at all, so that the
#           binaries start and the layer backend falls back to its own
#           kernels (examples/layers/cuda_backend.cu)
#   data/fashion-mnist/
#           the first 10000 training and 2000 test images of Fashion-MNIST
#           (idx, gzip), for one epoch of fmnist_train --device cuda
#   share/src/
#           the source files tests read (docs/api.md, docs/operations.md,
#           src/'s sources, tests/consumer/trainer.h, tests/fuzz's corpus
#           and regressions),
#           under their paths in the tree: gpu-check.sh points
#           GEEPS_TEST_SOURCE_DIR there, and GEEPS_TEST_BIN_DIR at the
#           binaries (tests/test_paths.h)
#   tests.tsv   every CTest test of the bundled binaries: name, binary,
#               gtest filter, label, timeout (from gtest_discover_tests)
#   bundle.json what was built, from which commit, with which libraries
#   gpu-check.sh  a copy of scripts/gpu-check.sh
#
# The tests find the programs they start and the files they read through
# GEEPS_TEST_BIN_DIR and GEEPS_TEST_SOURCE_DIR (tests/test_paths.h), not
# through this machine's paths: scripts/gpu-dry-run.sh (CI) runs the bundle
# with the source and build folders hidden, so a test that still reads one
# fails there.
#
# By default it reuses an existing build folder (--build-dir, default build/:
# CI's test stage leaves a RelWithDebInfo build with the CUDA architectures
# 90-real;90-virtual there) and only brings it up to date; stripping the
# copies removes what RelWithDebInfo adds. --release configures and builds a
# separate Release folder (build-gpu-release/, GEEPS_WITH_CUDA=ON) instead.
#
#   bash scripts/gpu-bundle.sh [--build-dir DIR | --release] [--no-build]
#        [--out DIR] [--data-dir DIR] [--max-mib N] [--jobs N]
# --no-build bundles the folder as it is, without bringing it up to date.
#
# Needs: strip, patchelf, objdump, nm, ldd, cc, xz, gzip (scripts/setup.sh). Prints the bundle's size; exits non-zero if it is over
# --max-mib (48).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd -P)"

build_dir="${GEEPS_BUNDLE_BUILD_DIR:-}"
out="${GEEPS_BUNDLE_DIR:-gpu-bundle}"
data_src="${FMNIST_SOURCE_DIR:-/usr/share/datasets/fashion-mnist}"
release=0
no_build=0
max_mib=48
jobs="${GEEPS_JOBS:-2}"
train_n=10000
test_n=2000
arch="${GEEPS_CUDA_ARCHITECTURES:-90-real;90-virtual}"

die() { echo "gpu-bundle: $*" >&2; exit 1; }
trap 'echo "gpu-bundle: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
while (($#)); do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --release) release=1; shift ;;
    --no-build) no_build=1; shift ;;
    --out) out="$2"; shift 2 ;;
    --data-dir) data_src="$2"; shift 2 ;;
    --max-mib) max_mib="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (try --help)" ;;
  esac
done
for tool in strip patchelf objdump nm ldd cc xz gzip cmake; do
  command -v "$tool" >/dev/null || die "$tool not found (bash scripts/setup.sh installs it)"
done
start=$SECONDS

# ---- 1. the build -------------------------------------------------------------
if ((release)); then
  build_dir="${build_dir:-build-gpu-release}"
  echo "gpu-bundle: Release build in $build_dir (CUDA architectures $arch)"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGEEPS_WITH_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$arch" \
    -DGEEPS_BUILD_TESTS=ON -DGEEPS_BUILD_BENCHMARKS=ON -DGEEPS_BUILD_EXAMPLES=ON \
    >/dev/null
else
  build_dir="${build_dir:-build}"
  [[ -f "$build_dir/CMakeCache.txt" ]] ||
    die "$build_dir is not a configured build folder (give --build-dir, or --release)"
fi
cache="$build_dir/CMakeCache.txt"
cache_get() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -1; }
built_arch="$(cache_get CMAKE_CUDA_ARCHITECTURES)"
[[ ";$built_arch;" == *";90-real;"* || ";$built_arch;" == *";90;"* ]] ||
  die "$build_dir is built for CUDA architectures '$built_arch', without sm_90 machine code (the H200 needs 90-real)"
[[ -z "$(cache_get GEEPS_SANITIZE)" ]] ||
  die "$build_dir is a sanitizer build (GEEPS_SANITIZE=$(cache_get GEEPS_SANITIZE))"
# Brings the folder up to date (nothing to do right after CI's test stage),
# unless --no-build: then it bundles what is there.
if ((!no_build)); then
  cmake --build "$build_dir" -j "$jobs" >/dev/null ||
    die "building $build_dir failed (run: cmake --build $build_dir)"
fi
build_abs="$(cd "$build_dir" && pwd -P)"
for need in tests/device_test tests/layers_cuda_test benchmarks/gpu_bench \
            examples/fashion_mnist/fmnist_train examples/fashion_mnist/big_net \
            src/tools/geeps_cuda_probe src/libgeeps.so.0; do
  [[ -e "$build_abs/$need" ]] || die "$build_dir/$need is missing: the bundle needs a build with the CUDA backend, tests, benchmarks and examples (GEEPS_WITH_CUDA=ON, GEEPS_BUILD_TESTS=ON, GEEPS_BUILD_BENCHMARKS=ON, OpenBLAS, Boost)"
done

# ---- 2. binaries ----------------------------------------------------------------
tmp="$out.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"/{bin,lib,data/fashion-mnist,share/src}
declare -a origins=()  # build-relative path of every bundled binary
tests=()
for f in "$build_abs"/tests/*"[1]_tests.cmake"; do
  name="$(basename "$f" "[1]_tests.cmake")"
  # The libtorch tests stay out: libtorch alone is several times the
  # bundle's 48 MiB, and its Debian build has no CUDA.
  [[ "$name" == torch_* ]] && continue
  if [[ -x "$build_abs/tests/$name" ]]; then tests+=("$name"); fi
done
((${#tests[@]} > 0)) || die "no gtest_discover_tests files in $build_dir/tests"
for t in "${tests[@]}"; do origins+=("tests/$t"); done
for extra in tests/multiproc_worker src/tools/geeps_launch src/tools/geeps_keygen \
             src/tools/geeps_cuda_probe examples/fashion_mnist/softmax_fmnist \
             examples/fashion_mnist/fmnist_train examples/fashion_mnist/big_net \
             benchmarks/gpu_bench; do
  if [[ -x "$build_abs/$extra" ]]; then origins+=("$extra"); fi
done
for rel in "${origins[@]}"; do
  name="$(basename "$rel")"
  strip --strip-all -o "$tmp/bin/$name" "$build_abs/$rel"
  patchelf --set-rpath '$ORIGIN/../lib' "$tmp/bin/$name"
done
# The source files tests read (tests/test_paths.h: GEEPS_TEST_SOURCE_DIR).
mkdir -p "$tmp/share/src/docs" "$tmp/share/src/tests/consumer" "$tmp/share/src/tests/fuzz"
cp docs/api.md docs/operations.md "$tmp/share/src/docs/"
# tunables_test checks the GEEPS_* variables the library's sources name.
find src -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | while read -r f; do
  mkdir -p "$tmp/share/src/$(dirname "$f")"
  cp "$f" "$tmp/share/src/$f"
done
cp tests/consumer/trainer.h "$tmp/share/src/tests/consumer/"
cp -r tests/fuzz/corpus tests/fuzz/regressions "$tmp/share/src/tests/fuzz/"

# ---- 3. shared libraries (ldd on the build's own files, whose RUNPATHs
# name where they were found at link time) ---------------------------------------
libgeeps="$(readlink -f "$build_abs/src/libgeeps.so.0")"
strip --strip-unneeded -o "$tmp/lib/libgeeps.so.0" "$libgeeps"
# glibc's parts, the driver, and the CUDA libraries gpu-check.sh finds there.
is_base() {
  case "$1" in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|\
    librt.so.*|libresolv.so.*|libutil.so.*|libanl.so.*) return 0 ;;
  esac
  return 1
}
is_gpu_side() {
  case "$1" in
    libcuda.so.*|libnvidia-*|libcublas.so.*|libcublasLt.so.*|libcudnn*.so.*|\
    libcudart.so.*|libnvrtc*.so.*|libnvJitLink.so.*) return 0 ;;
  esac
  return 1
}
declare -A copied=() gpu_side=()
missing=()
for f in "${origins[@]/#/$build_abs/}" "$libgeeps"; do
  while read -r soname arrow path _; do
    [[ "$arrow" == "=>" ]] || continue   # ld-linux and vdso lines
    if is_base "$soname"; then continue; fi
    if is_gpu_side "$soname"; then gpu_side[$soname]=1; continue; fi
    if [[ "$soname" == libgeeps.so.* ]]; then continue; fi
    if [[ "$path" == "not" ]]; then missing+=("$soname (needed by ${f#"$build_abs"/})"); continue; fi
    if [[ -n "${copied[$soname]:-}" ]]; then continue; fi
    cp -L "$path" "$tmp/lib/$soname"
    chmod u+w "$tmp/lib/$soname"
    strip --strip-unneeded "$tmp/lib/$soname" 2>/dev/null || true
    copied[$soname]="$path"
  done < <(LD_LIBRARY_PATH="$build_abs/src" ldd "$f")
done
((${#missing[@]} == 0)) || die "libraries not found on this machine: ${missing[*]}"
for l in "$tmp"/lib/*.so*; do patchelf --set-rpath '$ORIGIN' "$l"; done
# libstdc++ and libgcc_s apart, in lib/gcc/: gpu-check.sh uses the GPU
# machine's own unless they lack a version the bundle needs (gcc.needs);
# Debian 12's libstdc++ needs glibc 2.36, the rest of the bundle less.
mkdir -p "$tmp/lib/gcc"
for l in "$tmp"/lib/libstdc++.so.* "$tmp"/lib/libgcc_s.so.*; do
  if [[ -e "$l" ]]; then mv "$l" "$tmp/lib/gcc/"; fi
done
objdump -T "$tmp"/bin/* "$tmp"/lib/*.so* 2>/dev/null |
  grep -oE '\b(GLIBCXX|CXXABI|GCC)_[0-9.]+\b' | sort -uV >"$tmp/gcc.needs"

# The stand-in cuDNN (see the header), when the binaries import cuDNN.
mapfile -t dnn_syms < <(nm -D --undefined-only "$tmp"/bin/* 2>/dev/null |
  awk '{print $NF}' | sed 's/@.*//' | grep '^cudnn' | sort -u)
if ((${#dnn_syms[@]} > 0)); then
  mkdir -p "$tmp/lib/cudnn-stub" "$tmp/stub.build"
  {
    echo '/* Generated by scripts/gpu-bundle.sh: a stand-in for a missing cuDNN. */'
    echo '#include <stddef.h>'
    for s in "${dnn_syms[@]}"; do
      case "$s" in
        cudnnGetVersion|cudnnGetCudartVersion|cudnnGetMaxDeviceVersion)
          echo "size_t $s(void) { return 0; }" ;;
        cudnnGetErrorString)
          echo "const char* $s(void) { return \"no cuDNN on this machine (the gpu-bundle stand-in)\"; }" ;;
        *) echo "int $s(void) { return 1008; /* CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED */ }" ;;
      esac
    done
  } >"$tmp/stub.build/stub.c"
  # The binaries ask for the symbols at version node libcudnn.so.9.
  echo 'libcudnn.so.9 { global: *; };' >"$tmp/stub.build/stub.map"
  cc -shared -fPIC -O1 -o "$tmp/lib/cudnn-stub/libcudnn.so.9" \
    -Wl,-soname,libcudnn.so.9 "-Wl,--version-script=$tmp/stub.build/stub.map" \
    "$tmp/stub.build/stub.c"
  rm -rf "$tmp/stub.build"
fi

# The newest glibc symbol version any bundled file needs (gpu-check.sh
# compares it with the machine's glibc).
glibc_of() {
  objdump -T "$@" 2>/dev/null | grep -oE 'GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?' |
    sed 's/GLIBC_//' | sort -uV | tail -1
}
glibc_needed="$(glibc_of "$tmp"/bin/* "$tmp"/lib/*.so*)"
glibc_needed_gcc="$(glibc_of "$tmp"/bin/* "$tmp"/lib/*.so* "$tmp"/lib/gcc/*.so*)"

# Big files travel compressed: libraries over 1 MiB (OpenBLAS: 36 MB -> 4 MB;
# libgeeps and libgeeps_internal about 2 MB each -> under 1 MB), binaries over
# 64 KiB (the test binaries, 21 MiB -> about 5).
compressed=()
for l in "$tmp"/lib/*.so*; do
  if (($(stat -c %s "$l") > 1048576)); then
    xz -T0 -9 "$l"
    compressed+=("${l#"$tmp"/}")
  fi
done
for l in "$tmp"/bin/*; do
  if (($(stat -c %s "$l") > 65536)); then
    xz -T0 -6 "$l"
    compressed+=("${l#"$tmp"/}")
  fi
done

# ---- 4. the CTest suite as a table: name, binary, filter, label, timeout ---------
for t in "${tests[@]}"; do
  awk -v bin="$t" '
    /^add_test\(\[=\[/ {
      s = $0; sub(/^add_test\(\[=\[/, "", s); name = s; sub(/\]=\].*$/, "", name); sub(/  # .*$/, "", name)
      f = s; sub(/^.*\[==\[--gtest_filter=/, "", f); sub(/\]==\].*$/, "", f)
      filter[name] = f; order[++n] = name
    }
    /^set_tests_properties\(\[=\[/ {
      s = $0; sub(/^set_tests_properties\(\[=\[/, "", s); name = s; sub(/\]=\].*$/, "", name); sub(/  # .*$/, "", name)
      l = s; if (sub(/^.* LABELS /, "", l)) { sub(/ .*$/, "", l); sub(/\)$/, "", l) } else l = ""
      to = s; if (sub(/^.* TIMEOUT /, "", to)) { sub(/[ )].*$/, "", to) } else to = 60
      label[name] = l; timeout[name] = to
    }
    END { for (i = 1; i <= n; ++i) { k = order[i]; printf "%s\t%s\t%s\t%s\t%s\n", k, bin, filter[k], label[k], timeout[k] } }
  ' "$build_abs/tests/$t[1]_tests.cmake"
done >"$tmp/tests.tsv"

# ---- 5. the Fashion-MNIST subset ---------------------------------------------------
be32() {  # a big-endian uint32
  printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) \
    $(($1 >> 8 & 255)) $(($1 & 255)))"
}
subset() {  # subset <split> <images wanted>
  local split="$1" want="$2" kind hdr item count n raw
  for kind in images-idx3 labels-idx1; do
    local src="$data_src/$split-$kind-ubyte.gz" dst="$tmp/data/fashion-mnist/$split-$kind-ubyte.gz"
    [[ -r "$src" ]] || die "$src not found (install dataset-fashion-mnist, or give --data-dir)"
    raw="$(mktemp)"
    gzip -dc "$src" >"$raw"
    count=$(od -An -tu1 -j4 -N4 "$raw" | awk '{print $1*16777216 + $2*65536 + $3*256 + $4}')
    if [[ "$kind" == images-idx3 ]]; then
      hdr=16
      item=$(od -An -tu1 -j8 -N8 "$raw" | awk '{print ($1*16777216 + $2*65536 + $3*256 + $4) * ($5*16777216 + $6*65536 + $7*256 + $8)}')
    else
      hdr=8 item=1
    fi
    n=$((want < count ? want : count))
    {
      head -c 4 "$raw"
      be32 "$n"
      dd if="$raw" bs=65536 iflag=skip_bytes,count_bytes skip=8 count=$((hdr - 8)) status=none
      dd if="$raw" bs=1M iflag=skip_bytes,count_bytes skip="$hdr" count=$((n * item)) status=none
    } | gzip -9n >"$dst"
    rm -f "$raw"
  done
}
subset train "$train_n"
subset t10k "$test_n"

# ---- 6. the check script, the manifest ---------------------------------------------
cp scripts/gpu-check.sh "$tmp/gpu-check.sh"
chmod +x "$tmp/gpu-check.sh"
header_num() { sed -n "s/^#define $2 \([0-9]*\).*/\1/p" "$1" 2>/dev/null | head -1 || true; }
nvcc_path="$(cache_get CMAKE_CUDA_COMPILER)"
cuda_inc="$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")/include"
cudnn_inc="$(cache_get GEEPS_CUDNN_INCLUDE_DIR)"
cublas_built="$(header_num "$cuda_inc/cublas_api.h" CUBLAS_VER_MAJOR).$(header_num "$cuda_inc/cublas_api.h" CUBLAS_VER_MINOR).$(header_num "$cuda_inc/cublas_api.h" CUBLAS_VER_PATCH)"
cudnn_built=""
if [[ -n "$cudnn_inc" && -f "$cudnn_inc/cudnn_version.h" ]]; then
  cudnn_built="$(header_num "$cudnn_inc/cudnn_version.h" CUDNN_MAJOR).$(header_num "$cudnn_inc/cudnn_version.h" CUDNN_MINOR).$(header_num "$cudnn_inc/cudnn_version.h" CUDNN_PATCHLEVEL)"
fi
nvcc_version="$("$nvcc_path" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
dirty=false
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then dirty=true; fi
join_json() { local s="" x; for x in "$@"; do s+="${s:+, }\"$x\""; done; printf '[%s]' "$s"; }
total_bytes="$(du -sb "$tmp" | cut -f1)"
cat >"$tmp/bundle.json" <<EOF
{
  "created": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "commit": "$commit",
  "dirty": $dirty,
  "build_dir": "$build_abs",
  "source_dir": "$repo",
  "build_type": "$(cache_get CMAKE_BUILD_TYPE)",
  "cuda_architectures": "$built_arch",
  "nvcc": "$nvcc_version",
  "cublas_built": "$cublas_built",
  "cudnn_built": "$cudnn_built",
  "glibc_needed": "$glibc_needed",
  "glibc_needed_with_gcc_libs": "$glibc_needed_gcc",
  "needs_from_gpu_machine": $(join_json "${!gpu_side[@]}"),
  "bundled_libraries": $(join_json $(cd "$tmp/lib" && ls -1 | grep -v '^cudnn-stub$\|^gcc$') $(cd "$tmp/lib/gcc" && ls -1 | sed 's|^|gcc/|')),
  "compressed": $(join_json "${compressed[@]}"),
  "binaries": $(join_json $(ls -1 "$tmp/bin" | sed 's/\.xz$//')),
  "tests": $(wc -l <"$tmp/tests.tsv"),
  "fashion_mnist": {"train": $train_n, "test": $test_n},
  "bytes": $total_bytes
}
EOF
cat >"$tmp/README" <<'EOF'
libgeeps GPU bundle (scripts/gpu-bundle.sh; docs/cuda.md, "The GPU bundle").
On a machine with an NVIDIA GPU, from any folder:  bash gpu-check.sh
Without a GPU (CI runs it through scripts/gpu-dry-run.sh): bash gpu-check.sh --dry-run
EOF

rm -rf "$out"
mv "$tmp" "$out"

# ---- 7. size ----------------------------------------------------------------------
total_bytes="$(du -sb "$out" | cut -f1)"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "gpu-bundle: $out: $(mib "$total_bytes") MiB (limit $max_mib MiB) in $((SECONDS - start)) s:" \
  "bin $(mib "$(du -sb "$out/bin" | cut -f1)")," \
  "lib $(mib "$(du -sb "$out/lib" | cut -f1)")," \
  "data $(mib "$(du -sb "$out/data" | cut -f1)")," \
  "share $(mib "$(du -sb "$out/share" | cut -f1)") MiB;" \
  "$(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | grep -c '\.so') libraries, $(wc -l <"$out/tests.tsv") tests;" \
  "from $build_dir ($(cache_get CMAKE_BUILD_TYPE), CUDA $built_arch)"
echo "gpu-bundle: cuBLAS ${cublas_built}, cuDNN ${cudnn_built:-none} at build time; the GPU machine provides: ${!gpu_side[*]}"
if ((total_bytes > max_mib * 1048576)); then
  die "$out is $(mib "$total_bytes") MiB, over the $max_mib MiB limit"
fi
