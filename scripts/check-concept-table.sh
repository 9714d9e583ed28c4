#!/usr/bin/env bash
# Checks the rule "docs/architecture.md's concept -> file table names every
# file in src/ and nothing that is gone". Fails (status 1) listing (a) the
# files under src/ that the table does not name and (b) the paths the table
# names that do not exist; status 2 if the table cannot be found.
#   bash scripts/check-concept-table.sh [repository-root]
# The root defaults to this script's parent directory.
#
# The files under src/: inside a git checkout, `git ls-files --cached
# --others --exclude-standard src` (tracked files plus new ones not ignored)
# that exist on disk; otherwise `find src -type f`.
#
# The table: the first markdown table (its lines start with "|") after the
# heading line "## Concept -> file", read until the table's last line or the
# next heading. Only its second column (the file cell) is read, and in it
# only the `backticked` spans; prose around them is ignored. A span is:
#   * code, ignored: it has a character other than [A-Za-z0-9_./{},+-] (a
#     space, "::", "(", ...), or it has neither "/" nor "." and is not
#     lowercase (`Mutex`, `GEEPS_GUARDED_BY`);
#   * a path: `src/client/worker.h`. Braces expand: `worker.{h,cc}` is
#     worker.h and worker.cc. A path whose first component is a directory
#     at the repository root (src/, include/, ...) is from the root, and it
#     sets the cell's base directory (its own directory); any other path is
#     relative to that base (`step.cc` after `src/client/geeps.cc`);
#   * a directory, ending in "/": `host/` (relative to the base) names no
#     file, it only makes the spans after it relative to itself until the
#     next directory or root path;
#   * a stem, no extension: `buffer_pool` or `src/cluster/process` names
#     every file of that directory called stem.<ext> (.h, .cc, .cu, ...).
# The convention for new rows, written above the table: the full path from
# the repository root with braces for several extensions,
# `src/dir/name.{h,cc}`.
# shellcheck disable=SC2016  # the backticks in single quotes are literal
set -euo pipefail

root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$root"
doc=docs/architecture.md
heading='## Concept -> file'

if [[ ! -f "$doc" ]]; then
  echo "check-concept-table.sh: $root/$doc not found" >&2
  exit 2
fi
if [[ ! -d src ]]; then
  echo "check-concept-table.sh: $root/src not found" >&2
  exit 2
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The rows of the table, as "<line number>\t<file cell>", header and
# separator rows left out.
awk -v heading="$heading" '
  !found { if ($0 == heading || $0 == heading " ") found = 1; next }
  /^#/ { exit }
  /^\|/ {
    intable = 1
    rows++
    if (rows <= 2) next  # the header row and the |---| row
    n = split($0, cell, "|")
    if (n >= 3) print NR "\t" cell[3]
    next
  }
  intable { exit }
' "$doc" >"$tmp/rows"

if [[ ! -s "$tmp/rows" ]]; then
  echo "check-concept-table.sh: no table with rows after \"$heading\" in $doc" >&2
  exit 2
fi

# expand WORD: prints WORD with every {a,b,...} group expanded, one a line.
expand() {
  local word="$1"
  if [[ "$word" =~ ^(.*)\{([^{}]*)\}(.*)$ ]]; then
    local pre="${BASH_REMATCH[1]}" alts="${BASH_REMATCH[2]}" post="${BASH_REMATCH[3]}"
    local alt
    local -a list
    IFS=, read -r -a list <<<"$alts"
    for alt in "${list[@]}"; do expand "$pre$alt$post"; done
  else
    printf '%s\n' "$word"
  fi
}

: >"$tmp/named"
: >"$tmp/missing"
while IFS=$'\t' read -r line cell; do
  base=""
  cur=""
  while IFS= read -r span; do
    span="${span#\`}"
    span="${span%\`}"
    [[ -n "$span" ]] || continue
    if [[ ! "$span" =~ ^[A-Za-z0-9_./{},+-]+$ ]]; then continue; fi
    if [[ "$span" != */* && "$span" != *.* && ! "$span" =~ ^[a-z0-9_{},+-]+$ ]]; then
      continue
    fi
    while IFS= read -r word; do
      first="${word%%/*}"
      if [[ "$word" == */* && -n "$first" && -d "$first" && "$first" != . && "$first" != .. ]]; then
        path="$word"
        if [[ "$word" == */ ]]; then base="${word%/}"; else base="$(dirname "$word")"; fi
        cur="$base"
      elif [[ "$word" == */* ]]; then
        path="${base:+$base/}$word"
      else
        path="${cur:+$cur/}$word"
      fi
      if [[ "$path" == */ ]]; then
        path="${path%/}"
        if [[ -d "$path" ]]; then
          cur="$path"
        else
          printf 'line %s: `%s` -> %s/ (no such directory)\n' "$line" "$span" "$path" >>"$tmp/missing"
        fi
      elif [[ -f "$path" ]]; then
        printf '%s\n' "$path" >>"$tmp/named"
      elif [[ "${path##*/}" != *.* ]]; then
        # a stem: every file of its directory named stem.<ext>
        dir="$(dirname "$path")"
        stem="${path##*/}"
        hit=0
        for f in "$dir/$stem".*; do
          [[ -f "$f" ]] || continue
          rest="${f##*/}"
          rest="${rest#"$stem".}"
          [[ "$rest" == *.* ]] && continue
          printf '%s\n' "$f" >>"$tmp/named"
          hit=1
        done
        if [[ $hit == 0 ]]; then
          printf 'line %s: `%s` -> %s.* (no such file)\n' "$line" "$span" "$path" >>"$tmp/missing"
        fi
      else
        printf 'line %s: `%s` -> %s (no such file)\n' "$line" "$span" "$path" >>"$tmp/missing"
      fi
    done < <(expand "$span")
  done < <(grep -o '`[^`]*`' <<<"$cell" || true)
done <"$tmp/rows"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files --cached --others --exclude-standard -- src |
    while IFS= read -r f; do [[ -f "$f" ]] && printf '%s\n' "$f"; done
else
  find src -type f
fi | LC_ALL=C sort -u >"$tmp/src"
LC_ALL=C sort -u "$tmp/named" -o "$tmp/named"
LC_ALL=C comm -23 "$tmp/src" "$tmp/named" >"$tmp/unnamed"

total="$(wc -l <"$tmp/src" | tr -d ' ')"
if [[ -s "$tmp/unnamed" || -s "$tmp/missing" ]]; then
  echo "concept table ($doc, \"$heading\"): not complete" >&2
  if [[ -s "$tmp/unnamed" ]]; then
    echo "src files the table does not name ($(wc -l <"$tmp/unnamed" | tr -d ' ') of $total):" >&2
    sed 's/^/  /' "$tmp/unnamed" >&2
  fi
  if [[ -s "$tmp/missing" ]]; then
    echo "paths the table names that do not exist:" >&2
    sed 's/^/  /' "$tmp/missing" >&2
  fi
  echo "add a row (or extend one) in the file column, as \`src/dir/name.{h,cc}\`" >&2
  exit 1
fi
echo "concept table: $total files in src/, all named"
