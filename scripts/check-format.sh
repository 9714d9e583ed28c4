#!/usr/bin/env bash
# Fails (status 1) when clang-format (.clang-format, Debian 12's version 14)
# would change any tracked C++ or CUDA file, and names each such file; run
# `bash scripts/check-format.sh --fix` to format them in place. Lines that
# must stay as written (code shown verbatim in docs/) sit between
# `// clang-format off` and `// clang-format on`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh >/dev/null
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  echo "check-format.sh: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check-format.sh: clang-format would change ${#bad[@]} of ${#files[@]} files:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix with: bash scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format.sh: all ${#files[@]} files are formatted ($(clang-format --version))"
