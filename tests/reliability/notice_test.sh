#!/usr/bin/env bash
# Preemption notices (job/notice.h): SIGTERM to ONE worker process of a running `dynatrain train
# --np N` job (the launcher mode: it gives its mpirun what processes need to leave) vacates that
# process's ranks into a layout for the others, in memory, and training goes on.
# tiny-dense in tp=2,dp=2 on 4 processes, 24 steps; each case against the uninterrupted run:
#  1. notice to rank 3 during step 8 (DT_FAULT=notice): seen at the next boundary (step 9), the
#     vacating switch is prepared behind step 9, the job goes on in 3 processes from step 10;
#  2. notice to ranks 1 and 2 at once, sent from outside (kill -TERM of their pids) once step 6
#     has been written: one switch vacates both (or, where the signals straddle a boundary, one
#     switch each), the job goes on in 2 processes;
#  3. notice to rank 0, the leader: its I/O moves to another process in the vacating commit;
#  4. notice during a switch's background prepare (the schedule switches to dp=4 before step
#     10, placement auto may renumber the process): acted on at the boundary after that switch
#     has committed (step 11), committed after step 11;
#  4b. notice while a switch is prepared far ahead (--lookahead 21, 20 steps of 0.3 s away
#     against a 4 s notice): that switch commits at the next boundary, the notice after it;
#  5. notice to a process that a grow (2 -> 4 before step 6) started, in its fifth step (step 10;
#     DT_FAULT counts the points a process reached);
#  6. notice to every process (2 processes): the job saves a checkpoint and ends with 143;
#  7. the same under --max-restarts: the supervisor does not restart it, exit 143.
# Each case checks: every step in the CSV exactly once (none repeated or skipped), the process
# count drops as it must, every loss within fp32 reduction noise of the uninterrupted run's
# (another dp split), and one "notice:" line naming the ranks.
# Usage: notice_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
common=(--model tiny-dense --global-batch 12 --seq 16 --threads 1)
steps=24      # the next run()'s --steps (the notices to every process need a job that outlasts them)
run_args=()   # more train flags for the next run()

timeout 300 "$dt" train --np 4 --mpirun "$mpiexec" "${common[@]}" --steps 24 --schedule "0:tp=2,dp=2" --csv "$tmp/cont.csv" \
  >"$tmp/cont.log" 2>&1 || { cat "$tmp/cont.log"; fail "uninterrupted run"; }

# check_csv NAME WORLD_SIZES: WORLD_SIZES is "STEP:N,STEP:N": from STEP on the job has N processes.
check_csv() {  # NAME WORLD_SIZES [UNINTERRUPTED_NAME]
  py "$(dirname "$0")/tracks_run.py" "$tmp/${3:-cont}.csv" "$tmp/$1.csv" 24 "$2" ||
    { grep -Ev "step +[0-9]+  loss" "$tmp/$1.log" "$tmp/$1.err"; fail "$1: CSV"; }
}

