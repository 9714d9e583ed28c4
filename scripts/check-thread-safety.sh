#!/usr/bin/env bash
# Clang's thread-safety analysis over the library: every src/**/*.cc of a
# build's compile_commands.json (scripts/build.sh writes one), parsed with
# clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety and the flags
# that build used (GCC-only ones dropped), two files at a time; about a
# minute on 2 cores. It checks the lock annotations of src/common/mutex.h:
# a GEEPS_GUARDED_BY member touched without its mutex, a GEEPS_REQUIRES
# function called without it, a lock not released, ... Fails (status 1)
# naming each finding.
#   bash scripts/check-thread-safety.sh [--build-dir build]
#   bash scripts/check-thread-safety.sh --self-test
# --self-test checks the check: clang++ must reject
# tests/thread_safety_bad.cc (a guarded member touched without its lock) and
# accept its correct twin, both with the same flags.
# GEEPS_TSA_CXX names the compiler (default clang++-14, else clang++).
set -euo pipefail
cd "$(dirname "$0")/.."

cxx="${GEEPS_TSA_CXX:-}"
if [[ -z "$cxx" ]]; then
  if command -v clang++-14 >/dev/null 2>&1; then cxx=clang++-14; else cxx=clang++; fi
fi
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "check-thread-safety.sh: $cxx not found (scripts/setup.sh installs clang-14)" >&2
  exit 2
fi
tsa_flags=(-fsyntax-only -ferror-limit=0 -Wthread-safety -Werror=thread-safety)

if [[ "${1:-}" == "--self-test" ]]; then
  log="$(mktemp)"
  trap 'rm -f "$log"' EXIT
  common=(-std=c++17 -Isrc "${tsa_flags[@]}" tests/thread_safety_bad.cc)
  if ! "$cxx" "${common[@]}" -DGEEPS_TSA_CORRECT >"$log" 2>&1; then
    echo "check-thread-safety.sh --self-test: the correct snippet fails:" >&2
    cat "$log" >&2
    exit 1
  fi
  if "$cxx" "${common[@]}" >"$log" 2>&1; then
    echo "check-thread-safety.sh --self-test: clang accepted tests/thread_safety_bad.cc" >&2
    exit 1
  fi
  # Each misuse the snippet marks "// expect: <text>" must be reported.
  missing=0
  while IFS= read -r want; do
    if ! grep -qF -- "$want" "$log"; then
      echo "check-thread-safety.sh --self-test: not reported: $want" >&2
      missing=1
    fi
  done < <(sed -n 's|.*// expect: \(.*\)$|\1|p' tests/thread_safety_bad.cc)
  if [[ $missing -ne 0 ]]; then
    cat "$log" >&2
    exit 1
  fi
  echo "check-thread-safety.sh --self-test: clang reports the known misuses" \
    "($(grep -c 'error: ' "$log") errors), accepts the correct twin"
  exit 0
fi

source scripts/compile-db.sh
compile_db check-thread-safety.sh "$@"

# One line per src/**/*.cc entry: the compile command, the compiler and the
# output, dependency and source arguments dropped, JSON escapes undone
# (CMake writes "command" before "file" in each entry).
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sed -n -e 's|^ *"command": "\(.*\)",$|C\1|p' -e 's|^ *"file": "\(.*\)",\{0,1\}$|F\1|p' "$db" |
  awk -v root="$PWD/" '
    /^C/ { cmd = substr($0, 2); next }
    /^F/ {
      f = substr($0, 2)
      if (index(f, root) == 1) f = substr(f, length(root) + 1)
      if (f ~ /^src\/.*\.cc$/ && !seen[f]++) print f "\t" cmd
    }' | sort >"$work/entries"
count="$(wc -l <"$work/entries")"
if [[ "$count" -eq 0 ]]; then
  echo "check-thread-safety.sh: no src/ file in $db" >&2
  exit 2
fi

# Runs clang on one entry: "<file>\t<command>".
check_one() {
  local file="${1%%$'\t'*}" cmd="${1#*$'\t'}"
  cmd="${cmd//\\\\/\\}"
  cmd="${cmd//\\\"/\"}"
  local -a words args=()
  eval "words=($cmd)"
  local i=1 w
  while ((i < ${#words[@]})); do
    w="${words[i]}"
    case "$w" in
      -o | -MT | -MF) i=$((i + 2)); continue ;;
      -c | -MD | -MMD | "$PWD_ROOT/$file" | "$file") ;;
      # GCC-only flags clang rejects or warns about.
      -fno-semantic-interposition | -fconcepts* | -Wno-maybe-uninitialized) ;;
      *) args+=("$w") ;;
    esac
    i=$((i + 1))
  done
  # One write per file, so that the two parallel runs' lines do not mix.
  local out
  out="$(cd "$(dirname "$db")" && "$cxx" "${args[@]}" "${tsa_flags[@]}" "$PWD_ROOT/$file" 2>&1)" ||
    true
  if [[ -n "$out" ]]; then printf '%s\n' "$out"; fi
}
export -f check_one
export cxx db PWD_ROOT="$PWD"
export tsa_flags_str="${tsa_flags[*]}"

start=$SECONDS
# check_one cannot see the array; rebuild it from the string.
tr '\n' '\0' <"$work/entries" |
  xargs -0 -P 2 -n 1 bash -c 'tsa_flags=($tsa_flags_str); check_one "$1"' _ >"$work/log"
# Errors (the analysis' findings, and anything clang cannot compile); other
# warnings are the tidy and compiler stages' business.
findings="$(grep -E 'error: ' "$work/log" | sort -u || true)"
if [[ -n "$findings" ]]; then
  echo "check-thread-safety.sh: clang's thread-safety analysis found (of $count files):" >&2
  echo "$findings" >&2
  exit 1
fi
echo "check-thread-safety.sh: $count files, no finding in $((SECONDS - start)) s" \
  "($("$cxx" --version | grep -m1 -o 'version [0-9.]*'))"
