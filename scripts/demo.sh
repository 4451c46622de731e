#!/usr/bin/env bash
# Elastic training demo: the reference trainer runs once with a static layout and once switching
# layout every 20 steps while the job grows and shrinks for real: mpirun starts 2 processes, the
# elastic device manager spawns 2 more (TP x DP on 4), 2 more (TP x PP on 6), then 3 leave (DP
# on 3) and 2 more leave (one process). Prints losses, tokens/s, the processes alive and, per
# switch, pause / prepare / hidden share (from `train --json`); plots the loss of both runs to a
# PNG with gnuplot. Installs nothing (gnuplot-nox and Open MPI must be there).
#
#   scripts/demo.sh                        # build dir ./build, 2 processes, 100 steps, tiny-dense
#   MODEL=tiny-moe SCHEDULE="0:dp=2,ep=2;20:dp=4,ep=4;..." scripts/demo.sh
#
# Settings (environment): BUILD (build dir, default build), DYNATRAIN (binary, default
# $BUILD/dynatrain), NP (processes mpirun starts, 2), MODEL (tiny-dense), STEPS (100), BATCH
# (24), SEQ (64), SCHEDULE (below), OUT (output dir, demo-out).
set -euo pipefail

BUILD=${BUILD:-build}
DYNATRAIN=${DYNATRAIN:-$BUILD/dynatrain}
NP=${NP:-2}
MODEL=${MODEL:-tiny-dense}
STEPS=${STEPS:-100}
BATCH=${BATCH:-24}
SEQ=${SEQ:-64}
OUT=${OUT:-demo-out}
if [[ -z "${SCHEDULE:-}" ]]; then
  if [[ "$MODEL" == "tiny-moe" ]]; then
    SCHEDULE="0:dp=2,ep=2;20:dp=4,ep=4;40:tp=2,dp=2,ep=2;60:pp=2,dp=2,ep=2;80:dp=1"
  else
    SCHEDULE="0:dp=2;20:tp=2,dp=2;40:tp=2,pp=3,pp_layers=2/1/1;60:dp=3;80:dp=1"
  fi
fi

for tool in mpirun gnuplot; do
  command -v "$tool" >/dev/null || { echo "demo: '$tool' not found (apt-get install gnuplot-nox openmpi-bin)" >&2; exit 2; }
done
[[ -x "$DYNATRAIN" ]] || { echo "demo: $DYNATRAIN not built (cmake --build $BUILD)" >&2; exit 2; }

MPIRUN=(mpirun -np "$NP" --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
# Processes leave the job when the layout shrinks (docs/edm.md).
export OMPI_MCA_orte_allowed_exit_without_sync=1
export PMIX_MCA_gds=hash  # spawned processes can hang in PMIx_Init otherwise (scripts/mpi-env.sh)
mkdir -p "$OUT"
COMMON=(train --model "$MODEL" --steps "$STEPS" --global-batch "$BATCH" --seq "$SEQ" --schedule "$SCHEDULE")

echo "== static run: first layout of \"$SCHEDULE\" throughout"
"${MPIRUN[@]}" "$DYNATRAIN" "${COMMON[@]}" --static --csv "$OUT/static.csv" | tee "$OUT/static.log" |
  awk '/^switch|^summary|^  / || /step/ && (++n % 20 == 1)'
echo "== switching run: $SCHEDULE"
"${MPIRUN[@]}" "$DYNATRAIN" "${COMMON[@]}" --csv "$OUT/switching.csv" --json "$OUT/switches.json" > "$OUT/switching.log" &
run=$!
# Processes of the job alive (started by mpirun or spawned by the job), sampled every 50 ms.
while kill -0 "$run" 2>/dev/null; do pgrep -P "$run" -c -x dynatrain || true; sleep 0.05; done > "$OUT/processes.txt"
wait "$run"
awk '/^switch|^note|^summary|^  / || /step/ && (++n % 20 == 1)' "$OUT/switching.log"
echo "== processes alive during the switching run (repeats collapsed): $(awk '$1 != last && $1 > 0 { printf "%s ", $1; last = $1 }' "$OUT/processes.txt")"
echo "== per switch (also in $OUT/switches.json): pause = end of the last step in the old layout to the first in the new"
grep '^  switch' "$OUT/switching.log" || true

# Max |loss difference| per step, and the switch steps for the plot.
paste -d, "$OUT/static.csv" "$OUT/switching.csv" | awk -F, 'NR > 1 {
    d = $2 - $14; if (d < 0) d = -d; if (d > m) m = d; last_s = $2; last_d = $14 }
  END { printf "== final loss: static %.4f, switching %.4f; max |difference| over all steps %.2e\n", last_s, last_d, m }'
awk -F, 'NR > 1 && $10 != "" { print $1 }' "$OUT/switching.csv" > "$OUT/switch_steps.txt"
paste -d, "$OUT/static.csv" "$OUT/switching.csv" |
  awk -F, 'NR > 1 { d = $2 - $14; if (d < 0) d = -d; if (d < 1e-9) d = 1e-9; print $1 "," d }' > "$OUT/diff.csv"

{
  echo "set terminal pngcairo size 1000,800 noenhanced"
  echo "set output '$OUT/loss.png'"
  echo "set datafile separator ','"
  echo "set multiplot layout 2,1 title 'DynaTrain $MODEL, $NP processes at start: loss with and without online layout switches (dashed: switch)'"
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
