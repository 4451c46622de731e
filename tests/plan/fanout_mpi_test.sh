#!/usr/bin/env bash
# Node-level fan-out under mpirun (plan/fanout.h): run-transition --fanout on a fake topology
# (--gpus-per-node) moves real bytes in two or more stages between real processes; every
# destination element is verified (content oracle) after the first and the last switch, and the
# bytes that cross nodes drop by the expected factor: replicated state crosses once per node
# instead of once per process; with a tree across nodes the source's sends drop as computed.
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
# A tree across nodes (one source feeding several nodes). dp=1 -> dp=4, one process a node,
# weights only (P bytes a replica): the source feeds 3 nodes, 2 stages (s1 0->a; s2 a->b, 0->c).
# Crossing nodes: 3 P either way; the source sends 2 P instead of 3 P; a sends 1 P.
run 4 "j['fanout_applied'] and j['fanout_stages'] == 2 and j['fanout_relay_groups'] == 0 and
       j['fanout_tree_groups'] == j['fanout_tree_candidates'] > 0 and
       j['inter_node_bytes'] == j['inter_node_bytes_without_fanout'] == j['inter_node_max_send_bytes_without_fanout'] and
       j['inter_node_max_send_bytes'] * 3 == j['inter_node_max_send_bytes_without_fanout'] * 2 and
       j['fanout_tree_bytes'] * 3 == j['inter_node_bytes_without_fanout'] > 0" -- \
    --model tiny-dense --from dp=1 --to dp=4 --gpus-per-node 1 --states param --fanout on
# Two a node, three nodes (dp=1 -> dp=6): relays on nodes 1 and 2, one tree over them: stage 1
# 0 -> node 1's relay, stage 2 that relay -> node 2's, stage 3 each relay inside its node.
# Crossing nodes: 2 P instead of 4 P; the busiest sender to other nodes: P instead of 4 P.
run 6 "j['fanout_applied'] and j['fanout_stages'] == 3 and j['fanout_tree_groups'] * 2 == j['fanout_relay_groups'] > 0 and
       j['inter_node_bytes'] * 2 == j['inter_node_bytes_without_fanout'] == j['inter_node_max_send_bytes_without_fanout'] and
       j['inter_node_max_send_bytes'] * 4 == j['inter_node_max_send_bytes_without_fanout'] > 0" -- \
    --model tiny-dense --from dp=1 --to dp=6 --gpus-per-node 2 --states param --fanout on
# ZeRO-1, every state kind: weights and gradients (replicated) take the tree, the optimizer's
# shards (one per receiver) go from the source directly; the source saves exactly the copy that
# its first receiver passes on (fanout_tree_bytes).
run 4 "j['fanout_applied'] and j['fanout_stages'] == 2 and j['fanout_tree_groups'] > 0 and
       j['inter_node_bytes'] == j['inter_node_bytes_without_fanout'] and
       j['inter_node_max_send_bytes_without_fanout'] - j['inter_node_max_send_bytes'] == j['fanout_tree_bytes'] > 0" -- \
    --model tiny-dense --from dp=1 --to dp=4 --gpus-per-node 1 --bucket-elems 900 --fanout on
# MoE, a TP -> DP+EP grow on three nodes of 2, ZeRO-1 buckets: relays inside nodes 1 and 2 and a
# tree over the two relays per box (3 stages), every element verified.
run 6 "j['fanout_applied'] and j['fanout_stages'] == 3 and j['fanout_tree_groups'] * 2 == j['fanout_relay_groups'] > 0 and
       j['inter_node_bytes'] < j['inter_node_bytes_without_fanout'] and
       j['inter_node_max_send_bytes'] < j['inter_node_max_send_bytes_without_fanout']" -- \
    --model tiny-moe --from tp=2 --to dp=6,ep=2 --gpus-per-node 2 --bucket-elems 900 --fanout on
# A bad mode is rejected before MPI starts.
if timeout 60 "$dt" run-transition --model tiny-dense --from tp=1 --to dp=2 --fanout yes >"$tmp/out" 2>&1 ||
   ! grep -q "fanout" "$tmp/out"; then
  echo "FAIL: --fanout yes was not rejected"; cat "$tmp/out"; fail=1
else
  echo "ok: --fanout yes rejected"
fi
exit $fail
