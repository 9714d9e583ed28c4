#!/usr/bin/env bash
# Plots a training curve written by `fmnist_train --curve-csv FILE` to PNG
# with gnuplot: train and test loss (left axis) and test accuracy (right
# axis) against training time.
#   bash examples/fashion_mnist/plot_curve.sh curve.csv [curve.png]
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 CURVE.csv [OUT.png]" >&2
  exit 2
fi
csv="$1"
png="${2:-${csv%.csv}.png}"
if [[ ! -r "$csv" ]]; then
  echo "$0: cannot read $csv" >&2
  exit 2
fi
if ! command -v gnuplot >/dev/null 2>&1; then
  echo "$0: gnuplot not found (bash scripts/setup.sh installs gnuplot-nox)" >&2
  exit 1
fi
gnuplot <<GNUPLOT
set datafile separator ","
set terminal pngcairo size 900,500 noenhanced
set output "$png"
set title "Fashion-MNIST training curve ($csv)"
set xlabel "training time (s)"
set ylabel "loss"
set y2label "test accuracy"
set y2range [0:1]
set y2tics
set ytics nomirror
set key center right
set grid
plot "$csv" every ::2 using 1:3 with linespoints title "train loss", \
     "$csv" every ::1 using 1:4 with linespoints title "test loss", \
     "$csv" every ::1 using 1:5 axes x1y2 with linespoints title "test accuracy"
GNUPLOT
echo "wrote $png"
