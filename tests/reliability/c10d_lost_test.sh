#!/usr/bin/env bash
# `dynatrain train` on torch.distributed (`dynatrain launch --keep-going`, as torchrun or a
# scheduler would leave the survivors running) recovers a lost process in place
# (job/lost_peer.h): no process restarted, the interrupted step done again. tiny-dense, 4
# processes, 16 steps, ZeRO 0 (every state replicated over dp); each case against the
# uninterrupted run of its first layout:
#  1. dp=4: rank 2 SIGKILLs itself as step 5 starts (DT_FAULT delay 0: the others meet the loss
#     in step 5's collectives): one recovery line, dp=3 from step 5, the 3 survivors keep their
#     pids;
#  2. tp=2,dp=2: rank 3 killed the same (its tp peer meets the loss in the forward's collective);
#  2c. the same with --recovery-reserve: the memory the rebuild adds was made resident at the
#     start (one line), the recovery makes none ("memory ... for 0 B");
#  2b. the same with steps of about a second: ranks 0 and 1, which share no group with rank 3
#     until the step's gradient reduction, stop their compute at the next layer once rank 2
#     raised the loss's mark (job/loss_watch.h), and the recovery line counts them;
#  2d. dp=4 with steps of about a second, rank 2 killed 100 ms into step 2: no survivor shares
#     a collective with it before the gradient reduction, but the launcher reports the kill
#     through its pipe (job/sibling_loss.h) and all 3 survivors stop mid-step;
#  2e. the same without the pipe, each process the child of a parent that looks at it once a
#     second (lazy_parent.py, as torchrun's agent): the survivors' loss watches see the kill
#     in /proc (job/proc_stat.h) and all 3 stop mid-step;
#  3. dp=4: rank 2 killed as in 1, then the process of rank 3 killed from outside: two
#     recoveries (4 -> 3 -> 2 processes);
#  4. a switch prepared ahead (dp=4 -> tp=2 before step 8) when the loss comes: prepared again
#     in the survivors' world and committed at its step;
#  4b. rank 2 lost once step 4's commit barrier completed on it, while the barrier of rank 1 (then
#     of rank 0, the leader) met the loss instead: the others applied step 4, and that survivor
#     completes it in the recovery (no survivor behind the others);
#  5. tp=2,pp=2 (no replica of a rank's state): refused with one line naming the boxes, exit 1;
#  6. the store's host (world rank 0) lost: one line naming the store, exit 1;
#  7. under `dynatrain launch` without --keep-going the launcher ends the job as before (137);
#  8. --redundancy 2 on two nodes (DYNATRAIN_NODE node0 for ranks 0-1, node1 for 2-3), dp=4,
#     zero=1: node 1's two processes killed in step 5, whose optimizer shards no survivor
#     holds: rebuilt from the copies node 0 keeps (dp=2 from step 5; the copies then stop, one
#     line); without it the same loss is refused naming the boxes; the same loss after step 4's
#     commit barrier (inside the update, whose ZeRO shards are exchanged) is refused with one
#     line; on one node --redundancy 2, and --redundancy 1 on torch.distributed, are refused.
# Each run-through case checks every step in the CSV exactly once, the process count from the
# step it changes, and every loss within fp32 reduction noise of the uninterrupted run's.
# Usage: c10d_lost_test.sh DYNATRAIN
source "$(dirname "$0")/script_prelude.sh"
source "$(dirname "$0")/c10d_job.sh"

# recovered NAME LOST_RANK FROM_PROCESSES: the recovery line's step ("step N again"), checked
recovered() {
  local line
  line=$(grep -E "^recovery: lost rank $2 \(pid [0-9]+\) on node [^ ]+ of $3; .* on $(($3 - 1)) processes after a [0-9.]+ s pause .*; step [0-9]+ again$" "$tmp/$1.log") ||
    { cat "$tmp/$1.log" "$tmp/$1.err"; fail "$1: no recovery line for rank $2 of $3"; }
  sed -E 's/.*; step ([0-9]+) again$/\1/' <<<"$line" | tail -1
}
# one_line NAME PATTERN: stderr holds the launcher's line and exactly one of ours, matching
one_line() {
  (($(grep -v "^dynatrain: error: launch:" "$tmp/$1.err" | grep -c .) == 1)) && grep -Eq "$2" "$tmp/$1.err" ||
    { cat "$tmp/$1.err"; fail "$1: not one line matching '$2'"; }
}

