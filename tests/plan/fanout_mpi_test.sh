#!/usr/bin/env bash
# Node-level fan-out under mpirun (plan/fanout.h): run-transition --fanout on a fake topology
# (--gpus-per-node) moves real bytes in two stages between real processes; every destination
# element is verified (content oracle) after the first and the last switch, and the bytes that
# cross nodes drop by the expected factor: replicated state crosses once per node instead of
# once per process.
# Usage: fanout_mpi_test.sh DYNATRAIN MPIEXEC
set -u
dt="$1"
mpiexec="${2:-mpirun}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# run <np> <python condition on j (the --json)> -- args...
run() {
  local np="$1" cond="$2"
  shift 3
  if ! timeout 120 "$mpiexec" -np "$np" "$dt" run-transition --verify --repeat 2 --json "$tmp/j.json" "$@" \
       >"$tmp/out" 2>&1 || ! grep -q "^verify: ok" "$tmp/out" ||
     ! python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($cond) else 1)" "$tmp/j.json"; then
    echo "FAIL: mpirun -np $np dynatrain run-transition $* (want: $cond)"; cat "$tmp/out"; fail=1
  else
    echo "ok: mpirun -np $np dynatrain run-transition $* ($(grep -m1 'inter-node' "$tmp/out" | cut -c1-90 | xargs))"
  fi
}
# DP grow 1 -> 4 on 2 "nodes" of 2: the replicas of node 1 (processes 2, 3) pulled the weights
# twice across nodes; with fan-out once: exactly half.
run 4 "j['fanout_applied'] and j['inter_node_bytes'] * 2 == j['inter_node_bytes_without_fanout'] > 0" -- \
    --model tiny-dense --from dp=1 --to dp=4 --gpus-per-node 2 --states param --fanout on
# Three a node (6 processes), weights and gradients: a third.
run 6 "j['fanout_applied'] and j['inter_node_bytes'] * 3 == j['inter_node_bytes_without_fanout'] > 0" -- \
    --model tiny-dense --from dp=1 --to dp=6 --gpus-per-node 3 --states param,grad --fanout on
# Every state kind, MoE, ZeRO-1 buckets, a TP+DP grow: the ZeRO shards still cross, the
# replicated kinds are relayed.
run 6 "j['fanout_applied'] and 0 < j['inter_node_bytes'] < j['inter_node_bytes_without_fanout']" -- \
    --model tiny-moe --from tp=2 --to tp=2,dp=3,ep=2 --gpus-per-node 3 --bucket-elems 900 --fanout on
# At a step boundary: gradients are zeroed, not moved, and not relayed.
run 4 "j['fanout_applied'] and j['inter_node_bytes'] < j['inter_node_bytes_without_fanout']" -- \
    --model tiny-dense --from dp=1 --to dp=4 --gpus-per-node 2 --at-step-boundary --fanout on
# auto: tiny-dense moves kilobytes, so the second stage's fixed cost (2 ms) would not pay: one
# stage, the same bytes across nodes (the reason says so).
run 4 "not j['fanout_applied'] and j['inter_node_bytes'] == j['inter_node_bytes_without_fanout'] and 'not relayed' in j['fanout_reason']" -- \
    --model tiny-dense --from dp=1 --to dp=4 --gpus-per-node 2 --fanout auto
# A bad mode is rejected before MPI starts.
if timeout 60 "$dt" run-transition --model tiny-dense --from tp=1 --to dp=2 --fanout yes >"$tmp/out" 2>&1 ||
   ! grep -q "fanout" "$tmp/out"; then
  echo "FAIL: --fanout yes was not rejected"; cat "$tmp/out"; fail=1
else
  echo "ok: --fanout yes rejected"
fi
exit $fail
