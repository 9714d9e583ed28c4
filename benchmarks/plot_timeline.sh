#!/usr/bin/env bash
# Plots one iteration of a scale_bench timeline (the *_timeline.csv its
# largest points write): a row per rank, time on the x axis, a bar per span
# coloured by what the application thread did (compute, waiting in Read,
# Update, Clock). Needs gnuplot.
#   bash benchmarks/plot_timeline.sh TIMELINE.csv OUT.png [SYSTEM] [SLACK] [ITERATION]
# (defaults: libgeeps, 0, the middle timed iteration).
set -euo pipefail
csv="$1" png="$2" system="${3:-libgeeps}" slack="${4:-0}" iteration="${5:-}"
if ! command -v gnuplot >/dev/null 2>&1; then
  echo "(gnuplot not installed: no timeline plot)"
  exit 0
fi
if [[ -z "$iteration" ]]; then
  last=$(awk -F, -v s="$system" -v k="$slack" 'NR > 1 && $1 == s && $2 == k && $5 > m { m = $5 } END { print m + 0 }' "$csv")
  iteration=$((last / 2))
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# One file per phase: start_ms, rank, duration_ms.
awk -F, -v s="$system" -v k="$slack" -v it="$iteration" -v d="$dir" \
  'NR > 1 && $1 == s && $2 == k && $5 == it { print $8 "," $4 "," ($9 - $8) > (d "/" $6) }' "$csv"
workers=$(awk -F, -v s="$system" 'NR > 1 && $1 == s { print $3; exit }' "$csv")
plot=""
add() {  # add PHASE TITLE COLOUR
  [[ -s "$dir/$1" ]] || return 0
  plot+="${plot:+, }\"$dir/$1\" using 1:2:3:(0) with vectors nohead lw 9 lc rgb \"$3\" title \"$2\""
}
add F "compute (forward)" "#4c9a2a"
add B "compute (backward)" "#a4d17a"
add R "waiting in Read" "#d62728"
add U "Update (send)" "#1f77b4"
add C "Clock" "#7f7f7f"
if [[ -z "$plot" ]]; then
  echo "plot_timeline: no spans of $system slack $slack iteration $iteration in $csv" >&2
  exit 1
fi
gnuplot <<GP
set terminal pngcairo size 900,$((120 + 22 * ${workers:-8})) noenhanced
set output "$png"
set datafile separator ","
set title "One iteration ($iteration) of $system, slack $slack, $workers workers: what each rank's application thread did"
set xlabel "ms from the iteration's start"; set ylabel "rank"
set yrange [-0.8:${workers:-8}-0.2]; set ytics 1; set grid xtics
set key outside bottom center horizontal
plot $plot
GP
echo "timeline plot: $png"
