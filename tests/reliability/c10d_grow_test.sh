#!/usr/bin/env bash
# `dynatrain train` on torch.distributed (a c10d world started by `dynatrain launch`, as torchrun
# would) grows: new processes join through the job's rendezvous store behind training steps
# (edm/store_launcher.h) and the grow commits as a planned switch. tiny-dense, 16 steps; each
# run-through case against the uninterrupted run in tp=2,dp=2 on 4 processes:
#  1. a schedule that grows dp=2 -> tp=2,dp=2 before step 6: world rank 0 starts the 2 joining
#     processes itself; the job goes on in 4 from step 6, the 2 first processes keep their pids;
#  2. the same with DT_JOIN_EXTERNAL=1: the joiners come from `dynatrain launch --join
#     HOST:PORT --np 2 -- <the job's command>`, started while the job trains;
#  3. a joiner with another command (--lr): the grow is refused by name, the job goes on in 2
#     processes, the joiners end with one line each;
#  4. nobody joins within DT_RENDEZVOUS_S (DT_JOIN_EXTERNAL=1), or the processes rank 0 starts
#     end first (DT_EDM_EXECUTABLE=/bin/false): refused by name, goes on in 2;
#  5. with --keep-going, a joined process (rank 3) SIGKILLs itself as its 4th step starts: recovered
#     in place on the 3 others (the recovery's keys are the grown world's, shared with joiners);
#  6. a scheduler's requests (`train --job DIR`, `dynatrain request --to ... --wait`): a grow to
#     tp=2,dp=2 on 4 processes, then back to dp=2 on 2, each committed at the step it names;
#     400 steps, against the run whose schedule has the same switches at the same steps.
# Each run-through case checks every step in the CSV exactly once, the process count from the
# step it changes, and every loss within fp32 reduction noise of the uninterrupted run's.
# Usage: c10d_grow_test.sh DYNATRAIN
source "$(dirname "$0")/script_prelude.sh"
source "$(dirname "$0")/c10d_job.sh"

# master_port NAME: the store's port of the job writing NAME's CSV (its processes' MASTER_PORT)
master_port() {
  local p port
  for _ in $(seq 300); do
    for p in $(pgrep -f -- "--csv $tmp/$1.csv"); do
      port=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^MASTER_PORT=//p')
      [[ -n $port ]] && { echo "$port"; return; }
    done
    sleep 0.1
  done
  fail "$1: no process with a MASTER_PORT"
}
# external NAME [TRAIN FLAGS...]: a job of 2 growing to 4 before step 6 with DT_JOIN_EXTERNAL=1,
# the 2 joiners started by `launch --join` (with these flags) once it trains; waits for both;
# the joiners' exit status in $joined
external() {
  local name=$1 port joiners
  shift
  run "$name" 2 "0:dp=2;6:tp=2,dp=2" DT_JOIN_EXTERNAL=1 --
  port=$(master_port "$name")
  wait_for_step "$name" 2
  DT_RENDEZVOUS_S=60 timeout 300 "$dt" launch --join "127.0.0.1:$port" --np 2 -- "$dt" train "${common[@]}" \
    --steps "$steps" --schedule "0:dp=2;6:tp=2,dp=2" --csv "$tmp/$name.csv" "$@" >"$tmp/$name.join.log" 2>"$tmp/$name.join.err" &
  joiners=$!
  finish "$name" 0
  joined=0
  wait "$joiners" || joined=$?
}
started_by_launch() {  # NAME: "RANK PID" of the job's processes that `launch` started (no DYNATRAIN_JOIN)
  local r p
  pids_by_rank "$1" | while read -r r p; do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q '^DYNATRAIN_JOIN=' || echo "$r $p"
  done
}
grew() {  # NAME: the grow's switch line, 2 -> 4 processes before step 6
  expect_line "$1" "^switch before step 6: tp=1,pp=1,dp=2,zero=1 -> tp=2,pp=1,dp=2,zero=1  processes 2 -> 4 " "no grow to 4 processes before step 6"
}

run cont 4 "0:tp=2,dp=2"
finish cont 0

echo "1. a schedule that grows 2 -> 4, the joiners started by world rank 0"
run grow 2 "0:dp=2;6:tp=2,dp=2"
wait_for_step grow 1
before=$(started_by_launch grow | sort)
(($(wc -l <<<"$before") == 2)) || fail "grow: not 2 processes before the grow: '$before'"
p0=$(awk '$1 == 0 { print $2 }' <<<"$before") p1=$(awk '$1 == 1 { print $2 }' <<<"$before")
wait_for_step grow 8
started=$(pgrep -P "$p0" -x dynatrain | wc -l)
[[ -d /proc/$p0 && -d /proc/$p1 ]] || fail "grow: a process of the job's start is gone after the grow"
finish grow 0
((started == 2)) || fail "grow: world rank 0 started $started processes, not 2"
grew grow
check_csv grow "0:2,6:4"

