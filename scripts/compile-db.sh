# Sourced by the checks that read a build's compile_commands.json
# (check-tidy.sh, check-thread-safety.sh): compile_db NAME [--build-dir DIR]
# sets build_dir (default build) and db, or exits 2 naming the check when
# the database is missing. scripts/build.sh writes one.
compile_db() {
  local name="$1"
  build_dir="build"
  if [[ "${2:-}" == "--build-dir" && -n "${3:-}" ]]; then build_dir="$3"; fi
  db="$build_dir/compile_commands.json"
  if [[ ! -f "$db" ]]; then
    echo "$name: no $db: build first (bash scripts/build.sh)" >&2
    exit 2
  fi
}