run cont 4 "0:dp=4,zero=0"
finish cont 0
run cont_tp 4 "0:tp=2,dp=2,zero=0"
finish cont_tp 0
launch_flags=(--keep-going)

echo "1. dp=4: rank 2 killed during step 5"
run one 4 "0:dp=4,zero=0" DT_FAULT=kill:2:step:0:5 DT_FAULT_STAMP="$tmp/one.stamp" --
wait_for_step one 2
before=$(pids_by_rank one | sort)
wait_for_step one 8
after=$(pids_by_rank one | sort)
finish one 0
[[ $(grep -v "^2 " <<<"$before") == "$after" && $(wc -l <<<"$after") == 3 ]] ||
  fail "one: survivors' pids changed: before '$before', after '$after'"
at=$(recovered one 2 4)
((at == 5)) || fail "one: recovered before step $at, not 5"
check_csv one "0:4,5:3"

echo "2. tp=2,dp=2: rank 3 killed during step 5"
run tp 4 "0:tp=2,dp=2,zero=0" DT_FAULT=kill:3:step:0:5 DT_FAULT_STAMP="$tmp/tp.stamp" --
finish tp 0
at=$(recovered tp 3 4)
check_csv tp "0:4,$at:3" cont_tp

echo "2c. --recovery-reserve: the rebuild takes memory kept resident, none fresh"
run reserve 4 "0:tp=2,dp=2,zero=0" DT_FAULT=kill:3:step:0:5 DT_FAULT_STAMP="$tmp/reserve.stamp" -- --recovery-reserve
finish reserve 0
expect_line reserve "^recovery reserve: .* made resident in [0-9.]* s on rank 0 for a loss into tp=1,pp=1,dp=3,zero=0$" "no reserve line"
expect_line reserve "^recovery: lost rank 3 .*, memory [0-9.]* s for 0 B, " "the recovery made fresh memory resident"
at=$(recovered reserve 3 4)
check_csv reserve "0:4,$at:3" cont_tp

echo "2b. tp=2,dp=2, steps of about a second: the pair apart from the lost rank stops mid-step"
small=("${common[@]}") small_steps=$steps
common=(--model tiny-dense --data "$data" --global-batch 48 --seq 128 --threads 1)
steps=4
run cont_long 4 "0:tp=2,dp=2,zero=0"
finish cont_long 0
run long 4 "0:tp=2,dp=2,zero=0" DT_FAULT=kill:3:step:0:2 DT_FAULT_STAMP="$tmp/long.stamp" --
finish long 0
at=$(recovered long 3 4)
expect_line long "^recovery: .*(agree [0-9.]* s, [12] survivors\\? stopped mid-step, " "ranks 0 and 1 computed their step to its end"
check_csv long "0:4,$at:3" cont_long

