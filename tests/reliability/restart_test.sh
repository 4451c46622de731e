#!/usr/bin/env bash
# A job that survives a lost process (job/supervisor.h): `dynatrain train --max-restarts 2
# --np 4` trains tiny-dense in tp=2,dp=2 and saves every 4 steps; rank 1 is SIGKILLed as step 6
# starts. The supervisor must restart the job from the checkpoint of step 4 on 3 processes (the
# layout rule picks dp=3), and the job must finish all 14 steps. Checked:
#  * exit 0; one supervisor line naming the restart, the step and the 2 steps lost;
#  * the CSV holds every step once, marks the restart (restart=1, steps_lost=2) on step 4, and
#    every loss equals a continuous run's within fp32 reduction noise (a different dp split);
#  * a resume is bit-identical to the checkpoint it reads: resuming the job's last checkpoint
#    the way the supervisor does and saving at once into another directory gives the same
#    bytes (same layout: the rank files compare equal with cmp; another layout and process
#    count: every tensor of every kind compares equal, tests/reliability/same_state.py).
# Usage: restart_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"
common=(--model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1)

timeout 300 "$mpiexec" -np 4 "$dt" train "${common[@]}" --steps 14 --schedule "0:tp=2,dp=2" --csv "$tmp/continuous.csv" \
  >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; fail "continuous run"; }

# The supervised job; DT_FAULT fires once (its stamp file then exists), so the restart runs clean.
DT_FAULT=kill:1:step:0:6 DT_FAULT_STAMP="$tmp/stamp" timeout 300 "$dt" train --max-restarts 2 --np 4 \
  --mpirun "$mpiexec" "${common[@]}" --steps 14 --schedule "0:tp=2,dp=2" --save "$tmp/ck" --save-every 4 \
  --csv "$tmp/run.csv" >"$tmp/s.log" 2>"$tmp/s.err"
code=$?
((code == 0)) || { cat "$tmp/s.log" "$tmp/s.err"; fail "supervised job exit $code"; }
[[ -s $tmp/stamp ]] || fail "the fault never fired"
grep -q "^supervise: the job ended with exit [0-9]* after step 5 on 4 processes; restart 1 of 2 from step 4 (2 steps lost) on 3 processes in tp=1,pp=1,dp=3,zero=1$" "$tmp/s.log" ||
  { cat "$tmp/s.log"; fail "no supervisor line for the restart"; }
(($(grep -c "^supervise: the job ended" "$tmp/s.log") == 1)) || fail "more than one restart"
grep -q "resumed from .*step-00000004 .* into tp=1,pp=1,dp=3,zero=1: step 4" "$tmp/s.log" || fail "resume line"
grep -q "ended without a word (killed?)" "$tmp/s.err" || { cat "$tmp/s.err"; fail "no line for the lost process"; }
[[ $(cat "$tmp/ck/latest") == step-00000014 ]] || fail "latest is $(cat "$tmp/ck/latest")"
ls "$tmp/run.csv".attempt-* >/dev/null 2>&1 && fail "attempt CSV files left behind"

PYENV_VERSION=system python3 - "$tmp/continuous.csv" "$tmp/run.csv" <<'PY' || fail "CSV"
import csv, sys
cont = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))}
rows = list(csv.DictReader(open(sys.argv[2])))
steps = [int(r["step"]) for r in rows]
assert steps == list(range(14)), f"steps {steps}"
marked = [(int(r["step"]), r["restart"], r["steps_lost"]) for r in rows if r["restart"]]
assert marked == [(4, "1", "2")], f"restart marks {marked}"
assert all(r["ranks"] == ("4" if int(r["step"]) < 4 else "3") for r in rows), "ranks column"
for r in rows:
    s, loss = int(r["step"]), float(r["loss"])
    rel = abs(loss - cont[s]) / cont[s]
    assert rel < 1e-4, f"step {s}: loss {loss} vs continuous {cont[s]} (rel {rel:.2e})"
print("CSV: steps 0-13 once, restart marked at step 4 (2 steps lost), losses equal the continuous run's")
PY

# Resume the last periodic checkpoint (step 12) as the supervisor does, saving at once elsewhere.
mkdir -p "$tmp/r" && cp -r "$tmp/ck/step-00000012" "$tmp/r/" && echo step-00000012 >"$tmp/r/latest"
resume() {  # NP SCHEDULE OUT
  timeout 300 "$mpiexec" -np "$1" "$dt" train "${common[@]}" --steps 13 --schedule "$2" --resume "$tmp/r" \
    --save "$3" --save-every 4 >"$3.log" 2>&1 || { cat "$3.log"; fail "resume into $2"; }
  grep -q "saved checkpoint of step 12 " "$3.log" || fail "no save at the resumed step"
}
resume 3 "0:tp=1,pp=1,dp=3,zero=1" "$tmp/same"
for f in "$tmp"/r/step-00000012/rank-*.safetensors; do
  cmp "$f" "$tmp/same/step-00000012/$(basename "$f")" || fail "resumed state differs from $(basename "$f")"
done
echo "resume in the same layout: rank files byte-identical to the checkpoint's"
resume 2 "0:tp=2" "$tmp/other"
PYENV_VERSION=system python3 "$here/same_state.py" "$tmp/r/step-00000012" "$tmp/other/step-00000012" ||
  fail "resumed state in tp=2 differs"
echo "ok: a lost process is survived (restart from step 4 on 3 processes, 14 steps, losses continuous), resumes bit-identical"
