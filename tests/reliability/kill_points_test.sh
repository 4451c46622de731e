#!/usr/bin/env bash
# A supervised job (`dynatrain train --max-restarts 2 --np 4`, job/supervisor.h) survives a
# SIGKILL of one process wherever it lands. tiny-dense, 14 steps, saving every 4; the schedule
# switches tp=2,dp=2 -> dp=4 before step 10, prepared from step 7 on (--lookahead 3), so a
# switch's prepare and commit are there to hit:
#  a. mid-step: rank 1 is killed 30 ms into step 6 (DT_FAULT=kill:1:step:30:6);
#  b. during the background prepare of the switch before step 10 (DT_FAULT=kill:2:prepare:20);
#  c. during that switch's commit: rank 3 dies as the commit begins (DT_FAULT=kill:3:switch:0) while
#     its peers enter the commit's exchange and wait on it. (A kill timed to land inside the pause
#     raced the commit itself: its pause is 3-6 ms on a loaded 2-core machine.)
# Each again with the state's memory copy (--redundancy 1, job/memory_copy.h): the restart must
# resume the boundary after the last step done, 0 steps lost (from the copy, or from --save's
# checkpoint where a kill between a boundary's save and its copy left that one newer); and rank 0 killed between a
# copy and its report of the step before it (DT_FAULT=kill:0:copied:0:2): the copy proves the step
# done though no record of it came; and rank 2 killed between the save of the boundary before
# step 8 and its copy (DT_FAULT=kill:2:saved:0:1): --save's checkpoint is the newer, 0 steps lost.
# Each case checks: exit 0; the first attempt never committed the switch; exactly one supervisor
# restart line, whose steps lost equal the last step run + 1 - the checkpoint it restarts from; the
# assembled CSV holds every step exactly once, marks the restart with those steps lost, and every
# loss is within 1e-4 relative of the uninterrupted run's (fp32 reduction noise of another dp split, as restart_test.sh).
# Usage: kill_points_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"  # $dt, $mpiexec, $here, $tmp, $data, fail
common=(--model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1 --steps 14 --lookahead 3)
schedule="0:tp=2,dp=2;10:dp=4"
failed=()

timeout 300 "$mpiexec" -np 4 "$dt" train "${common[@]}" --schedule "$schedule" --csv "$tmp/cont.csv" \
  >"$tmp/cont.log" 2>&1 || { cat "$tmp/cont.log"; fail "uninterrupted run"; }
grep -q "^switch before step 10: " "$tmp/cont.log" || { cat "$tmp/cont.log"; fail "no switch line in the uninterrupted run"; }

# case NAME FAULT: runs the supervised job with that fault and checks it; a failed check is
# recorded in $failed (every case runs) and reported at the end.
case_() {  # NAME FAULT [REDUNDANCY [FROM]]: FROM "save" when the restart must take --save's checkpoint
  local name=$1 fault=$2 redundancy=${3:-0} from=${4:-} code
  echo "$name: DT_FAULT=$fault --redundancy $redundancy"
  DT_FAULT=$fault DT_FAULT_STAMP="$tmp/$name.stamp" timeout 300 "$dt" train --max-restarts 2 --np 4 \
    --mpirun "$mpiexec" "${common[@]}" --schedule "$schedule" --save "$tmp/$name.ck" --save-every 4 \
    --redundancy "$redundancy" --csv "$tmp/$name.csv" >"$tmp/$name.log" 2>"$tmp/$name.err"
  code=$?
  if ! check "$name" "$code" "$redundancy" "$from"; then
    tail -n 30 "$tmp/$name.log" "$tmp/$name.err"
    failed+=("$name")
  fi
}

