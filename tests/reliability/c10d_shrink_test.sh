#!/usr/bin/env bash
# `dynatrain train` on torch.distributed (a c10d world started by `dynatrain launch`, as torchrun
# would): processes leave it as under MPI (edm/store_launcher.h). tiny-dense, 4 processes in
# tp=2,dp=2, 16 steps; each case against the uninterrupted c10d run:
#  1. a schedule that shrinks to dp=2 before step 6: the job goes on in 2 processes, the 2 left
#     out end with exit 0 and the launcher with 0;
#  2. notice to rank 3 during step 5 (DT_FAULT=notice): vacated into dp=3 live;
#  3. notice to ranks 1 and 2 at once, from outside (kill -TERM of their pids): one switch
#     vacates both (one each where the signals straddle a boundary), the job goes on in 2
#     processes, the two others keep their pids;
#  4. notice to rank 0, the store's host: the vacating switch is refused with one line naming
#     why, training goes on until the notice's deadline (--notice-s 3), then one line, exit 3;
#  5. notice to every process: saved, one line, exit 143; the same when rank 0's notice was
#     refused first and the other process gets one later.
# (Grows: c10d_grow_test.sh.)
# Each run-through case checks every step in the CSV exactly once, the process count from the
# step it changes, and every loss within fp32 reduction noise of the uninterrupted run's.
# Usage: c10d_shrink_test.sh DYNATRAIN
source "$(dirname "$0")/script_prelude.sh"
source "$(dirname "$0")/c10d_job.sh"

run cont 4 "0:tp=2,dp=2"
finish cont 0

echo "1. a schedule that shrinks 4 -> 2"
run shrink 4 "0:tp=2,dp=2;6:dp=2"
finish shrink 0
expect_line shrink "^switch before step 6: tp=2,pp=1,dp=2,zero=1 -> tp=1,pp=1,dp=2,zero=1  processes 4 -> 2 " "no switch to 2 processes"
check_csv shrink "0:4,6:2"

echo "2. notice to rank 3 during step 5"
run one 4 "0:tp=2,dp=2" DT_FAULT=notice:3:step:0:5 DT_FAULT_STAMP="$tmp/one.stamp" --
finish one 0
expect_line one "^notice: rank 3 (pid [0-9]*) will be gone in 30 s (SIGTERM): vacating it into tp=1,pp=1,dp=3,zero=1 before step 7$" "no notice line"
check_csv one "0:4,7:3"

echo "3. notice to ranks 1 and 2 at once, from outside"
run two 4 "0:tp=2,dp=2"
wait_for_step two 2
ranks=$(pids_by_rank two)  # one pass: the job must not end before the notices
p0=$(awk '$1 == 0 { print $2 }' <<<"$ranks") p1=$(awk '$1 == 1 { print $2 }' <<<"$ranks")
p2=$(awk '$1 == 2 { print $2 }' <<<"$ranks") p3=$(awk '$1 == 3 { print $2 }' <<<"$ranks")
[[ -n $p0 && -n $p1 && -n $p2 && -n $p3 ]] || { echo "$ranks"; fail "two: pids of the 4 ranks not found"; }
kill -TERM "$p1" "$p2"
# Not at step 15, the run's last: a fast machine ends the job before the look below, and
# finished processes are gone too. The vacates come a few boundaries after step 2.
wait_for_step two 12
[[ -d /proc/$p0 && -d /proc/$p3 ]] || fail "two: a process that had no notice is gone"
finish two 0
sizes=$(two_notices_sizes two "$p1" "$p2") || exit 1
check_csv two "$sizes"

echo "4. notice to rank 0, the store's host"
steps=100000
run host 4 "0:tp=2,dp=2" DT_FAULT=notice:0:step:0:3 DT_FAULT_STAMP="$tmp/host.stamp" -- --notice-s 3
finish host 3
expect_line host "refused: cannot vacate processes: world rank 0 hosts the torch.distributed store" "no refusal naming the store"
(($(grep -c "^dynatrain:" "$tmp/host.err") == 1)) &&
  grep -q "^dynatrain: error: rank 0 of 4: this process had notice (SIGTERM) 3 s ago and has not handed its state over; the job ends; start it again from its newest checkpoint" "$tmp/host.err" ||
  { cat "$tmp/host.err"; fail "host: not one line naming the deadline"; }

echo "5. notice to every process"
run all 2 "0:tp=2" --save "$tmp/all.ck" --save-every 100000
wait_for_step all 3
kill -TERM "$(pid_of_rank all 0)" "$(pid_of_rank all 1)"
finish all 143
grep -Eq "^dynatrain: error: rank 0 of [12]: stopped by SIGTERM to every process: saved checkpoint of step [0-9]+$" "$tmp/all.err" ||
  { cat "$tmp/all.log" "$tmp/all.err"; fail "all: no line for the whole job's notice"; }
ls "$tmp/all.ck"/step-* >/dev/null 2>&1 || fail "all: no checkpoint saved"

echo "5b. notice to rank 0 (refused), then to the other process: every process has notice"
run hostall 2 "0:tp=2" DT_FAULT=notice:0:step:0:3 DT_FAULT_STAMP="$tmp/hostall.stamp" -- --notice-s 60
for _ in $(seq 600); do grep -q "refused: cannot vacate processes" "$tmp/hostall.log" && break; sleep 0.1; done
p1=$(pid_of_rank hostall 1)
[[ -n $p1 ]] || fail "hostall: pid of rank 1 not found"
kill -TERM "$p1"
finish hostall 143
grep -Eq "^dynatrain: error: rank 0 of 2: stopped by SIGTERM to every process: no --save, nothing saved$" "$tmp/hostall.err" ||
  { cat "$tmp/hostall.log" "$tmp/hostall.err"; fail "hostall: no line for the whole job's notice"; }

echo "ok: on torch.distributed the CLI trainer shrinks and vacates noticed processes live (no step lost); the store's host is refused by name"
