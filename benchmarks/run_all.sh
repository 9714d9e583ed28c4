#!/usr/bin/env bash
# Runs the benchmark suite on this machine and writes, under OUT (default
# <build dir>/benchmark-results, not committed): each benchmark's JSON and
# CSV, summary.md (the
# tables quoted in docs/performance.md) and, where gnuplot is installed,
# scaling.png, scaling_netns.png and swap.png. About 13 minutes on 2 cores
# (scale, its 8-worker BSP point 5 times: 1 min 45 s; scale-netns, each
# process a network namespace limited to 1 Gbit/s, as root: 1 min 45 s;
# scale-machines, 2 namespaces of 4 processes with and without
# machine-level aggregation: 4 minutes; scale-16, 16 namespaces at 250 ms
# and at 1000 ms of compute per iteration, beside MPI_Allreduce and a plain
# ZeroMQ parameter server, and as-ready and read-order runs beside them:
# about 4 minutes; all skipped elsewhere with their
# reason in summary.md).
#   bash benchmarks/run_all.sh [OUT]
# Uses build/ (GEEPS_BUILD_DIR names another; bash scripts/build.sh builds
# the benchmarks); builds it first if a benchmark is missing.
# GEEPS_BENCHMARKS="scale scale-netns" runs only those stages (of: micro rw
# rw-2x2 scale scale-netns scale-machines scale-16 memory idle training); the summary
# covers every CSV in OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${GEEPS_BUILD_DIR:-build}"
out="${1:-$build_dir/benchmark-results}"
bin="$build_dir/benchmarks"
only="${GEEPS_BENCHMARKS:-}"
mkdir -p "$out"

wanted() {  # wanted <stage>...: whether any of these stages runs
  local name
  for name in "$@"; do
    if [[ -z "$only" || " $only " == *" $name "* ]]; then return 0; fi
  done
  return 1
}

need=()
if wanted micro; then need+=(micro_bench); fi
if wanted rw rw-2x2; then need+=(rw_bench); fi
if wanted scale scale-netns scale-machines scale-16; then need+=(scale_bench); fi
if wanted memory; then need+=(memory_bench); fi
if wanted idle; then need+=(idle_bench); fi
for b in "${need[@]}"; do
  if [[ ! -x "$bin/$b" ]]; then
    GEEPS_BUILD_DIR="$build_dir" bash scripts/build.sh -DGEEPS_BUILD_BENCHMARKS=ON
    ninja -C "$build_dir" -j2 benchmarks/all 2>/dev/null || ninja -C "$build_dir" -j2
    break
  fi
done

stage() {  # stage <name> <command>...
  local name="$1" start=$SECONDS
  shift
  if ! wanted "$name"; then return 0; fi
  echo "==== run_all: $name"
  "$@"
  echo "==== run_all: $name took $((SECONDS - start)) s"
}

stage micro "$bin/micro_bench" --benchmark_min_time=0.2 \
  --benchmark_out="$out/micro_bench.json" --benchmark_out_format=json
stage rw "$bin/rw_bench" --out "$out/rw_bench.json" --csv "$out/rw_bench.csv"
stage rw-2x2 "$bin/rw_bench" --pairs 2 --out "$out/rw_bench_2x2.json" --csv "$out/rw_bench_2x2.csv"
stage scale "$bin/scale_bench" --repeat 5 --out "$out/scale_bench.json" --csv "$out/scale_bench.csv"
# Each process in a network namespace of its own, 1 Gbit/s per machine each
# way (needs root; otherwise it prints why and writes only the JSON).
stage scale-netns "$bin/scale_bench" --netns --rate 1gbit --repeat 3 --out "$out/scale_bench_netns.json" \
  --csv "$out/scale_bench_netns.csv"
# 2 machines x 4 workers at 1 Gbit/s, with and without machine-level
# aggregation, and the bytes each machine's link carries per iteration.
stage scale-machines "$bin/scale_bench" --netns --rate 1gbit --per-machine 4 --workers 1,8 \
  --aggregate --repeat 3 --out "$out/scale_bench_machines.json" --csv "$out/scale_bench_machines.csv"
# 16 machines at 1 Gbit/s, 2.5 M parameters in 8 tables: 250 ms of compute
# per iteration (the network and, on 2 cores, the CPU are the limit) and
# 1000 ms (compute hides them); each with SSP, MPI_Allreduce, a plain ZeroMQ
# parameter server and a per-iteration timeline (*_timeline.csv).
# Then both again with Config::push_in_read_order (libgeeps-read-order).
for ms in 250 1000; do
  stage scale-16 "$bin/scale_bench" --netns --rate 1gbit --workers 1,16 --slacks 0,1 \
    --params 2500000 --tables 8 --compute-ms "$ms" --iterations 12 --plain \
    --out "$out/scale_bench_16_${ms}ms.json" --csv "$out/scale_bench_16_${ms}ms.csv"
