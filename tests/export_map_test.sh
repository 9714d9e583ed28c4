#!/usr/bin/env bash
# The shared library's version script (src/libgeeps.map) and the public
# headers' GEEPS_EXPORT marks name the same things, and each of them is
# exported by the built libgeeps.so:
#   - every class or struct marked GEEPS_EXPORT in include/geeps has a line
#     "geeps::Name::*;" in the map, and every free function so marked a line
#     that starts with "geeps::Name*" or quotes "geeps::Name(...)";
#   - every name in the map is marked GEEPS_EXPORT in some header;
#   - the library's dynamic symbol table (nm -DC) defines each function, and
#     nothing of the internal namespaces.
# Fails naming each difference.
#   bash tests/export_map_test.sh <source dir> <path of libgeeps.so>
set -euo pipefail
src="$1"
lib="$2"
map="$src/src/libgeeps.map"
status=0

# Names marked in the headers.
mapfile -t classes < <(grep -hoE '(class|struct) (\[\[[a-z]+\]\] )?GEEPS_EXPORT [A-Za-z_]+' \
  "$src"/include/geeps/*.h | awk '{print $NF}' | sort -u)
mapfile -t functions < <(grep -hE '^GEEPS_EXPORT ' "$src"/include/geeps/*.h |
  sed -E 's/\(.*//' | awk '{print $NF}' | sort -u)
# Names in the map's global section.
# The first name of each line (a quoted overload names argument types too).
mapfile -t mapped < <(sed -n '/global:/,/local:/p' "$map" |
  sed -nE 's/^ *"?geeps::([A-Za-z_]+).*/\1/p' | sort -u)

if [[ ${#classes[@]} -eq 0 || ${#functions[@]} -eq 0 || ${#mapped[@]} -eq 0 ]]; then
  echo "export_map_test: found ${#classes[@]} classes, ${#functions[@]} functions and" \
    "${#mapped[@]} map names: the patterns no longer match the sources" >&2
  exit 1
fi
for c in "${classes[@]}"; do
  if ! grep -qE "^ *geeps::$c::\*;" "$map"; then
    echo "export_map_test: class $c is GEEPS_EXPORT but $map has no 'geeps::$c::*;'" >&2
    status=1
  fi
done
for f in "${functions[@]}"; do
  if ! grep -qE "^ *(geeps::$f\*;|\"geeps::$f\()" "$map"; then
    echo "export_map_test: function $f is GEEPS_EXPORT but $map has no line for it" >&2
    status=1
  fi
done
# One list, searched from a string: "printf ... | grep -q" under pipefail
# fails at random when grep exits at its match before printf's next write
# (SIGPIPE), and did so once in CI.
marked="$(printf '%s\n' "${classes[@]}" "${functions[@]}")"
for m in "${mapped[@]}"; do
  if ! grep -qx "$m" <<<"$marked"; then
    echo "export_map_test: $map exports geeps::$m, which no header marks GEEPS_EXPORT" >&2
    status=1
  fi
done
# Each exported function is defined in the library (a class may be all
# inline, as ComputeStream is: its mark only keeps its type visible).
symbols="$(nm -DC --defined-only "$lib")"
for m in "${functions[@]}"; do
  if ! grep -qE "geeps::$m(::|\()" <<<"$symbols"; then
    echo "export_map_test: $lib exports no symbol of geeps::$m" >&2
    status=1
  fi
done
# And nothing of the internals (their namespaces under geeps::).
leaked="$(grep -m5 -E ' [TDBVW] geeps::(client|server|cluster|transport|device|memory|internal)::' \
  <<<"$symbols" || true)"
if [[ -n "$leaked" ]]; then
  echo "export_map_test: $lib exports internal symbols, e.g.:" >&2
  echo "$leaked" >&2
  status=1
fi
[[ $status -eq 0 ]] && echo "export_map_test: ${#classes[@]} classes and ${#functions[@]}" \
  "functions: headers, map and library agree"
exit $status