check() {  # NAME EXIT REDUNDANCY FROM: prints one FAIL line and returns 1 on the first failed check
  local name=$1 code=$2 redundancy=$3 expect=$4 line last from lost copy
  ((code == 0)) || { echo "FAIL: $name: supervised job exit $code"; return 1; }
  [[ -s $tmp/$name.stamp ]] || { echo "FAIL: $name: the fault never fired"; return 1; }
  # (workers mpirun left behind are ended with a line of their own: job/attempt_processes.h)
  (($(grep "^supervise:" "$tmp/$name.log" | grep -vc "processes of the job running .*; ended them$") == 1)) ||
    { echo "FAIL: $name: not exactly one supervisor line"; return 1; }
  line=$(grep "^supervise:" "$tmp/$name.log" | grep -v "processes of the job running .*; ended them$")
  sed '/^supervise:/q' "$tmp/$name.log" | grep -q "^switch before step 10" &&
    { echo "FAIL: $name: the switch committed before the kill"; return 1; }
  [[ $line =~ ^supervise:\ the\ job\ ended\ with\ exit\ [0-9]+\ after\ step\ ([0-9]+)\ on\ 4\ processes\;\ restart\ 1\ of\ 2\ from\ step\ ([0-9]+)\ \(([0-9]+)\ steps\ lost\)\ on\ 3\ processes\ in\ [a-z0-9=,]+(,\ from\ the\ memory\ copy)?$ ]] ||
    { echo "FAIL: $name: restart line: $line"; return 1; }
  last=${BASH_REMATCH[1]} from=${BASH_REMATCH[2]} lost=${BASH_REMATCH[3]} copy=${BASH_REMATCH[4]}
  ((redundancy > 0)) || [[ -z $copy ]] || { echo "FAIL: $name: a memory copy without --redundancy"; return 1; }
  if ((redundancy > 0)); then  # the boundary after the last step done
    ((from == last + 1)) || { echo "FAIL: $name: restart from step $from after step $last"; return 1; }
    # A boundary saves to --save before it copies (job/train_job.cc): a kill between the two leaves
    # --save's checkpoint one boundary newer than the copy, and the restart rightly takes it.
    [[ -n $copy ]] || ((from % 4 == 0)) ||
      { echo "FAIL: $name: restart from --save's step $from, not the memory copy"; return 1; }
    [[ $expect != save || -z $copy ]] || { echo "FAIL: $name: restart from the memory copy, not --save's newer checkpoint"; return 1; }
  else
    ((from % 4 == 0 && from <= last + 1)) || { echo "FAIL: $name: restart from step $from after step $last"; return 1; }
  fi
  ((lost == last + 1 - from)) || { echo "FAIL: $name: $lost steps lost named, $((last + 1 - from)) lost"; return 1; }
  py - "$tmp/cont.csv" "$tmp/$name.csv" "$from" "$lost" <<'PY' || { echo "FAIL: $name: CSV"; return 1; }
import csv, sys
cont = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))}
rows = list(csv.DictReader(open(sys.argv[2])))
frm, lost = sys.argv[3], sys.argv[4]
steps = [int(r["step"]) for r in rows]
assert steps == list(range(14)), f"steps {steps}"
marked = [(r["step"], r["restart"], r["steps_lost"]) for r in rows if r["restart"]]
assert marked == [(frm, "1", lost)], f"restart marks {marked}, expected step {frm} with {lost} lost"
for r in rows:
    s, loss = int(r["step"]), float(r["loss"])
    rel = abs(loss - cont[s]) / cont[s]
    assert rel < 1e-4, f"step {s}: loss {loss} vs uninterrupted {cont[s]} (rel {rel:.2e})"
PY
  echo "  ok: restart from step $from after step $last ($lost steps lost), steps 0-13 once, losses track the uninterrupted run"
}

case_ mid-step "kill:1:step:30:6"
case_ prepare "kill:2:prepare:20"
case_ commit "kill:3:switch:0"
case_ mid-step-copy "kill:1:step:30:6" 1
case_ prepare-copy "kill:2:prepare:20" 1
case_ copied "kill:0:copied:0:2" 1
case_ commit-copy "kill:3:switch:0" 1
case_ saved-copy "kill:2:saved:0:1" 1 save
((${#failed[@]} == 0)) || fail "cases failed: ${failed[*]}"
echo "ok: a SIGKILL mid-step, during a switch's prepare and during its commit is restarted from the last checkpoint, or from the memory copy with 0 steps lost; every step once, losses continuous"
