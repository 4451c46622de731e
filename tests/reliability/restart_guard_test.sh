#!/usr/bin/env bash
# A restart never adopts the wrong state (job/supervisor.h, job/train_ckpt.h), under
# `dynatrain train --np N --max-restarts K`, on tiny-dense. Checked, each by content:
#  * another run's checkpoints in --save: an older run (seed 7, 8 steps, saves at 4 and 8)
#    leaves ck; a new run of another seed, and one of the same run with fewer --steps, are
#    refused before anything starts (exit 2, one line naming ck, the field and --resume ck;
#    no CSV, `latest` unchanged), where they used to finish at once or resume that run;
#  * a damaged rank file of rank 1 in the latest checkpoint (step 8): the job's line names the
#    file, the supervisor falls back to step 4 (one line) and the job trains on from it with
#    the older run's losses;
#  * a job grown from 2 to 4 processes that loses a process started by the grow (world rank
#    3) restarts on 3 processes (not on --np - 1 = 1), the line naming world rank 3 of 4, and
#    its losses equal a static run's;
#  * a periodic save whose write fails (a full disk, injected on rank 1) is abandoned with one
#    line, `latest` keeps the previous checkpoint, training goes on and the next save is made.
# Usage: restart_guard_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"
common=(--model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1 --mpirun "$mpiexec")
# same_losses REFERENCE_CSV RUN_CSV FIRST LAST: every step FIRST..LAST once, losses within 1e-4
same_losses() {
  PYENV_VERSION=system python3 - "$@" <<'PY' || fail "losses of $2"
import csv, sys
ref = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))}
rows = list(csv.DictReader(open(sys.argv[2])))
first, last = int(sys.argv[3]), int(sys.argv[4])
steps = [int(r["step"]) for r in rows]
assert steps == list(range(first, last + 1)), f"steps {steps}"
for r in rows:
    s, loss = int(r["step"]), float(r["loss"])
    assert abs(loss - ref[s]) / ref[s] < 1e-4, f"step {s}: loss {loss} vs {ref[s]}"
print(f"{sys.argv[2]}: steps {first}-{last}, losses equal the reference run's")
PY
}
# refused WANT ARGS...: a supervised run refused before it starts (exit 2, one line, no CSV)
refused() {
  local want="$1"
  shift
  timeout 120 "$dt" train --max-restarts 2 --np 2 "${common[@]}" --schedule "0:dp=2" "$@" --csv "$tmp/refused.csv" \
    >"$tmp/r.log" 2>"$tmp/r.err"
  local code=$?
  ((code == 2)) && (($(wc -l <"$tmp/r.err") == 1)) && grep -qF -- "$want" "$tmp/r.err" && [[ ! -s $tmp/r.log ]] &&
    [[ ! -e $tmp/refused.csv ]] || { cat "$tmp/r.log" "$tmp/r.err"; fail "exit $code; want exit 2 and '$want'"; }
  echo "refused: $(cat "$tmp/r.err")"
}

# supervised NAME FAULT ARGS...: a job under `train --max-restarts 1 --np 2` with DT_FAULT=FAULT
# (once), which must end with exit 0; its output in $tmp/NAME.log / .err, its CSV $tmp/NAME.csv.
supervised() {
  local name="$1" fault="$2"
  shift 2
  DT_FAULT="$fault" DT_FAULT_STAMP="$tmp/stamp-$name" timeout 300 "$dt" train --max-restarts 1 --np 2 "${common[@]}" \
    "$@" --csv "$tmp/$name.csv" >"$tmp/$name.log" 2>"$tmp/$name.err"
  local code=$?
  ((code == 0)) || { cat "$tmp/$name.log" "$tmp/$name.err"; fail "$name: exit $code"; }
  [[ -s $tmp/stamp-$name ]] || fail "$name: the fault never fired"
}

# The older run: seed 7, 8 steps, checkpoints of steps 4 and 8 kept.
timeout 300 "$dt" train --np 2 "${common[@]}" --seed 7 --steps 8 --schedule "0:dp=2" --save "$tmp/ck" --save-every 4 \
  --csv "$tmp/old.csv" >"$tmp/old.log" 2>&1 || { cat "$tmp/old.log"; fail "the older run"; }
[[ $(cat "$tmp/ck/latest") == step-00000008 && -d $tmp/ck/step-00000004 ]] || fail "older run's checkpoints"

# 1. Another run's checkpoints are refused up front; the same run's need --resume.
again="continue it with --resume $tmp/ck, or save into another directory"
refused "--save directory '$tmp/ck' holds another run's checkpoint (step 8): its seed is 7, this run's 1234; $again" \
  --steps 30 --save "$tmp/ck" --save-every 4
refused "--save directory '$tmp/ck' already holds this run's checkpoint of step 8; $again" \
  --seed 7 --steps 6 --save "$tmp/ck" --save-every 4