done
# Beside the default (Config::adapt_push_order): pushes always as their
# clocks complete, and always in read order.
for ms in 250 1000; do
  for order in as-ready push-in-read-order; do
    name="scale_bench_16_${ms}ms_${order//-/_}"
    stage scale-16 "$bin/scale_bench" --netns --rate 1gbit --workers 1,16 --slacks 0 \
      --params 2500000 --tables 8 --compute-ms "$ms" --iterations 12 "--$order" \
      --allreduce none --out "$out/$name.json" --csv "$out/$name.csv"
  done
done
stage memory "$bin/memory_bench" --out "$out/memory_bench.json" --csv "$out/memory_bench.csv"
stage idle "$bin/idle_bench" --connections 1000 --out "$out/idle_bench.json"
if [[ -x "$build_dir/examples/fashion_mnist/fmnist_throughput" ]]; then
  stage training "$build_dir/examples/fashion_mnist/fmnist_throughput" --out "$out/training.json" \
    --csv "$out/training.csv"
fi

# A number from a one-line JSON file: json_number FILE KEY.
json_number() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" "$1" | head -n1; }

# The summary: each CSV as a Markdown table, with the machine described.
shopt -s nullglob
{
  echo "# Benchmark summary ($(date -u +%Y-%m-%d), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r))"
  for csv in "$out"/*.csv; do
    [[ "$csv" == *_timeline.csv ]] && continue  # plotted below, not tabled
    echo
    echo "## $(basename "$csv" .csv)"
    echo
    awk -F, 'NR == 1 { h = "|"; s = "|"; for (i = 1; i <= NF; i++) { h = h " " $i " |"; s = s " --- |" } print h; print s; next }
             { r = "|"; for (i = 1; i <= NF; i++) { v = $i; if (v ~ /^[0-9.e+-]+$/ && v ~ /\./) v = sprintf("%.4g", v); r = r " " v " |" } print r }' "$csv"
    case "$(basename "$csv")" in
      scale_bench.csv | scale_bench_netns.csv | scale_bench_machines.csv | scale_bench_16_*.csv)
        repeated=$(awk -F, 'NR > 1 && $7 != "" { k = $1 " slack " $2 ", " $3 " workers"; if ($7 == "median") m[k] = $6; else e[k] = e[k] (e[k] == "" ? "" : ", ") sprintf("%.3f", $6) }
                            END { for (k in m) printf "* %s: %s; median **%.3f**\n", k, e[k], m[k] }' "$csv" | sort)
        if [[ -n "$repeated" ]]; then
          echo
          echo "Repeated points (efficiency of each repetition against the 1-worker run above; median):"
          echo
          echo "$repeated"
        fi
        ;;
    esac
    if [[ "$(basename "$csv")" == scale_bench_netns.csv ]]; then
      echo
      echo "Each process in its own network namespace, $(sed -n 's/.*"rate":"\([^"]*\)".*/\1/p' "${csv%.csv}.json") per machine each way (tc tbf);" \
        "one TCP stream measured $(awk -v b="$(json_number "${csv%.csv}.json" link_goodput_bytes_per_s)" 'BEGIN { printf "%.1f", b / 1e6 }') MB/s." \
        "allreduce-computed: ring allreduce at that rate, computed (2(N-1)/N x model bytes / rate + compute), not measured;" \
        "bsp-bound-computed: the least BSP time when a table is sent whole (compute + 2(N-1)/N x one table's bytes / rate: the update, then the push, of the table read first), not measured."
    fi
  done
  for name in scale_bench_netns scale_bench_machines scale_bench_16_250ms scale_bench_16_1000ms \
    scale_bench_16_250ms_as_ready scale_bench_16_1000ms_as_ready \
    scale_bench_16_250ms_push_in_read_order scale_bench_16_1000ms_push_in_read_order; do
    netns_json="$out/$name.json"
    if [[ -f "$netns_json" ]] && grep -q '"skipped"' "$netns_json"; then
      echo
      echo "## $name"
      echo
      echo "Skipped: $(sed -n 's/.*"skipped":"\([^"]*\)".*/\1/p' "$netns_json")"
    fi
  done
  idle_json="$out/idle_bench.json"
  if [[ -f "$idle_json" ]]; then
    echo
    echo "## idle_bench"
    echo
    echo "A two-rank job idling: $(json_number "$idle_json" cpu_cores_idle) cores busy;" \
      "with $(json_number "$idle_json" connections_held) idle TCP connections held on the coordinator's port:" \
      "$(json_number "$idle_json" cpu_cores_with_connections) cores busy."
  fi
} > "$out/summary.md"
cat "$out/summary.md"

# One curve of a scale_bench CSV: curve CSV SYSTEM SLACK; a repeated point
# as its median.
curve() {
  awk -F, -v sys="$2" -v slack="$3" 'NR == FNR { if ($7 == "median") m[$1 "," $2 "," $3] = 1; next }
    FNR > 1 && $1 == sys && $2 == slack && ($7 == "median" || !(($1 "," $2 "," $3) in m))' "$1" "$1"
}

if command -v gnuplot >/dev/null 2>&1; then
  plots=$(mktemp -d)
  trap 'rm -rf "$plots"' EXIT
  for f in scale_bench scale_bench_netns; do
    [[ -f "$out/$f.csv" ]] || continue
    curve "$out/$f.csv" libgeeps 0 > "$plots/$f-bsp"
    curve "$out/$f.csv" libgeeps 1 > "$plots/$f-ssp"
    curve "$out/$f.csv" allreduce 0 > "$plots/$f-allreduce"
    curve "$out/$f.csv" allreduce-computed 0 > "$plots/$f-computed"
    curve "$out/$f.csv" bsp-bound-computed 0 > "$plots/$f-bound"
  done
  netns_plot=""
  if [[ -f "$out/scale_bench_netns.csv" ]]; then
    netns_plot="set output \"$out/scaling_netns.png\"
set title \"Scaling efficiency, each process a namespace limited to $(sed -n 's/.*"rate":"\([^"]*\)".*/\1/p' "$out/scale_bench_netns.json")\"
plot \"$plots/scale_bench_netns-bsp\" using 3:6 with linespoints title \"libgeeps BSP\", \\
     \"$plots/scale_bench_netns-ssp\" using 3:6 with linespoints title \"libgeeps SSP (slack 1)\", \\
     \"$plots/scale_bench_netns-allreduce\" using 3:6 with linespoints title \"MPI_Allreduce (measured)\", \\
     \"$plots/scale_bench_netns-computed\" using 3:6 with lines dashtype 2 title \"ring allreduce (computed)\", \\
     \"$plots/scale_bench_netns-bound\" using 3:6 with lines dashtype 3 lw 2 lc rgb \"black\" title \"BSP ceiling, whole tables (computed)\""
  fi
  swap_plot=""
  if [[ -f "$out/memory_bench.csv" ]]; then
    swap_plot="set output \"$out/swap.png\"
set title \"Oversubscribed device memory (host backend, emulated PCIe)\"
set xlabel \"model size / device budget\"; set ylabel \"fraction\"; set yrange [0:1.1]
plot \"< awk -F, 'NR>2' $out/memory_bench.csv\" using 1:2 with linespoints title \"throughput vs unconstrained\", \\
     \"< awk -F, 'NR>2' $out/memory_bench.csv\" using 1:3 with linespoints title \"stall fraction\""
  fi
  scaling_plot=""
  if [[ -f "$out/scale_bench.csv" ]]; then
    scaling_plot="set output \"$out/scaling.png\"
set title \"Scaling efficiency with emulated compute (higher is better)\"
plot \"$plots/scale_bench-bsp\" using 3:6 with linespoints title \"libgeeps BSP\", \\
     \"$plots/scale_bench-ssp\" using 3:6 with linespoints title \"libgeeps SSP (slack 1)\", \\
     \"$plots/scale_bench-allreduce\" using 3:6 with linespoints title \"MPI_Allreduce baseline\""
  fi
  gnuplot <<GP || echo "(gnuplot failed: some plots are missing)"
set terminal pngcairo size 800,500 noenhanced
set datafile separator ","
set xlabel "workers"; set ylabel "efficiency vs 1 worker"; set yrange [0:1.2]; set grid
$scaling_plot
$netns_plot
$swap_plot
GP
  echo "plots:${scaling_plot:+ $out/scaling.png}${netns_plot:+ $out/scaling_netns.png}${swap_plot:+ $out/swap.png}"
  if [[ -f "$out/scale_bench_16_250ms_timeline.csv" ]]; then
    bash benchmarks/plot_timeline.sh "$out/scale_bench_16_250ms_timeline.csv" \
      "$out/timeline_16_250ms.png" libgeeps 0 || echo "(timeline plot failed)"
  fi
else
  echo "(gnuplot not installed: no plots; apt-get install gnuplot-nox)"
fi
