#!/usr/bin/env bash
# Preemption notice to training resumed (job/notice.h), through `dynatrain train`:
#  * demo: tiny-dense (the demo's model, global batch 24 x 64 tokens) on 4 processes in
#    tp=2,dp=2; SIGTERM to rank 3 as step 6 starts;
#  * gb: the llama-style bench/edm/llama-133m.json (2.1 GB of param + master + Adam state) on 4
#    processes in tp=2,dp=2; SIGTERM to rank 3 as step 3 starts; with --json, so the switch's
#    record carries the bare exchange of the same bytes with the same peers (exchange_s);
#  * gb-2: the same on 2 processes in tp=2 (a core each), SIGTERM to rank 1: vacated into 1.
# The notice is raised by the process itself (DT_FAULT=notice, which stamps the wall-clock time
# it fired); every line the job prints is stamped as it arrives. Printed per case: notice ->
# the boundary that acts on it, -> the vacating commit done (training resumed on the processes
# that stay), the step run in between in the old layout, the commit's pause against the bare
# exchange of its bytes, and the steps lost (the CSV must hold every step once).
# Usage: bench/notice_bench.sh [BUILD] [OUT]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-/tmp/dt-notice-bench}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN="$OUT/dynatrain"
cp "$BUILD/dynatrain" "$BUILD/dynatrain-torch" "$OUT/"  # the front and the trainer it hands train to
source "$HERE/../scripts/mpi-env.sh"
source "$HERE/results.sh"
results_begin notice markdown "$0 $*"

stamp_lines() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done; }

run() {  # NAME NP STEPS NOTICE_STEP ARGS...: NP processes in LAYOUT, the last one noticed
  local name=$1 np=$2 steps=$3 at=$4 layout
  shift 4
  layout=$( ((np == 4)) && echo "tp=2,dp=2" || echo "tp=2")
  rm -f "$OUT/$name.stamp"
  DT_FAULT=notice:$((np - 1)):step:0:$at DT_FAULT_STAMP="$OUT/$name.stamp" timeout 900 \
    mpirun -np "$np" "$BIN" train --schedule "0:$layout" --steps "$steps" --csv "$OUT/$name.csv" "$@" \
    2>"$OUT/$name.err" | stamp_lines >"$OUT/$name.log" || { tail -n 20 "$OUT/$name.log" "$OUT/$name.err"; exit 1; }
  PYENV_VERSION=system python3 - "$OUT" "$name" "$steps" <<'PY'
import csv, json, os, re, sys
out, name, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
notice = float(open(f"{out}/{name}.stamp").read())
lines = [l.rstrip("\n").split(" ", 1) for l in open(f"{out}/{name}.log")]
t_notice_line = next(float(t) for t, l in lines if l.startswith("notice:"))
t_switch = next(float(t) for t, l in lines if l.startswith("switch before step"))
switch = next(l for t, l in lines if l.startswith("switch before step"))
pause = float(re.search(r"pause ([0-9.]+) ms", switch).group(1)) / 1e3
i = next(k for k, (t, l) in enumerate(lines) if l.startswith("switch before step"))
between = [l for t, l in lines[:i] if re.search(r"step +\d+  loss", l)][-1]
step_s = float(re.search(r"([0-9.]+) ms  tp=", between).group(1)) / 1e3
rows = [int(r["step"]) for r in csv.DictReader(open(f"{out}/{name}.csv"))]
lost = steps - len(set(rows)) + (len(rows) - len(set(rows)))
exch = ""
if os.path.exists(f"{out}/{name}.json"):
    rec = json.load(open(f"{out}/{name}.json"))["switches"][0]
    e = rec["exchange_s"]
    exch = f"{e:.3f} s | {pause / e:.2f} |" if e > 0 else "n/a | n/a |"
else:
    exch = "(no --json) | |"
print(f"| {name} | {t_notice_line - notice:.3f} s | {t_switch - notice:.3f} s | {step_s:.3f} s | {pause:.3f} s | {exch} {lost} |")
PY
}
echo "| case | notice -> acted on | notice -> training resumed | one step (old layout) | pause | bare exchange | pause / exchange | steps lost |"
echo "|---|---|---|---|---|---|---|---|"
run demo 4 16 6 --model tiny-dense --global-batch 24 --seq 64
gb=(--model "$HERE/edm/llama-133m.json" --global-batch 4 --seq 32 --threads 1)
run gb 4 8 3 "${gb[@]}" --json "$OUT/gb.json"
run gb-2 2 8 3 "${gb[@]}" --json "$OUT/gb-2.json"
results_end
