#!/usr/bin/env bash
# The GPU bundle's dry run as CI runs it (.ci/run, stage gpu-bundle-dry-run),
# rehearsing the GPU machine's conditions on a machine without a GPU:
#   - a copy of the bundle in a scratch folder outside the tree;
#   - a clean environment (env -i) whose LD_LIBRARY_PATH is
#     /opt/geeps-dry-run/lib64, as a caller's path that holds the driver
#     would be;
#   - where a mount namespace can be made (root, unshare), what the GPU
#     machine lacks hidden: the source folder (and with it build/) behind an
#     empty one, so that a test that still reads a path of this machine
#     instead of GEEPS_TEST_BIN_DIR / GEEPS_TEST_SOURCE_DIR
#     (tests/test_paths.h) fails here, as it would there; the data sets of
#     /usr/share/datasets; and mpirun (the tests that need it skip, as they
#     will there). Without a namespace it says so and runs with them
#     visible.
# Then it checks the gpu-check.json the run wrote: the caller's path is in
# library_path; every stage has limit_s and gate; the limits add up to at
# most the budget, and the budget is at most 540 s; no figure stage failed;
# the suite stage ran in the CUDA-like mode (tests made CUDA-like host
# devices, none a CUDA one); the logs archive is under 12 MiB (files over
# 16 MiB do not come back from the GPU machine); the run passed.
#   bash scripts/gpu-dry-run.sh [--bundle DIR] [--out DIR]
# Default bundle gpu-bundle/ (scripts/gpu-bundle.sh makes it); outputs in
# gpu-check-out/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd -P)"
bundle="gpu-bundle"
out="gpu-check-out"
caller_path=/opt/geeps-dry-run/lib64
while (($#)); do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-dry-run: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ -f "$bundle/gpu-check.sh" ]] || { echo "gpu-dry-run: no bundle in $bundle (bash scripts/gpu-bundle.sh)" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd -P)"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/geeps-dry-run.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
cp -a "$bundle" "$scratch/gpu-bundle"
rm -f "$out/gpu-check.json"

check=(env -i PATH=/usr/bin:/bin HOME="${HOME:-/tmp}" OUT="$out" TMPDIR="$scratch"
       LD_LIBRARY_PATH="$caller_path" bash "$scratch/gpu-bundle/gpu-check.sh" --dry-run)
hidden=0
# What the namespace hides. The output folder may lie inside the tree: it is
# bound back after the tree is hidden.
hide="mount -t tmpfs -o size=1m,mode=0755 geeps-hidden '$repo'"
if [[ "$out" == "$repo"/* ]]; then
  mkdir -p "$scratch/out"
  hide="mount --bind '$out' '$scratch/out' && $hide && mkdir -p '$out' && mount --bind '$scratch/out' '$out'"
fi
if [[ -d /usr/share/datasets ]]; then
  hide+=" && mount -t tmpfs -o size=1m,mode=0755 geeps-hidden /usr/share/datasets"
fi
if [[ -e /usr/bin/mpirun ]]; then
  hide+=" && mount --bind /dev/null /usr/bin/mpirun"  # not executable: access(X_OK) fails
fi
if [[ "$(id -u)" == 0 ]] && command -v unshare >/dev/null &&
   unshare -m --propagation private true 2>/dev/null; then
  hidden=1
  echo "gpu-dry-run: hidden from the check (a mount namespace): $repo, /usr/share/datasets, /usr/bin/mpirun"
  set +e
  unshare -m --propagation private bash -c "$hide && exec \"\$@\"" hide "${check[@]}"
  rc=$?
  set -e
else
  echo "gpu-dry-run: WARNING: no mount namespace here (not root, or unshare refused): $repo, /usr/share/datasets and mpirun stay visible, so a test that reads this machine's paths would not be caught"
  set +e
  "${check[@]}"
  rc=$?
  set -e
fi

# The record the GPU run will leave, checked as a reader would.
python3 - "$out/gpu-check.json" "$caller_path" "$rc" "$hidden" <<'EOF'
import json, os, sys
path, caller, rc, hidden = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
problems = []
archive = os.path.join(os.path.dirname(path), "gpu-check-logs.tar.gz")
archive_bytes = os.path.getsize(archive) if os.path.exists(archive) else -1
if not 0 < archive_bytes < 12 << 20:
    problems.append(f"the logs archive {archive} is {archive_bytes} bytes (missing, or not under 12 MiB)")
try:
    j = json.load(open(path))
except Exception as e:  # noqa: BLE001 - any unreadable record is the failure
    print(f"gpu-dry-run: {path} unreadable: {e}")
    sys.exit(1)
if caller not in j.get("library_path", "").split(":"):
    problems.append(f"library_path {j.get('library_path')!r} lacks the caller's {caller}")
budget = j.get("budget", 0)
if not 0 < budget <= 540:
    problems.append(f"budget {budget} not in (0, 540]")
limits = 0
for s in j.get("stages", []):
    if "limit_s" not in s or "gate" not in s:
        problems.append(f"stage {s.get('name')} lacks limit_s or gate")
        continue
    limits += s["limit_s"]
    if s["gate"] == "figure" and s["status"] == "failed":
        problems.append(f"figure stage {s['name']} failed: {s.get('note')}")
suite = next((s for s in j.get("stages", []) if s.get("name") == "suite"), {})
fig = suite.get("figures", {})
if fig.get("cuda_like", 0) <= 0 or fig.get("touched_gpu", 0) != 0:
    problems.append(f"the suite stage did not run in the CUDA-like mode: {fig.get('cuda_like')} tests "
                    f"made a CUDA-like device, {fig.get('touched_gpu')} a CUDA one")
if limits > budget:
    problems.append(f"the stages' limits add up to {limits} s, over the budget {budget} s")
if not j.get("passed") or not j.get("finished") or rc != 0:
    bad = [f"{s['name']}: {s['status']} ({s.get('note', '')})" for s in j.get("stages", [])
           if s["status"] not in ("passed", "no-gpu", "unavailable")]
    problems.append(f"the dry run did not pass (exit {rc}): " + "; ".join(bad))
summary = ", ".join(f"{s['name']} {s['gate']} {s['limit_s']} s {s['status']}" for s in j["stages"])
print(f"gpu-dry-run: budget {budget} s, limits {limits} s, library_path ends "
      f"...{j.get('library_path', '')[-60:]}; tree hidden: {'yes' if hidden else 'no'}; "
      f"logs archive {archive_bytes / 2**20:.1f} MiB; suite: {fig.get('tests')} tests, "
      f"{fig.get('cuda_like')} on a CUDA-like device; {summary}")
for p in problems:
    print("gpu-dry-run: PROBLEM: " + p)
sys.exit(1 if problems else 0)
EOF
