#!/usr/bin/env bash
# Regenerates docs/operations.md's table of GEEPS_* variables from the one
# list in src/common/tunables.cc (tests/tunables_test.cc fails while the doc
# and the list disagree).
#   bash scripts/update-env-doc.sh [path/to/geeps_launch]   (default: build/src/tools/geeps_launch)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
launch="${1:-$root/build/src/tools/geeps_launch}"
doc="$root/docs/operations.md"
[[ -x "$launch" ]] || { echo "update-env-doc: no $launch; build first (bash scripts/build.sh)" >&2; exit 1; }
grep -q '^<!-- tunables:begin' "$doc" || { echo "update-env-doc: $doc has no tunables:begin marker" >&2; exit 1; }
table="$(mktemp)"
trap 'rm -f "$table" "$doc.new"' EXIT
"$launch" --help-env=markdown > "$table"
awk -v table="$table" '
  /^<!-- tunables:begin/ { print; while ((getline line < table) > 0) print line; skipping = 1; next }
  /^<!-- tunables:end -->/ { skipping = 0 }
  !skipping { print }
' "$doc" > "$doc.new"
mv "$doc.new" "$doc"
echo "update-env-doc: $(grep -c '^| `GEEPS_' "$doc") variables in docs/operations.md"
