#!/usr/bin/env bash
# What `dynatrain simulate` costs at cluster scale: wall time and peak memory (GNU time) of
# one simulate per row, 128-1024 processes, with the time split the command prints (plan /
# trace the engine / simulate). Prints a Markdown table.
#   bench/sim/scale.sh [BUILD_DIR]        BUILD_DIR defaults to ./build (needs `dynatrain`)
# Run it under `flock /tmp/dt-bench.lock` on a shared machine. About 30 s, ~1 GB peak.
set -euo pipefail
source "$(dirname "$0")/../results.sh"  # refreshes bench/results/sim-scale.md
results_begin sim-scale markdown "$0 $*"
build=${1:-build}
exe="$build/dynatrain"
[[ -x "$exe" ]] || { echo "no $exe; build the dynatrain target first" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "needs GNU time (/usr/bin/time, Debian package 'time')" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# processes|cluster|model|from|to|placement
rows() {
  cat <<ROWS
128|a800-16x8|llama2-70b|tp=8,pp=4,dp=4|tp=4,pp=8,dp=4|auto
192|a800-16x8|qwen3-235b-a22b|tp=4,pp=2,dp=16,ep=16|tp=2,pp=2,dp=48,ep=32|auto
512|h100-nx8|llama2-70b|tp=8,pp=8,dp=8|tp=8,pp=16,dp=4|fixed
1024|h100-nx8|llama2-70b|tp=8,pp=8,dp=16|tp=8,pp=16,dp=8|fixed
ROWS
}

echo "| processes | cluster | switch | placement | wall s | peak RSS | plan s | trace s | simulate s | trace events | predicted s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
while IFS='|' read -r np cluster model from to placement; do
  /usr/bin/time -f "%e %M" -o "$tmp/time" "$exe" simulate --cluster "$cluster" --model "$model" --from "$from" --to "$to" \
    --placement "$placement" --mem-budget 16GiB --json "$tmp/r.json" > "$tmp/out" < /dev/null
  python3 - "$np" "$cluster" "$model $from -> $to" "$placement" "$tmp/time" "$tmp/r.json" <<'PY'
import json, sys
np_, cluster, switch, placement, tf, jf = sys.argv[1:]
wall, rss_kb = open(tf).read().split()[-2:]
r = json.load(open(jf))
assert r["processes"] == int(np_), (r["processes"], np_)
print(f'| {np_} | {cluster} | {switch} | {placement} | {float(wall):.1f} | {int(rss_kb) / 2**20:.2f} GiB '
      f'| {r["plan_seconds"]:.2f} | {r["trace_seconds"]:.2f} | {r["simulate_seconds"]:.2f} | {r["trace_events"]} | {r["predicted_seconds"]:.3f} |')
PY
done < <(rows)
results_end
