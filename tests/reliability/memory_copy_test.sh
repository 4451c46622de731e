#!/usr/bin/env bash
# A lost process costs no steps (job/memory_copy.h): `dynatrain train --np 4 --max-restarts 2
# --redundancy R` keeps a copy of the state at every step boundary; tiny-dense in tp=2,dp=2,
# saving to disk every 4 steps, rank 1 lost during step 6 (after the copy of step 6). Cases:
#  1. R=1, rank 1 SIGKILLed: the restart resumes the copy of step 6 (0 steps lost) on 3
#     processes, not the disk checkpoint of step 4; with --job DIR, the loss and the restart
#     are in DIR/events.jsonl;
#  2. R=2, rank 1 lost with its node's shared memory (the `lose` fault removes its files) 20 ms
#     into step 6: the copy is read with rank 1's file from its buddy's copy, 0 steps lost;
#  3. R=1, the same loss: the copy is not whole, so the restart falls back to the disk
#     checkpoint of step 4 (2 steps lost), with one line saying why;
#  4. misuse: --redundancy 3, --redundancy without --max-restarts, under a plain mpirun.
# Each run: exit 0, every step once in the CSV with the restart marked, every loss equal to an
# uninterrupted run's within fp32 reduction noise (another dp split after the restart), and the
# copy's directory gone when the job ends.
# Usage: memory_copy_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"
common=(--model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1 --steps 14)
export DT_MEMORY_COPY_ROOT="$tmp/shm"  # the copy's directory goes here, not into /dev/shm
mkdir -p "$DT_MEMORY_COPY_ROOT"

timeout 300 "$mpiexec" -np 4 "$dt" train "${common[@]}" --schedule "0:tp=2,dp=2" --csv "$tmp/continuous.csv" \
  >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; fail "continuous run"; }

# supervised NAME REDUNDANCY FAULT [TRAIN ARGS...]: the job with one fault; its log is $tmp/NAME.log.
supervised() {
  rm -rf "$tmp/ck" "$tmp/stamp"
  DT_FAULT="$3" DT_FAULT_STAMP="$tmp/stamp" timeout 300 "$dt" train --max-restarts 2 --np 4 --mpirun "$mpiexec" \
    "${common[@]}" --schedule "0:tp=2,dp=2" --save "$tmp/ck" --save-every 4 --redundancy "$2" \
    --csv "$tmp/$1.csv" "${@:4}" >"$tmp/$1.log" 2>"$tmp/$1.err"
  local code=$?
  ((code == 0)) || { cat "$tmp/$1.log" "$tmp/$1.err"; fail "$1: exit $code"; }
  [[ -s $tmp/stamp ]] || fail "$1: the fault never fired"
  (($(grep -c "^supervise: the job ended" "$tmp/$1.log") == 1)) || { cat "$tmp/$1.log"; fail "$1: not one restart"; }
  [[ -z $(ls -A "$DT_MEMORY_COPY_ROOT") ]] || fail "$1: the copy's directory is left: $(ls "$DT_MEMORY_COPY_ROOT")"
}

# check_csv NAME FROM LOST: every step once, the restart marked at step FROM with LOST steps lost,
# losses equal the continuous run's.
check_csv() {
  PYENV_VERSION=system python3 - "$tmp/continuous.csv" "$tmp/$1.csv" "$2" "$3" <<'PY' || fail "$1: CSV"
import csv, sys
cont = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))}
rows = list(csv.DictReader(open(sys.argv[2])))
start, lost = int(sys.argv[3]), sys.argv[4]
steps = [int(r["step"]) for r in rows]
assert steps == list(range(14)), f"steps {steps}"
marked = [(int(r["step"]), r["restart"], r["steps_lost"]) for r in rows if r["restart"]]
assert marked == [(start, "1", lost)], f"restart marks {marked}"
assert all(r["ranks"] == ("4" if int(r["step"]) < start else "3") for r in rows), "ranks column"
for r in rows:
    s, loss = int(r["step"]), float(r["loss"])
    rel = abs(loss - cont[s]) / cont[s]
    assert rel < 1e-4, f"step {s}: loss {loss} vs continuous {cont[s]} (rel {rel:.2e})"
PY
}

# 1. A SIGKILL: the copy of step 6 (the disk has step 4).
mkdir -p "$tmp/job"
supervised kill 1 kill:1:step:0:6 --job "$tmp/job"
grep -q "^supervise: the job ended with exit [0-9]* after step 5 on 4 processes; restart 1 of 2 from step 6 (0 steps lost) on 3 processes in tp=1,pp=1,dp=3,zero=1, from the memory copy$" "$tmp/kill.log" ||
  { cat "$tmp/kill.log"; fail "kill: no restart from the memory copy"; }