[[ $(cat "$tmp/ck/latest") == step-00000008 ]] || fail "latest changed by a refused run"

# 2. A damaged rank file of rank 1: the job names it, the supervisor falls back to step 4.
f="$tmp/ck/step-00000008/rank-00001.safetensors"
size=$(stat -c %s "$f")
printf '\x7f' | dd of="$f" bs=1 seek=$((size - 5)) conv=notrunc status=none
timeout 300 "$dt" train --max-restarts 1 --np 2 "${common[@]}" --seed 7 --steps 10 --schedule "0:dp=2" --save "$tmp/ck" \
  --resume "$tmp/ck" --save-every 4 --csv "$tmp/fb.csv" >"$tmp/fb.log" 2>"$tmp/fb.err"
code=$?
((code == 0)) || { cat "$tmp/fb.log" "$tmp/fb.err"; fail "fallback run exit $code"; }
grep -q "failed on rank 1: checkpoint file '$f': entry .* fails its checksum: corrupted" "$tmp/fb.err" ||
  { cat "$tmp/fb.err"; fail "the job's line does not name the damaged file"; }
grep -q "its message is in that rank's output" "$tmp/fb.err" && fail "the line points at another rank's output"
grep -qF "supervise: checkpoint '$tmp/ck/step-00000008' is damaged (checkpoint file '$f'" "$tmp/fb.log" &&
  grep -qF "falling back to the previous intact checkpoint '$tmp/ck/step-00000004' (step 4)" "$tmp/fb.log" ||
  { cat "$tmp/fb.log"; fail "no fall-back line"; }
(($(grep "^supervise:" "$tmp/fb.log" | grep -vc "processes of the job running .*; ended them$") == 2)) ||
  fail "want the fall-back and the restart line"
grep -q "resumed from $tmp/ck/step-00000004 " "$tmp/fb.log" || fail "did not resume step 4"
[[ $(cat "$tmp/ck/latest") == step-00000010 ]] || fail "latest is $(cat "$tmp/ck/latest")"
head -5 "$tmp/fb.csv" >"$tmp/fb-4-7.csv"  # steps 4..7 are the older run's steps too
same_losses "$tmp/old.csv" "$tmp/fb-4-7.csv" 4 7

# The static reference for the runs below (seed 1234, dp=2, 8 steps).
timeout 300 "$dt" train --np 2 "${common[@]}" --steps 8 --schedule "0:dp=2" --csv "$tmp/static.csv" >"$tmp/st.log" 2>&1 ||
  { cat "$tmp/st.log"; fail "static run"; }

# 3. Grown from 2 to 4 processes, world rank 3 (started by the grow) killed as step 4 starts.
supervised grow kill:3:step:0:2 --steps 8 --schedule "0:dp=2;2:dp=4" --save "$tmp/ck-grow" --save-every 2
grep -q "^supervise: the job ended with exit [0-9]* after step 3 on 4 processes; restart 1 of 1 from step 4 (0 steps lost) on 3 processes in tp=1,pp=1,dp=3,zero=1$" "$tmp/grow.log" ||
  { cat "$tmp/grow.log"; fail "no restart on 3 processes"; }
grep -q "of 4: .*after rank 3 (pid [0-9]*) ended without a word" "$tmp/grow.err" ||
  { cat "$tmp/grow.err"; fail "the line does not name world rank 3 of 4"; }
same_losses "$tmp/static.csv" "$tmp/grow.csv" 0 7

# 4. The save of step 6 fails on rank 1 (a full disk, injected): abandoned, training goes on.
supervised full nan:1:save-begin:0:1 --steps 8 --schedule "0:dp=2" --save "$tmp/ck-full" --save-every 3
grep -qF "checkpoint of step 6 abandoned: checkpoint save failed on rank 1: cannot write into checkpoint directory '$tmp/ck-full': No space left on device (injected); 'latest' still names step-00000003, training goes on" "$tmp/full.log" ||
  { cat "$tmp/full.log"; fail "no line for the abandoned save"; }
grep -q "^supervise:" "$tmp/full.log" && fail "a failing save ended the job"
grep -q "saved checkpoint of step 8 " "$tmp/full.log" || fail "the next save was not made"
[[ $(cat "$tmp/ck-full/latest") == step-00000008 && -d $tmp/ck-full/step-00000003 && ! -e $tmp/ck-full/step-00000006 ]] ||
  { ls "$tmp/ck-full"; fail "checkpoints after the abandoned save"; }
[[ ! -s $tmp/full.err ]] || { cat "$tmp/full.err"; fail "stderr after an abandoned save"; }
same_losses "$tmp/static.csv" "$tmp/full.csv" 0 7
echo "ok: another run's checkpoints refused, a damaged rank file passed over, a grown job restarted on its processes - 1, a failed save abandoned"