run() {  # NAME NP SCHEDULE [ENV...]: runs the job in the background, its pid in $job
  local name=$1 np=$2 schedule=$3
  shift 3
  env "$@" timeout 300 "$dt" train --np "$np" --mpirun "$mpiexec" "${common[@]}" --steps "$steps" "${run_args[@]}" \
    --schedule "$schedule" \
    --csv "$tmp/$name.csv" --save "$tmp/$name.ck" --save-every 100 >"$tmp/$name.log" 2>"$tmp/$name.err" &
  job=$!
}
pid_of_rank() {  # CSV_NAME RANK: the pid of that world rank of the job writing CSV_NAME
  local p
  for p in $(pgrep -f -- "--csv $tmp/$1.csv"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
       [[ $(cat "/proc/$p/comm") == dynatrain ]]; then echo "$p"; return; fi
  done
}

echo "1. notice to rank 3 during step 8"
run one 4 "0:tp=2,dp=2" DT_FAULT=notice:3:step:0:8 DT_FAULT_STAMP="$tmp/one.stamp"
finish one 0
grep -q "^notice: rank 3 (pid [0-9]*) will be gone in 30 s (SIGTERM): vacating it into tp=1,pp=1,dp=3,zero=1 before step 10$" "$tmp/one.log" ||
  { cat "$tmp/one.log"; fail "one: no notice line"; }
check_csv one "0:4,10:3"

echo "2. notice to ranks 1 and 2 at once, from outside"
run two 4 "0:tp=2,dp=2"
wait_for_step two 6
p1=$(pid_of_rank two 1) p2=$(pid_of_rank two 2)
[[ -n $p1 && -n $p2 ]] || fail "two: pids of ranks 1 and 2 not found"
kill -TERM "$p1" "$p2"
finish two 0
sizes=$(two_notices_sizes two "$p1" "$p2") || exit 1
check_csv two "$sizes"

echo "3. notice to rank 0, the leader"
run lead 4 "0:tp=2,dp=2" DT_FAULT=notice:0:step:0:5 DT_FAULT_STAMP="$tmp/lead.stamp"
finish lead 0
grep -q "^notice: rank 0 (pid [0-9]*) will be gone in 30 s (SIGTERM): vacating it into tp=1,pp=1,dp=3,zero=1 before step 7$" "$tmp/lead.log" ||
  { cat "$tmp/lead.log"; fail "lead: no notice line"; }
grep -q "^leader: process [0-9]* took over the job's I/O as world rank 0 before step 7$" "$tmp/lead.log" ||
  fail "lead: no leader hand-over"
check_csv lead "0:4,7:3"

echo "4. notice during a switch's prepare"
run during 4 "0:tp=2,dp=2;10:dp=4" DT_FAULT=notice:2:prepare:0 DT_FAULT_STAMP="$tmp/during.stamp"
finish during 0
grep -q "^switch before step 10: tp=2,pp=1,dp=2,zero=1 -> tp=1,pp=1,dp=4,zero=1 " "$tmp/during.log" ||
  { cat "$tmp/during.log"; fail "during: the scheduled switch did not commit"; }
grep -q "^notice: rank [0-9] (pid [0-9]*) will be gone in 30 s (SIGTERM): vacating it into tp=1,pp=1,dp=3,zero=1 before step 12$" "$tmp/during.log" ||
  { cat "$tmp/during.log"; fail "during: notice not acted on after the switch"; }
check_csv during "0:4,12:3"

echo "4b. notice while a switch is prepared far ahead"
# Steps of about 0.3 s: the switch to dp=4, prepared from step 2, is 20 steps (6 s) away, more
# than half the 4 s notice, so it commits at the next boundary and the notice is acted on after.
small=("${common[@]}")
common=(--model tiny-dense --global-batch 48 --seq 64 --threads 1)
timeout 300 "$dt" train --np 4 --mpirun "$mpiexec" "${common[@]}" --notice-s 4 --steps 24 --schedule "0:tp=2,dp=2" \
  --csv "$tmp/cont_big.csv" >"$tmp/cont_big.log" 2>&1 || { cat "$tmp/cont_big.log"; fail "uninterrupted run (4b)"; }
run_args=(--notice-s 4 --lookahead 21)
run ahead 4 "0:tp=2,dp=2;23:dp=4" DT_FAULT=notice:2:step:0:2 DT_FAULT_STAMP="$tmp/ahead.stamp"
run_args=()
common=("${small[@]}")
finish ahead 0
grep -q "^notice: rank 2 (pid [0-9]*) has notice while the switch to tp=1,pp=1,dp=4,zero=1 planned before step 23 is prepared: committing it now, before step 3 " "$tmp/ahead.log" ||
  { cat "$tmp/ahead.log"; fail "ahead: the prepared switch did not come sooner"; }
grep -q "^switch before step 3: tp=2,pp=1,dp=2,zero=1 -> tp=1,pp=1,dp=4,zero=1 " "$tmp/ahead.log" ||
  { cat "$tmp/ahead.log"; fail "ahead: no switch before step 3"; }
grep -Eq "^notice: rank [0-9] \(pid [0-9]*\) will be gone in 4 s \(SIGTERM\): vacating it into tp=1,pp=1,dp=3,zero=1 before step [45]$" "$tmp/ahead.log" ||
  { cat "$tmp/ahead.log"; fail "ahead: notice not acted on after the switch"; }
at=$(sed -n 's/^notice: rank .* before step \([0-9]*\)$/\1/p' "$tmp/ahead.log")
check_csv ahead "0:4,$at:3" cont_big

echo "5. notice to a process a grow started"
run grown 2 "0:dp=2;6:tp=2,dp=2" DT_FAULT=notice:3:step:0:4 DT_FAULT_STAMP="$tmp/grown.stamp"
finish grown 0
grep -q "^switch before step 6: .* processes 2 -> 4 " "$tmp/grown.log" || { cat "$tmp/grown.log"; fail "grown: no grow"; }
grep -q "^notice: rank 3 (pid [0-9]*) will be gone in 30 s (SIGTERM): vacating it into tp=1,pp=1,dp=3,zero=1 before step 12$" "$tmp/grown.log" ||
  { cat "$tmp/grown.log"; fail "grown: no notice line"; }
check_csv grown "0:2,6:4,12:3"

echo "6. notice to every process"
steps=3000
run all 2 "0:tp=2"
wait_for_step all 4
kill -TERM $(pid_of_rank all 0) $(pid_of_rank all 1)
finish all 143
# The two signals may straddle a step boundary: then the first vacates its process and the job,
# on the other alone, has notice to every process one or two boundaries later ("rank 0 of 1").
grep -Eq "^dynatrain: error: rank 0 of [12]: stopped by SIGTERM to every process: saved checkpoint of step [0-9]+$" "$tmp/all.err" ||
  { cat "$tmp/all.log" "$tmp/all.err"; fail "all: no line for the whole job's notice"; }
ls "$tmp/all.ck"/step-* >/dev/null 2>&1 || fail "all: no checkpoint saved"
grep -q "^notice: every process has notice; the job ends (SIGTERM)$" "$tmp/all.log" || fail "all: no notice line on stdout"

echo "7. notice to every process of a supervised job: no restart"
run_args=(--max-restarts 2)
run allsup 2 "0:tp=2"
run_args=()
wait_for_step allsup 4
kill -TERM $(pid_of_rank allsup 0) $(pid_of_rank allsup 1)
finish allsup 143
grep -q "^supervise: every process had notice; the job ends without a restart$" "$tmp/allsup.log" ||
  { cat "$tmp/allsup.log" "$tmp/allsup.err"; fail "allsup: no supervisor line"; }
grep -q "restart 1 of" "$tmp/allsup.log" && fail "allsup: the supervisor restarted the job"
echo "ok: notices to one, two, the leader, during a switch and to a grown process vacate in memory (no step lost); a notice to all saves and ends"
