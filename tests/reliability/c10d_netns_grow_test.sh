#!/usr/bin/env bash
# `dynatrain train` on torch.distributed grows onto another node and survives losing it, across
# the two rehearsal nodes (network namespaces): the job starts on node 0 alone (2 processes,
# `dynatrain launch --nnodes 1 --master-addr NODE0`, DT_JOIN_EXTERNAL=1, --keep-going), 2
# processes on node 1 join it from `dynatrain launch --join NODE0:PORT --np 2` before step 6
# (dp=2 -> dp=4, zero=0), and once node 0 printed step 10's line every process of node 1 is
# SIGKILLed, its launcher too: one recovery naming both ranks of dtc-node1, into dp=2 on node 0.
# Checks every step once, the process count from the grow and from the recovered step, every
# loss within 1e-4 of the uninterrupted run, and the 2 processes of node 0 unchanged.
# Skips (exit 77) where namespaces cannot be made.
# Usage: c10d_netns_grow_test.sh DYNATRAIN
source "$(dirname "$0")/script_prelude.sh"
source "$(dirname "$0")/c10d_job.sh"
source "$(dirname "$0")/c10d_netns.sh"

schedule="0:dp=2,zero=0;6:dp=4,zero=0"
# Steps enough that the job is still running when node 1 is killed after step 10 and when node
# 0's processes are read again after step 14 (the log is polled every 0.1 s; at 24 steps a loaded
# run once ended before the kill landed).
steps=60
port=29721
on_node() {  # R LAUNCH_FLAGS...: `dynatrain launch` in node R's namespace (hostname dtc-nodeR), Gloo on its veth
  local r=$1
  shift
  ip netns exec "$(dtc_ns "$r")" unshare --uts /bin/sh -c "hostname $(dtc_ns "$r") && exec \"\$@\"" sh \
    env GLOO_SOCKET_IFNAME="dtc-veth$r" DT_RENDEZVOUS_S=60 timeout 120 "$dt" launch "$@" --keep-going -- \
    "$dt" train "${common[@]}" --steps "$steps" --schedule "$schedule" --csv "$tmp/job.csv"
}

run cont 4 "0:dp=4,zero=0"
finish cont 0

DT_JOIN_EXTERNAL=1 on_node 0 --nnodes 1 --node-rank 0 --master-addr "$(dtc_addr 0)" --master-port "$port" --np 2 \
  >"$tmp/job.log" 2>"$tmp/job.err" &
job=$!
node0_ranks() {  # the pids of node 0's processes of the job (those with a RANK)
  local p
  for p in $(ip netns pids "$(dtc_ns 0)"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q '^RANK=' && [[ $(cat "/proc/$p/comm" 2>/dev/null) == dynatrain ]] && echo "$p"
  done | sort
}
wait_for_step job 1
before=$(node0_ranks)
on_node 1 --join "$(dtc_addr 0):$port" --np 2 >"$tmp/join.log" 2>"$tmp/join.err" &
wait_for_step job 10
for p in $(ip netns pids "$(dtc_ns 1)"); do kill -KILL "$p" 2>/dev/null; done
wait_for_step job 14
after=$(node0_ranks)
finish job 0
(($(wc -l <<<"$before") == 2)) && [[ $before == "$after" ]] || fail "job: node 0's processes changed: '$before' -> '$after'"
expect_line job "^switch before step 6: tp=1,pp=1,dp=2,zero=0 -> tp=1,pp=1,dp=4,zero=0  processes 2 -> 4 " "no grow onto node 1"
line=$(grep -E "^recovery: lost rank 2 \(pid [0-9]+\), rank 3 \(pid [0-9]+\) on node dtc-node1 \(the whole node\) of 4; .* on 2 processes .*; step [0-9]+ again$" "$tmp/job.log") ||
  { cat "$tmp/job.log" "$tmp/job.err" "$tmp/join.err"; fail "job: no recovery naming node 1's two ranks"; }
at=$(sed -E 's/.*; step ([0-9]+) again$/\1/' <<<"$line")
check_csv job "0:2,6:4,$at:2"
echo "ok: across two nodes the CLI trainer grows onto node 1 through the job's store and recovers node 1's loss on node 0"