echo "2d. dp=4, steps of about a second: the launcher reports the kill, every survivor stops mid-step"
# Twice 2b's batch: on a fast machine 2b's steps take 0.4 s, and 4 processes on 2 cores start a
# step up to a few hundred ms apart, so a survivor ahead of the killed rank could end its
# compute before a look at /proc (every 50 ms) sees the kill.
common=(--model tiny-dense --data "$data" --global-batch 96 --seq 128 --threads 1)
run cont_long_dp 4 "0:dp=4,zero=0"
finish cont_long_dp 0
# every_survivor_stops NAME WHY: rank 2 killed 100 ms into step 2 of the dp=4 run: all 3
# survivors stop mid-step, every step once, losses against cont_long_dp; WHY: the failure's words.
every_survivor_stops() {
  run "$1" 4 "0:dp=4,zero=0" DT_FAULT=kill:2:step:100:2 DT_FAULT_STAMP="$tmp/$1.stamp" --
  finish "$1" 0
  local at
  at=$(recovered "$1" 2 4)
  expect_line "$1" "^recovery: .*(agree [0-9.]* s, 3 survivors stopped mid-step, " "$2"
  check_csv "$1" "0:4,$at:3" cont_long_dp
}
every_survivor_stops longdp "a survivor computed its step to its end: the launcher's report of the kill did not stop it"
echo "2e. the same without the launcher's pipe (torchrun, a scheduler): a look at /proc sees the kill"
train_prefix=(python3 "$(dirname "$0")/lazy_parent.py")
every_survivor_stops longdp_nopipe \
  "a survivor computed its step to its end: no look at /proc saw the kill of a process of its node"
train_prefix=()
common=("${small[@]}") steps=$small_steps

echo "3. two losses: rank 2 during step 5, then the process of rank 3 from outside"
run two 4 "0:dp=4,zero=0" DT_FAULT=kill:2:step:0:5 DT_FAULT_STAMP="$tmp/two.stamp" --
wait_for_step two 7
kill -KILL "$(pid_of_rank two 3)"
finish two 0
first=$(recovered two 2 4) second=$(recovered two 2 3)  # rank 3 of 4 is rank 2 of the 3 survivors
check_csv two "0:4,$first:3,$second:2"

echo "4. a switch prepared ahead when the loss comes"
run ahead 4 "0:dp=4,zero=0;8:tp=2,zero=0" DT_FAULT=kill:2:step:0:5 DT_FAULT_STAMP="$tmp/ahead.stamp" --
finish ahead 0
at=$(recovered ahead 2 4)
expect_line ahead "^switch before step 8: tp=1,pp=1,dp=3,zero=0 -> tp=2,pp=1,dp=1,zero=0  processes 3 -> 2 " "the scheduled switch did not follow the recovery"
check_csv ahead "0:4,$at:3,8:2"

echo "4b. a loss in a step's commit barrier that completed on some survivors only"
# Rank 2 dies once step 4's barrier has completed on it; rank R's barrier reports the loss
# instead of completing (DT_FAULT miss), as when the lost process died midway through the
# barrier's messages: the others applied step 4, R completes it in the recovery.
for R in 1 0; do  # R = 0: the leader, which then reports step 4 itself
  run "split$R" 4 "0:dp=4,zero=0" DT_FAULT="kill:2:barrier:0:4,miss:$R:barrier:0:4" DT_FAULT_STAMP="$tmp/split$R.stamp" --
  finish "split$R" 0
  at=$(recovered "split$R" 2 4)
  ((at == 5)) || fail "split$R: recovered before step $at, not 5"
  expect_line "split$R" "; step 4's update completed on 1 survivor whose barrier met the loss; step 5 again$" "no line for the step completed"
  check_csv "split$R" "0:4,5:3"
done

echo "5. tp=2,pp=2: no replica of the lost rank's state"
run alone 4 "0:tp=2,pp=2,zero=0" DT_FAULT=kill:1:step:0:5 DT_FAULT_STAMP="$tmp/alone.stamp" --
finish alone 1
one_line alone "^dynatrain: error: lost rank 1 \(pid [0-9]+\) on node [^ ]+ of 4: no surviving process holds .* of tp=2,pp=2,dp=1,zero=0: the lost processes held the only copy; resume from a checkpoint$"

echo "6. the store's host lost"
run host 4 "0:dp=4,zero=0" DT_FAULT=kill:0:step:0:5 DT_FAULT_STAMP="$tmp/host.stamp" --
finish host 1
one_line host "^dynatrain: error: the survivors on node [^ ]+ could not agree through the torch.distributed store \(.*\): it lives in the process of world rank 0, whose loss cannot be recovered; start the job again from its newest checkpoint \(--resume DIR of its --save\)$"

