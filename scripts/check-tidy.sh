#!/usr/bin/env bash
# Runs clang-tidy with the agreed checks (.clang-tidy; every finding is an
# error) over the C++ sources of the library, the examples, the benchmarks
# and the tests, as built in a build folder (its compile_commands.json:
# scripts/build.sh writes one). CUDA files and the fuzz targets (built with
# clang in build-fuzz/) are left out. Two files at a time; about 3 minutes
# on 2 cores. Fails (status 1) naming each finding.
#   bash scripts/check-tidy.sh [--build-dir build]
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/compile-db.sh
compile_db check-tidy.sh "$@"
bash scripts/setup.sh >/dev/null
# The "file" entries of the database (CMake writes absolute paths), as paths
# relative to the repository.
mapfile -t files < <(sed -n 's|^ *"file": "\(.*\)",\{0,1\}$|\1|p' "$db" |
  sed "s|^$PWD/||" | grep -E '^(src|examples|benchmarks|tests)/.*\.cc$' |
  grep -v '^tests/fuzz/' | sort -u)
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
printf '%s\n' "${files[@]}" | xargs -P 2 -n 4 clang-tidy -p "$build_dir" --quiet >"$log" 2>&1 || status=$?
findings="$(grep -E '(warning|error): ' "$log" | sort -u || true)"
if [[ $status -ne 0 || -n "$findings" ]]; then
  echo "check-tidy.sh: clang-tidy found (of ${#files[@]} files):" >&2
  if [[ -n "$findings" ]]; then echo "$findings" >&2; else tail -20 "$log" >&2; fi
  exit 1
fi
echo "check-tidy.sh: ${#files[@]} files, no finding ($(clang-tidy --version | grep -m1 -o 'version [0-9.]*'))"
