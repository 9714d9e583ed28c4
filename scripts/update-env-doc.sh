#!/usr/bin/env bash
# Regenerates docs/operations.md's table of GEEPS_* variables from the one
# list in src/common/tunables.cc, and docs/api.md's table of the Config
# fields they set (with the meanings of src/common/config_doc.cc);
# tests/tunables_test.cc fails while a doc and the list disagree.
#   bash scripts/update-env-doc.sh [path/to/geeps_launch]   (default: build/src/tools/geeps_launch)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
launch="${1:-$root/build/src/tools/geeps_launch}"
[[ -x "$launch" ]] || { echo "update-env-doc: no $launch; build first (bash scripts/build.sh)" >&2; exit 1; }
table="$(mktemp)"
trap 'rm -f "$table" "$root"/docs/*.md.new' EXIT
replace() {  # replace <doc> <marker> <--help-env option>: the lines between the markers
  local doc="$1" marker="$2"
  grep -q "^<!-- $marker:begin" "$doc" || { echo "update-env-doc: $doc has no $marker:begin marker" >&2; exit 1; }
  "$launch" "$3" > "$table"
  awk -v table="$table" -v begin="^<!-- $marker:begin" -v end="^<!-- $marker:end -->" '
    $0 ~ begin { print; while ((getline line < table) > 0) print line; skipping = 1; next }
    $0 ~ end { skipping = 0 }
    !skipping { print }
  ' "$doc" > "$doc.new"
  mv "$doc.new" "$doc"
  echo "update-env-doc: $(($(wc -l < "$table") - 2)) rows in ${doc#"$root"/}"
}
replace "$root/docs/operations.md" tunables --help-env=markdown
replace "$root/docs/api.md" config-table --help-env=config-markdown
