#!/usr/bin/env bash
# Node-level fan-out's rule at scale (planner bytes and the rule's estimates, no engine): grows in
# which one replica feeds many new nodes, on the A800 presets (sim/cluster.h), with fan-out off,
# relay groups only, relay groups + trees across nodes, and the rule's choice (auto).
# Usage: bench/fanout/rule_at_scale.sh [BUILD=build]   (~1 minute; bench_fanout_rule target)
# Refreshes bench/results/fanout-rule.md (bench/results.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/results.sh
results_begin fanout-rule text "$0 $*"
bin="${1:-build}/bench_fanout_rule"
for cluster in a800-16x8 a800-16x8-4nic; do
  for sw in "tp=8 tp=8,dp=8" "tp=8,zero=0 tp=8,dp=8,zero=0" "tp=2 tp=2,dp=32"; do
    read -r from to <<<"$sw"
    timeout 300 "$bin" llama2-7b "$from" "$to" "$cluster"
    echo
  done
done
results_end
