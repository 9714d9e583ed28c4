#!/usr/bin/env bash
# Installs the Debian packages that libgeeps needs to build, test and run its
# examples. Idempotent: returns at once when all of them are installed.
# As root it uses apt-get; otherwise sudo where there is one. Packages given
# as arguments are installed too (scripts/run-torch-example.sh adds
# libtorch-dev, which nothing else needs).
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ pkg-config
  libzmq3-dev cppzmq-dev            # ZeroMQ transport + its C++ header
  libsodium-dev                     # checkpoint MACs (also ZeroMQ's CURVE)
  libboost-program-options-dev      # the examples' command-line flags
  libgtest-dev libgmock-dev         # tests (GoogleTest, GoogleMock)
  libbenchmark-dev                  # microbenchmarks
  zlib1g-dev                        # reading the .gz data set
  libopenblas-dev                   # CPU BLAS: the example layers' GEMMs on the host backend
  gnuplot-nox                       # examples/fashion_mnist/plot_curve.sh (training curve PNG)
  dataset-fashion-mnist             # /usr/share/datasets/fashion-mnist
  openmpi-bin                       # mpirun, one way to launch multi-process jobs
  libopenmpi-dev                    # MPI_Allreduce, the scaling benchmark's baseline
  iproute2                          # ip, tc: scale_bench --netns (namespaces, veth, bridge, tbf)
  clang-14 libclang-rt-14-dev       # libFuzzer targets (scripts/fuzz.sh)
  clang-format                      # scripts/check-format.sh (.ci/run's format stage)
  clang-tidy                        # scripts/check-tidy.sh (.ci/run's tidy stage)
  patchelf xz-utils                 # scripts/gpu-bundle.sh (RUNPATHs, compressed libraries)
)
PACKAGES+=("$@")

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup.sh: no dpkg-query: this script expects Debian 12 (bookworm)." >&2
  echo "Install these packages (or their equivalents): ${PACKAGES[*]}" >&2
  exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup.sh: all ${#PACKAGES[@]} packages are installed."
  exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup.sh: not root and no sudo; as root, run:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "setup.sh: installing: ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
