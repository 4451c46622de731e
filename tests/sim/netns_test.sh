#!/usr/bin/env bash
# The two-node rehearsal path end to end, small: two network namespaces, Open MPI launched
# across them through scripts/netns-agent.sh, run-transition with auto placement verified byte
# for byte. Skips (exit 77) where network namespaces cannot be made (not root, no iproute2).
# Usage: netns_test.sh DYNATRAIN
set -u
dt="$1"
scripts="$(cd "$(dirname "$0")/../../scripts" && pwd)"
export DTC_STATE
DTC_STATE=$(mktemp -d)
source "$scripts/netns-env.sh"
dtc_test_nodes 8 2
# Ranks 0-1 run in node 0, ranks 2-3 in node 1 (each namespace has its own hostname).
hosts=$(timeout 60 "$scripts/netns-mpirun.sh" -np 4 hostname 2>&1 | sort | uniq -c | xargs)
[[ $hosts == "2 dtc-node0 2 dtc-node1" ]] || { echo "FAIL: ranks ran on '$hosts', not 2 per namespace"; exit 1; }
out=$(timeout 120 "$scripts/netns-mpirun.sh" -np 4 "$dt" run-transition --model tiny-dense --from tp=4 --to tp=2,dp=2 \
      --gpus-per-node 2 --placement auto --verify --repeat 2 2>&1)
echo "$out"
grep -q "^verify: ok" <<<"$out" || { echo "FAIL: no verified switch across the namespaces"; exit 1; }
grep -q "placement            0,2,1,3" <<<"$out" || { echo "FAIL: auto placement is not the planner's 0,2,1,3"; exit 1; }
echo "ok: run-transition across two network namespaces"
