#!/usr/bin/env bash
# The paper's cases on the described clusters (`dynatrain simulate`, --mem-budget 16GiB), each
# predicted three ways so the engine's schedule changes can be read apart:
#   one pipeline   --overlap-links off --rounds-in-flight 2 (the engine before link classes)
#   overlap only   --overlap-links on  --rounds-in-flight 2 (one pipeline per link class)
#   default        the engine's defaults across nodes (one pipeline per class, 2 intra-node and 8
#                  inter-node rounds in flight)
# Each cell: predicted s (link-aware lower bound s, busiest link's utilisation). Prints a
# Markdown table. Deterministic (no timing), so the machine's load does not change the figures.
#   bench/sim/predict.sh [BUILD_DIR]     BUILD_DIR defaults to ./build (needs `dynatrain`)
# About 4 minutes on 2 cores, ~4 GB peak (the qwen3 rows trace 192 processes).
set -euo pipefail
source "$(dirname "$0")/../results.sh"  # refreshes bench/results/sim-predict.md
results_begin sim-predict markdown "$0 $*"
build=${1:-build}
exe="$build/dynatrain"
[[ -x "$exe" ]] || { echo "no $exe; build the dynatrain target first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

llama="llama2-70b|tp=8,pp=4,dp=4|tp=4,pp=8,dp=4"
qwen="qwen3-235b-a22b|tp=4,pp=2,dp=16,ep=16|tp=2,pp=2,dp=48,ep=32"
# switch|cluster|placement|extra flags
rows() {
  for sw in "$llama" "$qwen"; do
    for cluster in a800-16x8 a800-16x8-4nic; do
      for placement in fixed auto; do echo "$sw|$cluster|$placement|"; done
      echo "$sw|$cluster|auto|--at-step-boundary"
    done
  done
}

cell() {  # model from to cluster placement extra... -> "predicted (bound, utilisation)"
  local model=$1 from=$2 to=$3 cluster=$4 placement=$5
  shift 5
  "$exe" simulate --cluster "$cluster" --model "$model" --from "$from" --to "$to" --placement "$placement" \
    --mem-budget 16GiB "$@" --json "$tmp/r.json" > /dev/null < /dev/null
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); u=j["busiest_link_seconds"]/j["predicted_seconds"]
print("%.2f s (%.2f s, %.2f)" % (j["predicted_seconds"], j["lower_bound_seconds"], u))' "$tmp/r.json"
}

echo "| switch | cluster | placement | one pipeline | overlap only | default (overlap, 2 + 8 in flight) |"
echo "|---|---|---|---|---|---|"
while IFS='|' read -r model from to cluster placement extra; do
  read -r -a flags <<< "$extra"
  a=$(cell "$model" "$from" "$to" "$cluster" "$placement" "${flags[@]}" --overlap-links off --rounds-in-flight 2)
  b=$(cell "$model" "$from" "$to" "$cluster" "$placement" "${flags[@]}" --overlap-links on --rounds-in-flight 2)
  c=$(cell "$model" "$from" "$to" "$cluster" "$placement" "${flags[@]}")
  label="$placement"
  [[ -n "$extra" ]] && label="$placement, at a step boundary"
  echo "| $model \`$from -> $to\` | $cluster | $label | $a | $b | $c |"
done < <(rows)
results_end
