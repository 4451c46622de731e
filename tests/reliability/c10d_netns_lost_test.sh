#!/usr/bin/env bash
# `dynatrain train` on torch.distributed across the two rehearsal nodes (network namespaces,
# scripts/netns-launch.sh: `dynatrain launch --nnodes 2 --node-rank R --np 2 --keep-going` on
# each): a lost process and a lost node recovered in place (job/lost_peer.h). tiny-dense,
# dp=4,zero=0, 16 steps, against the uninterrupted run on one node:
#  a. the process of rank 3 (node 1) SIGKILLs itself as step 5 starts: recovered into dp=3;
#  b. every process of node 1, its launcher too, SIGKILLed from here after step 4's line: one
#     recovery naming both ranks of dtc-node1, into dp=2 on node 0 (the decision waits the 1 s
#     settle time: no survivor on node 1 can report its processes gone);
#  c. the same to node 0, the store's host: node 1 ends with one line naming the store, exit 1;
#  d. dp=4,zero=1 with --redundancy 2, both processes of node 1 SIGKILL themselves as step 5
#     starts (at a random moment the loss could land inside a step's update, whose ZeRO shards
#     are exchanged after the commit barrier: refused, c10d_lost_test.sh): their optimizer shards,
#     held by no other rank, rebuilt from the copies node 0 keeps, into dp=2.
# a, b and d check every step once, the process count from the recovered step and every loss
# within 1e-4 of the uninterrupted run. Skips (exit 77) where namespaces cannot be made.
# Usage: c10d_netns_lost_test.sh DYNATRAIN
source "$(dirname "$0")/script_prelude.sh"
source "$(dirname "$0")/c10d_job.sh"
source "$(dirname "$0")/c10d_netns.sh"

# on_nodes NAME PORT [ENV...]: the job on both nodes, node R's launch in the background
# (its pid in node_pid[R]); rank 0 (node 0) writes NAME.csv and NAME.log; in $schedule, with
# the train flags $train_flags
schedule="0:dp=4,zero=0" train_flags=() train_wrap=()
on_nodes() {
  local name=$1 port=$2 r
  shift 2
  for r in 0 1; do
    env "$@" DT_RENDEZVOUS_S=60 timeout 120 "$scripts/netns-launch.sh" "$r" "$dt" --np 2 --master-port "$port" \
      --keep-going -- "${train_wrap[@]}" "$dt" train "${common[@]}" --steps "$steps" --schedule "$schedule" "${train_flags[@]}" \
      --csv "$tmp/$name.csv" >"$tmp/$name.$r.log" 2>"$tmp/$name.$r.err" &
    node_pid[r]=$!
  done
}
ended() {  # NAME NODE EXPECTED_EXIT
  { wait "${node_pid[$2]}"; } 2>/dev/null
  local code=$?
  ((code == $3)) || { cat "$tmp/$1".*.log "$tmp/$1".*.err; fail "$1: node $2 exit $code, expected $3"; }
}
# lose_node NAME PORT R: the job on both nodes; once node 0 printed step 4's line, every
# process of node R's namespace, its launcher too, SIGKILLed; returns once node R's launch ended
lose_node() {
  local p
  on_nodes "$1" "$2"
  for _ in $(seq 600); do grep -Eq "step +4  loss" "$tmp/$1.0.log" 2>/dev/null && break; sleep 0.05; done
  for p in $(ip netns pids "$(dtc_ns "$3")"); do kill -KILL "$p" 2>/dev/null; done
  { wait "${node_pid[$3]}"; } 2>/dev/null
}
recovery_line() {  # NAME PATTERN: node 0's recovery line matches; prints its step
  local line
  line=$(grep -E "^recovery: lost $2 of 4; .*; step [0-9]+ again$" "$tmp/$1.0.log") ||
    { cat "$tmp/$1".*.log "$tmp/$1".*.err; fail "$1: no recovery line for $2"; }
  sed -E 's/.*; step ([0-9]+) again$/\1/' <<<"$line"
}

run cont 4 "0:dp=4,zero=0"
finish cont 0

echo "a. rank 3 of node 1 lost"
on_nodes one 29711 DT_FAULT=kill:3:step:0:5 DT_FAULT_STAMP="$tmp/one.stamp"
ended one 0 0
ended one 1 0
at=$(recovery_line one "rank 3 \(pid [0-9]+\) on node dtc-node1")
check_csv one "0:4,$at:3"

echo "b. node 1 lost whole"
lose_node node 29712 1
ended node 0 0
at=$(recovery_line node "rank 2 \(pid [0-9]+\), rank 3 \(pid [0-9]+\) on node dtc-node1 \(the whole node\)")
check_csv node "0:4,$at:2"

echo "c. node 0, the store's host, lost"
lose_node store 29713 0
ended store 1 1
(($(grep -c "^dynatrain: error: the survivors" "$tmp/store.1.err") == 1)) &&
  grep -Eq "^dynatrain: error: the survivors on node dtc-node1 could not agree through the torch.distributed store \(.*\): it lives in the process of world rank 0, whose loss cannot be recovered; start the job again from its newest checkpoint \(--resume DIR of its --save\)$" "$tmp/store.1.err" ||
  { cat "$tmp/store.1.err"; fail "store: not one line naming the store"; }
echo "d. --redundancy 2: node 1's processes lost, their ZeRO shards rebuilt from node 0's copies"
run cont_z1 4 "0:dp=4,zero=1"
finish cont_z1 0
schedule="0:dp=4,zero=1" train_flags=(--redundancy 2)
# Two kills a few ms apart stand for the node's loss: without the launcher's pipe, whose report
# of the first could stop the second before its own kill point (job/sibling_loss.h).
train_wrap=(env -u DYNATRAIN_LAUNCH_FD)
on_nodes copies 29714 DT_FAULT=kill:2:step:0:5,kill:3:step:0:5
train_wrap=()
ended copies 0 0
ended copies 1 137  # its launcher: every rank it started was killed
at=$(recovery_line copies "rank 2 \(pid [0-9]+\), rank 3 \(pid [0-9]+\) on node dtc-node1 \(the whole node\)")
grep -q "^redundancy 2: every process is on node dtc-node0 now" "$tmp/copies.0.log" ||
  { cat "$tmp/copies.0.log"; fail "copies: no line for the copies stopping"; }
check_csv copies "0:4,$at:2" cont_z1
echo "ok: across two nodes the CLI trainer recovers a lost process and a lost node in place (with --redundancy 2 also one whose state only its copies held); the store's node lost ends with one line"
