#!/usr/bin/env bash
# Runs the benchmark suite on this machine and writes, under OUT (default
# benchmarks/results/latest): each benchmark's JSON and CSV, summary.md (the
# tables quoted in docs/performance.md) and, where gnuplot is installed,
# scaling.png and swap.png. About 6 minutes on 2 cores.
#   bash benchmarks/run_all.sh [OUT]
# Uses build/ (bash scripts/build.sh builds the benchmarks); builds it first
# if a benchmark is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks/results/latest}"
bin=build/benchmarks
mkdir -p "$out"

need=(micro_bench rw_bench scale_bench memory_bench)
for b in "${need[@]}"; do
  if [[ ! -x "$bin/$b" ]]; then
    bash scripts/build.sh -DGEEPS_BUILD_BENCHMARKS=ON
    ninja -C build -j2 benchmarks/all 2>/dev/null || ninja -C build -j2
    break
  fi
done

stage() {  # stage <name> <command>...
  local name="$1" start=$SECONDS
  shift
  echo "==== run_all: $name"
  "$@"
  echo "==== run_all: $name took $((SECONDS - start)) s"
}

stage micro "$bin/micro_bench" --benchmark_min_time=0.2 \
  --benchmark_out="$out/micro_bench.json" --benchmark_out_format=json
stage rw "$bin/rw_bench" --out "$out/rw_bench.json" --csv "$out/rw_bench.csv"
stage rw-2x2 "$bin/rw_bench" --pairs 2 --out "$out/rw_bench_2x2.json" --csv "$out/rw_bench_2x2.csv"
stage scale "$bin/scale_bench" --out "$out/scale_bench.json" --csv "$out/scale_bench.csv"
stage memory "$bin/memory_bench" --out "$out/memory_bench.json" --csv "$out/memory_bench.csv"
if [[ -x build/examples/fashion_mnist/fmnist_throughput ]]; then
  stage training build/examples/fashion_mnist/fmnist_throughput --out "$out/training.json" \
    --csv "$out/training.csv"
fi

# The summary: each CSV as a Markdown table, with the machine described.
{
  echo "# Benchmark summary ($(date -u +%Y-%m-%d), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r))"
  for csv in "$out"/*.csv; do
    echo
    echo "## $(basename "$csv" .csv)"
    echo
    awk -F, 'NR == 1 { h = "|"; s = "|"; for (i = 1; i <= NF; i++) { h = h " " $i " |"; s = s " --- |" } print h; print s; next }
             { r = "|"; for (i = 1; i <= NF; i++) { v = $i; if (v ~ /^[0-9.e+-]+$/ && v ~ /\./) v = sprintf("%.4g", v); r = r " " v " |" } print r }' "$csv"
  done
} > "$out/summary.md"
cat "$out/summary.md"

if command -v gnuplot >/dev/null 2>&1; then
  gnuplot <<GP
set terminal pngcairo size 800,500 noenhanced
set datafile separator ","
set output "$out/scaling.png"
set title "Scaling efficiency with emulated compute (higher is better)"
set xlabel "workers"; set ylabel "efficiency vs 1 worker"; set yrange [0:1.2]; set grid
plot "< awk -F, 'NR>1 && \$1==\"libgeeps\" && \$2==0' $out/scale_bench.csv" using 3:6 with linespoints title "libgeeps BSP", \
     "< awk -F, 'NR>1 && \$1==\"libgeeps\" && \$2==1' $out/scale_bench.csv" using 3:6 with linespoints title "libgeeps SSP (slack 1)", \
     "< awk -F, 'NR>1 && \$1==\"allreduce\"' $out/scale_bench.csv" using 3:6 with linespoints title "MPI_Allreduce baseline"
set output "$out/swap.png"
set title "Oversubscribed device memory (host backend, emulated PCIe)"
set xlabel "model size / device budget"; set ylabel "fraction"; set yrange [0:1.1]
plot "< awk -F, 'NR>2' $out/memory_bench.csv" using 1:2 with linespoints title "throughput vs unconstrained", \
     "< awk -F, 'NR>2' $out/memory_bench.csv" using 1:3 with linespoints title "stall fraction"
GP
  echo "plots: $out/scaling.png $out/swap.png"
else
  echo "(gnuplot not installed: no plots; apt-get install gnuplot-nox)"
fi
