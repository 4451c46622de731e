#!/usr/bin/env bash
# Planner benchmark: plan + check the two reference switches on one core.
# Usage: bench/plan_bench.sh [path/to/dynatrain]   -> prints one line per case, JSON in bench/out/,
# and refreshes bench/results/planner.md (bench/results.sh).
set -euo pipefail
source "$(dirname "$0")/results.sh"
results_begin planner text "$0 $*"
dt="${1:-$(dirname "$0")/../build/dynatrain}"
out="$(dirname "$0")/out"
mkdir -p "$out"
run() {  # name model from to [extra plan flags]
  taskset -c 0 "$dt" plan --model "$2" --from "$3" --to "$4" --check --json "$out/plan_$1.json" "${@:5}" >/dev/null
  python3 - "$out/plan_$1.json" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<10} {j['from']:>30} -> {j['to']:<30} plan {j['plan_seconds']*1e3:7.1f} ms  "
      f"one rank {j['rank_plan_seconds']*1e3:6.1f} ms  check {j['check_seconds']*1e3:6.1f} ms  "
      f"planner memory {j['planner_peak_bytes']/2**20:5.0f} MiB  check: {j['check']}  "
      f"inter-node {j['total']['inter_node_bytes']/2**30:.0f} GiB (fixed {j['fixed_inter_node_bytes']/2**30:.0f})  "
      f"placement {j['placement']} {j['placement_seconds']*1e3:.1f} ms")
PY
}
run qwen3 qwen3-235b-a22b "tp=4,pp=2,dp=16,ep=16" "tp=2,pp=2,dp=48,ep=32"
run llama70b llama2-70b "tp=8,pp=4,dp=4" "tp=4,pp=8,dp=4"
# The same switches with the destination placement chosen for locality (plan/placement.h).
run qwen3-auto qwen3-235b-a22b "tp=4,pp=2,dp=16,ep=16" "tp=2,pp=2,dp=48,ep=32" --placement auto
run llama-auto llama2-70b "tp=8,pp=4,dp=4" "tp=4,pp=8,dp=4" --placement auto
results_end
