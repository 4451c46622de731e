#!/usr/bin/env bash
# Validates the switch-time simulator (sim/simulator.h) against measured switches on this
# machine: every row is one `dynatrain run-transition --json` under mpirun (warm: --repeat 4
# --prefault, the warm mean over the 3 warm switches), whose JSON carries predicted_seconds,
# the simulator's prediction for that very run from the p2p bandwidth, copy rate and latency
# measured in the same run and this machine's cores shared by the processes
# (tools/predict_switch.h). Prints a Markdown table: predicted vs
# measured and the error per row (goal |error| <= 25 %).
#   bench/sim/validate.sh [BUILD_DIR]        BUILD_DIR defaults to ./build (needs `dynatrain`)
# Run it under `flock /tmp/dt-bench.lock` on a shared machine. About 5 minutes, ~6 GB peak.
set -euo pipefail
build=${1:-build}
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

out="$here/out/sim"  # one JSON per row (run-transition --json), for a closer look
mkdir -p "$out"
echo "| np | switch | max in per rank | p2p GB/s | copy GB/s | cores | latency us | measured warm s (mean / fastest) | predicted s | error vs mean | vs fastest |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
n=0
worst=0
while IFS='|' read -r np label model from to; do
  n=$((n + 1))
  mpirun -np "$np" "$exe" run-transition --model "$here/models/$model/config.json" --from "$from" --to "$to" \
    --mem-budget 256MiB --bucket-elems 4000000 --prefault --repeat 4 --json "$out/row$n.json" > "$out/row$n.txt" < /dev/null
  worst=$(python3 - "$np" "$label" "$out/row$n.json" "$worst" <<'PY'
import json, sys
np_, label, r, worst = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3])), float(sys.argv[4])
c = r["predicted_cluster"]
err = r["predicted_seconds"] / r["warm_seconds"] - 1
err_min = r["predicted_seconds"] / r["warm_min_seconds"] - 1
print(f'| {np_} | {label} | {r["max_rank_bytes_received"] / 1e9:.2f} GB | {c["gpu_link_gb_per_s"]:.2f} | {c["copy_gb_per_s"]:.2f} '
      f'| {r["predicted_cpu_cores"]:.2f} | {c["intra_latency_us"]:.0f} | {r["warm_seconds"]:.3f} / {r["warm_min_seconds"]:.3f} | {r["predicted_seconds"]:.3f} | {100 * err:+.0f} % | {100 * err_min:+.0f} % |', file=sys.stderr)
print(max(worst, abs(err)))
PY
  )
done < <(rows) 2>&1
echo
echo "worst |error| $(python3 -c "print(f'{100 * $worst:.0f} %')") (goal <= 25 %)"