echo "7. without --keep-going the launcher ends the job"
launch_flags=()
run ended 4 "0:dp=4,zero=0" DT_FAULT=kill:2:step:0:5 DT_FAULT_STAMP="$tmp/ended.stamp" --
finish ended 137
grep -q "^dynatrain: error: launch: rank 2 (pid [0-9]*) on node .* ended by SIGKILL (killed?); ending the other ranks$" "$tmp/ended.err" ||
  { cat "$tmp/ended.err"; fail "ended: no launcher line"; }
! grep -q "^recovery:" "$tmp/ended.log" || fail "ended: recovered under a launcher that ends the job"
echo "8. --redundancy 2: a lost node's ZeRO shards rebuilt from the copies on the other node"
launch_flags=(--keep-going)
run cont_z1 4 "0:dp=4,zero=1"
finish cont_z1 0
# Two kills (DT_FAULT) a few ms apart stand for the node's loss: run without the launcher's pipe
# (job/sibling_loss.h), whose report of the first, within 5 ms, could have the other node's
# survivors abandon their groups while the second is still in the boundary's exchange with
# them: it would meet the loss there and rightly survive. Its loss watch's own look at /proc
# (every 50 ms, the first kill seen only while that process exits: the launcher reaps it at
# once), then the other node's look at the mark, take tens of ms: longer than that tail.
train_prefix=(sh -c 'unset DYNATRAIN_LAUNCH_FD; DYNATRAIN_NODE=node$((RANK / 2)) exec "$0" "$@"')
run copies 4 "0:dp=4,zero=1" DT_FAULT=kill:2:step:0:5,kill:3:step:0:5 -- --redundancy 2
finish copies 0
expect_line copies "^recovery: lost rank 2 (pid [0-9]*), rank 3 (pid [0-9]*) on node node1 (the whole node) of 4; .* on 2 processes after a .*; step 5 again$" "no recovery line naming node 1's two ranks"
expect_line copies "^redundancy 2: every process is on node node0 now: no copy is kept (a loss of this node ends the job)$" "no line for the copies stopping"
expect_line copies "^  copies on another node (--redundancy 2): .* kept on rank 0, refreshed 6 times" "no copies in the summary"
check_csv copies "0:4,5:2" cont_z1
run nocopies 4 "0:dp=4,zero=1" DT_FAULT=kill:2:step:0:5,kill:3:step:0:5 --
finish nocopies 1
one_line nocopies "^dynatrain: error: lost rank 2 \(pid [0-9]+\), rank 3 \(pid [0-9]+\) on node node1 \(the whole node\) of 4: no surviving process holds .*exp_avg.* the lost processes held the only copy; resume from a checkpoint$"
run inupdate 4 "0:dp=4,zero=1" DT_FAULT=kill:2:barrier:0:4,kill:3:barrier:0:4 -- --redundancy 2
finish inupdate 1
one_line inupdate "^dynatrain: error: lost rank 2 \(pid [0-9]+\), rank 3 \(pid [0-9]+\) on node node1 \(the whole node\) of 4: the loss came during step 4's update, whose ZeRO shards were being exchanged: the survivors applied their part of it and the lost processes' part is gone, so no state is whole; resume from a checkpoint$"
train_prefix=()
run onenode 4 "0:dp=4,zero=1" -- --redundancy 2
finish onenode 2
one_line onenode "^dynatrain: error: rank 0 of 4: --redundancy 2 keeps each process's state in the memory of a process on another node, but every process of the job is on node [^ ]+ \(DYNATRAIN_NODE, else the host name\); valid on one node: --redundancy 0$"
run one_copy 4 "0:dp=4,zero=1" -- --redundancy 1
finish one_copy 2
one_line one_copy "^dynatrain: error: rank 0 of 4: --redundancy 1 keeps a copy for a restart on this node; a job on torch.distributed recovers a lost process in place: valid are 0 .* and 2 .*$"
echo "ok: on torch.distributed the CLI trainer recovers a lost process in place (same pids, no step lost or repeated); unrecoverable losses end with one line"
