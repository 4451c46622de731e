#!/usr/bin/env bash
# Elastic training demo: the reference trainer runs once with a static layout and once switching
# layout every 20 steps (TP -> PP -> DP resize -> hybrid -> shrink to one rank -> grow), on
# local processes under mpirun. Prints losses, tokens/s and switch times, and plots the loss of
# both runs to a PNG with gnuplot. Installs nothing (gnuplot-nox and Open MPI must be there).
#
#   scripts/demo.sh                        # build dir ./build, 4 ranks, 120 steps, tiny-dense
#   MODEL=tiny-moe SCHEDULE="0:dp=2,ep=2;20:dp=4,ep=4;..." scripts/demo.sh
#
# Settings (environment): BUILD (build dir, default build), DYNATRAIN (binary, default
# $BUILD/dynatrain), NP (ranks, 4), MODEL (tiny-dense), STEPS (120), BATCH (16), SEQ (64),
# SCHEDULE (below), OUT (output dir, demo-out).
set -euo pipefail

BUILD=${BUILD:-build}
DYNATRAIN=${DYNATRAIN:-$BUILD/dynatrain}
NP=${NP:-4}
MODEL=${MODEL:-tiny-dense}
STEPS=${STEPS:-120}
BATCH=${BATCH:-16}
SEQ=${SEQ:-64}
OUT=${OUT:-demo-out}
if [[ -z "${SCHEDULE:-}" ]]; then
  if [[ "$MODEL" == "tiny-moe" ]]; then
    SCHEDULE="0:dp=2,ep=2;20:dp=4,ep=4;40:tp=2,dp=2,ep=2;60:pp=2,dp=2,ep=2;80:dp=1;100:tp=2,dp=2,ep=4"
  else
    SCHEDULE="0:tp=2,dp=2;20:pp=2,dp=2;40:dp=4;60:tp=2,pp=2;80:dp=1;100:tp=4"
  fi
fi

for tool in mpirun gnuplot; do
  command -v "$tool" >/dev/null || { echo "demo: '$tool' not found (apt-get install gnuplot-nox openmpi-bin)" >&2; exit 2; }
done
[[ -x "$DYNATRAIN" ]] || { echo "demo: $DYNATRAIN not built (cmake --build $BUILD)" >&2; exit 2; }

MPIRUN=(mpirun -np "$NP" --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
mkdir -p "$OUT"
COMMON=(train --model "$MODEL" --steps "$STEPS" --global-batch "$BATCH" --seq "$SEQ" --schedule "$SCHEDULE")

echo "== static run: first layout of \"$SCHEDULE\" throughout"
"${MPIRUN[@]}" "$DYNATRAIN" "${COMMON[@]}" --static --csv "$OUT/static.csv" | tee "$OUT/static.log" |
  awk '/^switch|^summary|^  / || /step/ && (++n % 20 == 1)'
echo "== switching run: $SCHEDULE"
"${MPIRUN[@]}" "$DYNATRAIN" "${COMMON[@]}" --csv "$OUT/switching.csv" | tee "$OUT/switching.log" |
  awk '/^switch|^summary|^  / || /step/ && (++n % 20 == 1)'

# Max |loss difference| per step, and the switch steps for the plot.
paste -d, "$OUT/static.csv" "$OUT/switching.csv" | awk -F, 'NR > 1 {
    d = $2 - $12; if (d < 0) d = -d; if (d > m) m = d; last_s = $2; last_d = $12 }
  END { printf "== final loss: static %.4f, switching %.4f; max |difference| over all steps %.2e\n", last_s, last_d, m }'
awk -F, 'NR > 1 && $10 != "" { print $1 }' "$OUT/switching.csv" > "$OUT/switch_steps.txt"
paste -d, "$OUT/static.csv" "$OUT/switching.csv" |
  awk -F, 'NR > 1 { d = $2 - $12; if (d < 0) d = -d; if (d < 1e-9) d = 1e-9; print $1 "," d }' > "$OUT/diff.csv"

{
  echo "set terminal pngcairo size 1000,800 noenhanced"
  echo "set output '$OUT/loss.png'"
  echo "set datafile separator ','"
  echo "set multiplot layout 2,1 title 'DynaTrain $MODEL, $NP ranks: loss with and without online layout switches (dashed: switch)'"
  while read -r s; do
    echo "set arrow from $s, graph 0 to $s, graph 1 nohead dashtype 2 linecolor rgb 'gray'"
  done < "$OUT/switch_steps.txt"
  echo "set xlabel 'step'; set ylabel 'training loss'; set grid; set key top right"
  echo "plot '$OUT/static.csv' every ::1 using 1:2 with lines linewidth 2 title 'static layout', \\"
  echo "     '$OUT/switching.csv' every ::1 using 1:2 with points pointtype 7 pointsize 0.5 title 'switching layouts'"
  echo "set logscale y; set format y '%.0e'; set ylabel '|loss difference|'; set yrange [1e-9:1]"
  echo "plot '$OUT/diff.csv' using 1:2 with linespoints pointtype 7 pointsize 0.4 title '|switching - static| (fp32 reduction-order noise; floor 1e-9 = identical)'"
  echo "unset multiplot"
} > "$OUT/loss.gp"
if ! gnuplot "$OUT/loss.gp" 2>/dev/null; then  # gnuplot without cairo: plain png terminal
  sed -i 's/^set terminal pngcairo/set terminal png/' "$OUT/loss.gp"
  gnuplot "$OUT/loss.gp"
fi
echo "== plot: $OUT/loss.png"
