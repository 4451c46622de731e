#!/usr/bin/env bash
# Validates the switch-time simulator (sim/simulator.h) against measured switches on this
# machine. Every row runs RUNS times (default 3) as one `dynatrain run-transition --json` under
# mpirun (--prefault --repeat 4: one cold and 3 warm switches). Each run measures its own rates
# (p2p bandwidth, copy rate, latency, the cores the processes get, the cost of one run of a
# scattered direct message at the switch's mean run size) and its JSON carries
# predicted_seconds, the simulator's prediction for that run from those rates
# (tools/predict_switch.h): the link rate is calibrated on the same run's plain exchange (the
# switch's bytes, peers, order and chunks as plain messages from warm buffers); the last column
# and the latency is the larger of an idle ping-pong and a handshake while every process copies;
# the last two columns are the prediction with the idle latency, and with the link probe's rate
# and the idle latency (the model before both). Measured = the median of every warm switch of the row's runs;
# predicted = the median of the runs' predictions; nothing is fitted to the switch's own time. Prints a Markdown
# table with the spread of both (the goal: |error| <= 25 % on at least 8 switches).
#   bench/sim/validate.sh [BUILD_DIR] [RUNS]   BUILD_DIR defaults to ./build (needs `dynatrain`)
# Run it under `flock /tmp/dt-bench.lock` on a shared machine. About 5 minutes a run, ~6 GB peak.
set -euo pipefail
source "$(dirname "$0")/../results.sh"  # refreshes bench/results/sim-validate.md
results_begin sim-validate markdown "$0 $*"
build=${1:-build}
runs=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
exe="$build/dynatrain"
[[ -x "$exe" ]] || { echo "no $exe; build the dynatrain target first" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# NP|label|model dir|from|to
rows() {
  cat <<ROWS
2|TP -> DP, 2 processes|bench-dense|tp=2|dp=2
4|TP tp=2,dp=2 -> tp=4|bench-dense|tp=2,dp=2|tp=4
4|PP pp=2,dp=2 -> pp=4|bench-dense|pp=2,dp=2|pp=4
4|DP shrink dp=4 -> dp=2 (4 -> 2 ranks)|bench-dense|dp=4|dp=2
4|DP grow dp=2 -> tp=2,dp=2 (2 -> 4 ranks)|bench-dense|dp=2|tp=2,dp=2
4|EP dp=4,ep=2 -> ep=4 (MoE)|bench-moe|dp=4,ep=2|dp=4,ep=4
8|hybrid tp=2,dp=4 -> tp=4,pp=2|bench-dense|tp=2,dp=4|tp=4,pp=2
8|MoE grow dp=4,ep=4 -> dp=8,ep=8 (4 -> 8 ranks)|bench-moe|dp=4,ep=4|dp=8,ep=8
8|MoE shrink dp=8,ep=8 -> tp=2,dp=2,ep=4 (8 -> 4 ranks)|bench-moe|dp=8,ep=8|tp=2,dp=2,ep=4
ROWS
}

out="$here/out/sim"  # one JSON per row and run (run-transition --json), for a closer look
mkdir -p "$out"
echo "| np | switch | max in per rank | plain exchange s (median of 5) | link GB/s: probe -> calibrated | copy GB/s | cores | latency us: idle -> busy | run us (run KiB) | measured warm s: median (range) | predicted s: median (range) | runs free s | error | idle latency: s, error | probe's link, idle latency: s, error |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
n=0
worst=0
within=0
while IFS='|' read -r np label model from to; do
  n=$((n + 1))
  files=()
  for k in $(seq 1 "$runs"); do
    mpirun -np "$np" "$exe" run-transition --model "$here/models/$model/config.json" --from "$from" --to "$to" \
      --mem-budget 256MiB --bucket-elems 4000000 --prefault --repeat 4 --json "$out/row${n}_$k.json" \
      > "$out/row${n}_$k.txt" < /dev/null
    files+=("$out/row${n}_$k.json")
  done
  read -r worst within < <(python3 - "$np" "$label" "$worst" "$within" "${files[@]}" <<'PY'
import json, statistics, sys
np_, label, worst, within = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
runs = [json.load(open(f)) for f in sys.argv[5:]]
warm = [s for r in runs for s in r["forward_seconds"][1:]]
pred = [r["predicted_seconds"] for r in runs]
m, p = statistics.median(warm), statistics.median(pred)
err = p / m - 1
def span(vals, fmt):
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if abs(hi - lo) < 1e-12 else fmt.format(lo) + "-" + fmt.format(hi)
c = [r["predicted_cluster"] for r in runs]
probe = [r["predicted_probe_link_seconds"] for r in runs]
idle = [r["predicted_idle_latency_seconds"] for r in runs]
print(f'| {np_} | {label} | {runs[0]["max_rank_bytes_received"] / 1e9:.2f} GB '
      f'| {span([r["plain_exchange_median_seconds"] for r in runs], "{:.3f}")} '
      f'| {span([r["predicted_probe_link_gb_per_s"] for r in runs], "{:.2f}")} -> {span([x["gpu_link_gb_per_s"] for x in c], "{:.2f}")} '
      f'| {span([x["copy_gb_per_s"] for x in c], "{:.2f}")} '
      f'| {span([r["predicted_cpu_cores"] for r in runs], "{:.2f}")} | {span([r["predicted_idle_latency_us"] for r in runs], "{:.0f}")} -> {span([x["intra_latency_us"] for x in c], "{:.0f}")} '
      f'| {span([1e6 * r["predicted_run_seconds"] for r in runs], "{:.2f}")} ({runs[0]["predicted_run_bytes"] / 1024:.1f}) '
      f'| {m:.3f} ({min(warm):.3f}-{max(warm):.3f}) | {p:.3f} ({min(pred):.3f}-{max(pred):.3f}) '
      f'| {statistics.median([r["predicted_without_runs_seconds"] for r in runs]):.3f} | {100 * err:+.0f} % '
      f'| {statistics.median(idle):.3f}, {100 * (statistics.median(idle) / m - 1):+.0f} % '
      f'| {statistics.median(probe):.3f}, {100 * (statistics.median(probe) / m - 1):+.0f} % |', file=sys.stderr)
print(max(worst, abs(err)), within + (abs(err) <= 0.25))
PY
  )
done < <(rows) 2>&1
echo
echo "$within of $n rows within 25 %; worst |error| $(python3 -c "print(f'{100 * $worst:.0f} %')") (goal: at least 8 rows)"
results_end
