#!/usr/bin/env bash
# geeps/geeps_all.h is "the whole public API": it includes every header of
# include/geeps, and a file that includes only it can name every public class.
#   bash tests/geeps_all_test.sh <source dir> <C++ compiler>
set -euo pipefail
src="$1"
cxx="$2"
all="$src/include/geeps/geeps_all.h"
status=0
for h in "$src"/include/geeps/*.h; do
  name="$(basename "$h")"
  [[ "$name" == geeps_all.h ]] && continue
  if ! grep -qxF "#include \"geeps/$name\"" "$all"; then
    echo "geeps_all.h does not include geeps/$name"
    status=1
  fi
done
printf '%s\n' '#include "geeps/geeps_all.h"' \
  'using A = geeps::EmbeddedCluster; using B = geeps::Process; using C = geeps::Step;' \
  'using D = geeps::GeePS; using E = geeps::Config; using F = geeps::WorkerStats;' \
  'int main() { return 0; }' |
  "$cxx" -std=c++17 -fsyntax-only -I "$src/include" -x c++ - || { echo "a file including only geeps_all.h does not compile"; status=1; }
((status == 0)) && echo "geeps_all_test: every public header is in geeps_all.h"
exit "$status"