grep -q "resumed from $DT_MEMORY_COPY_ROOT/dynatrain-copy-[0-9]*/step-00000006 (saved in tp=2,pp=1,dp=2,zero=1, 4 files) into tp=1,pp=1,dp=3,zero=1: step 6" "$tmp/kill.log" ||
  { cat "$tmp/kill.log"; fail "kill: resume line"; }
grep -q "memory copy (--redundancy 1): 7 copies, .*; the first two (fresh pages)" "$tmp/kill.log" || { cat "$tmp/kill.log"; fail "kill: summary line"; }
check_csv kill 6 0
[[ $(cat "$tmp/ck/latest") == step-00000014 ]] || fail "kill: --save's latest is $(cat "$tmp/ck/latest")"
PYENV_VERSION=system python3 - "$tmp/job/events.jsonl" <<'PY' || { cat "$tmp/job/events.jsonl"; fail "kill: events"; }
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
names = [e["event"] for e in events]
lost = names.index("process_lost")
assert names[lost + 1] == "recovery", names
assert events[lost]["what"].startswith("the job ended with exit ") and "after step 5 on 4 processes" in events[lost]["what"], events[lost]
r = events[lost + 1]
assert (r["step"], r["layout"], r["processes"]) == (6, "tp=1,pp=1,dp=3,zero=1", 3), r
assert r["how"] == "restart 1 from the memory copy, 0 steps lost", r
assert names.count("job_started") == 2 and names.index("job_started", 1) > lost, names
PY
echo "ok 1: SIGKILL during step 6 -> restart from the memory copy of step 6, 0 steps lost, losses continuous, in the events"

# 2. A lost node (rank 1's files gone) with buddy copies, mid-step.
supervised lose2 2 lose:1:step:20:6
grep -Eq "^supervise: .*restart 1 of 2 from step [67] \(0 steps lost\) on 3 processes in tp=1,pp=1,dp=3,zero=1, from the memory copy$" "$tmp/lose2.log" ||
  { cat "$tmp/lose2.log"; fail "lose2: no restart from the memory copy with 0 steps lost"; }
from=$(sed -n 's/^supervise: .* from step \([0-9]*\) (0 steps lost).*/\1/p' "$tmp/lose2.log")
grep -q "4 files, rank files 1 read from their buddies' copies) into tp=1,pp=1,dp=3,zero=1: step $from" "$tmp/lose2.log" ||
  { cat "$tmp/lose2.log"; fail "lose2: rank 1's file not read from its buddy's copy"; }
check_csv lose2 "$from" 0
echo "ok 2: rank 1 lost with its shared memory (--redundancy 2) -> its buddy's copy read, 0 steps lost"

# 3. The same loss without buddies: the copy is not whole, the disk checkpoint of step 4 is used.
supervised lose1 1 lose:1:step:0:6
grep -q "^supervise: the memory copy cannot be read back whole (.*rank-00001.safetensors.*); restarting from --save's checkpoint$" "$tmp/lose1.log" ||
  { cat "$tmp/lose1.log"; fail "lose1: no line for the incomplete copy"; }
grep -q "^supervise: .*restart 1 of 2 from step 4 (2 steps lost) on 3 processes in tp=1,pp=1,dp=3,zero=1$" "$tmp/lose1.log" ||
  { cat "$tmp/lose1.log"; fail "lose1: no restart from the disk checkpoint"; }
check_csv lose1 4 2
echo "ok 3: the same loss with --redundancy 1 -> the disk checkpoint of step 4 (2 steps lost), said in one line"

# 4. Misuse: exit 2 and one line naming what would be valid.
refused() {  # WANT ARGS...: exit 2, one line matching WANT
  local want="$1"
  shift
  timeout 60 "$@" >"$tmp/bad.log" 2>&1
  local code=$?
  ((code == 2)) || { cat "$tmp/bad.log"; fail "exit $code for: $*"; }
  (($(wc -l <"$tmp/bad.log") == 1)) && grep -q -- "$want" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "message for: $*"; }
}
refused "--redundancy: 3 is out of range; valid: 0..2" "$dt" train --np 2 --max-restarts 1 --save "$tmp/b1" --redundancy 3 "${common[@]}"
refused "add --max-restarts K" "$dt" train --np 2 --redundancy 1 "${common[@]}"
refused "start the job as \`dynatrain train --np N --max-restarts K" \
  "$mpiexec" -np 2 "$dt" train --redundancy 1 "${common[@]}"
echo "ok 4: --redundancy 3, without --max-restarts, and under a plain mpirun are refused with one line"