echo "2. joiners from dynatrain launch --join (DT_JOIN_EXTERNAL=1)"
external ext
((joined == 0)) || { cat "$tmp/ext.join.log" "$tmp/ext.join.err"; fail "ext: the joiners' launch exited $joined"; }
grew ext
check_csv ext "0:2,6:4"

echo "3. a joiner that runs another command"
external other --lr 0.5
((joined == 2)) || fail "other: the joiners' launch exited $joined, not 2"
expect_line other "^switch before step 6: .* refused: cannot start 2 process(es): joining process [01] runs \`.*--lr 0.5.*\`, the job runs \`" "no refusal naming the command"
(($(grep -c "^dynatrain: error: .*called its grow off: joining process" "$tmp/other.join.err") >= 1)) ||
  { cat "$tmp/other.join.err"; fail "other: the joiners did not say why they ended"; }
(($(grep -Ec "step +[0-9]+  loss .*  2 processes" "$tmp/other.log") == 16)) || fail "other: not 16 steps on 2 processes"

echo "4. nobody joins within DT_RENDEZVOUS_S"
run alone 2 "0:dp=2;6:tp=2,dp=2" DT_JOIN_EXTERNAL=1 DT_RENDEZVOUS_S=3 --
finish alone 0
expect_line alone "refused: cannot start 2 process(es): 0 of the 2 joining process(es) came to the job's store at .* within 3 s (DT_RENDEZVOUS_S); with DT_JOIN_EXTERNAL=1 start them with \`dynatrain launch --join " "no refusal naming the wait"
(($(grep -Ec "step +[0-9]+  loss .*  2 processes" "$tmp/alone.log") == 16)) || fail "alone: not 16 steps on 2 processes"

echo "4b. the processes rank 0 starts end before they join (DT_EDM_EXECUTABLE=/bin/false)"
run ended 2 "0:dp=2;6:tp=2,dp=2" DT_EDM_EXECUTABLE=/bin/false --
finish ended 0
expect_line ended "refused: cannot start 2 process(es): process [0-9]*, started to join the job, ended with status 1 (0 of 2 joined); training continues in" "no refusal naming the ended process"
(($(grep -Ec "step +[0-9]+  loss .*  2 processes" "$tmp/ended.log") == 16)) || fail "ended: not 16 steps on 2 processes"

echo "5. a joined process lost after the grow (--keep-going)"
launch_flags=(--keep-going)
run lost 2 "0:dp=2,zero=0;6:dp=4,zero=0" DT_FAULT=kill:3:step:0:3 DT_FAULT_STAMP="$tmp/lost.stamp" --
finish lost 0
expect_line lost "^switch before step 6: .* processes 2 -> 4 " "no grow to 4 processes"
expect_line lost "^recovery: lost rank 3 (pid [0-9]*) on node [^ ]* of 4; .* on 3 processes after a [0-9.]* s pause .*; step [0-9]* again$" "no recovery of rank 3"
at=$(sed -n "s/^recovery: lost rank 3 .*; step \([0-9]*\) again$/\1/p" "$tmp/lost.log")
run cont_dp 4 "0:dp=4,zero=0"
finish cont_dp 0
check_csv lost "0:2,6:4,$at:3" cont_dp
echo "6. a scheduler's requests (--job DIR): grow 2 -> 4, then back to 2"
launch_flags=()
steps=400
mkdir "$tmp/job"
run req 2 "0:dp=2" -- --job "$tmp/job"
wait_for_step req 20
"$dt" request --job "$tmp/job" --to tp=2,dp=2 --wait --timeout 120 >"$tmp/req.grow" 2>&1 ||
  { cat "$tmp/req.grow" "$tmp/req.log" "$tmp/req.err"; fail "req: the grow request was not committed"; }
"$dt" request --job "$tmp/job" --to dp=2 --wait --timeout 120 >"$tmp/req.shrink" 2>&1 ||
  { cat "$tmp/req.shrink" "$tmp/req.err"; fail "req: the shrink request was not committed"; }
finish req 0
up=$(sed -n 's/.*: committed before step \([0-9]*\) .*/\1/p' "$tmp/req.grow")
down=$(sed -n 's/.*: committed before step \([0-9]*\) .*/\1/p' "$tmp/req.shrink")
run sched 2 "0:dp=2;$up:tp=2,dp=2;$down:dp=2"  # the same switches from the schedule: the same losses
finish sched 0
check_csv req "0:2,$up:4,$down:2" sched
echo "ok: on torch.distributed the CLI trainer grows through the job's store (joiners started by the job or by dynatrain launch --join), refuses a grow that cannot happen by name, recovers a joined process lost later, and grows on a scheduler's request"
