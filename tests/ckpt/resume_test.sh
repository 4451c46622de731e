#!/usr/bin/env bash
# Save and resume through the CLI under real processes: train tiny-moe in tp=2,dp=2,ep=2 on 4
# processes, save at step 5, resume on 2 processes in tp=1,pp=2 (then switch to dp=2) and check
# that every loss after the resume equals the continuous run's within fp32 reduction noise.
# Then export the checkpoint and read it back with Python; a corrupted file must be refused.
# Usage: resume_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/../reliability/script_prelude.sh"
common=(--model tiny-moe --global-batch 8 --seq 32 --threads 1)
run() { local np="$1"; shift; timeout 120 "$mpiexec" -np "$np" "$dt" train "${common[@]}" "$@"; }

run 4 --steps 10 --schedule "0:tp=2,dp=2,ep=2" --csv "$tmp/continuous.csv" >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; exit 1; }
run 4 --steps 5 --save-every 2 --schedule "0:tp=2,dp=2,ep=2" --save "$tmp/ck" >"$tmp/s.log" 2>&1 || { cat "$tmp/s.log"; exit 1; }
grep -q "saved checkpoint of step 4" "$tmp/s.log" || { echo "FAIL: no periodic save at step 4"; exit 1; }
[[ $(cat "$tmp/ck/latest") == step-00000005 ]] || { echo "FAIL: latest is $(cat "$tmp/ck/latest")"; exit 1; }
run 2 --steps 10 --schedule "0:tp=1,pp=2;8:dp=2" --resume "$tmp/ck" --csv "$tmp/resumed.csv" >"$tmp/r.log" 2>&1 || { cat "$tmp/r.log"; exit 1; }
grep -q "resumed from .*step-00000005 .* into tp=1,pp=2,dp=1" "$tmp/r.log" || { echo "FAIL: resume line"; cat "$tmp/r.log"; exit 1; }

PYENV_VERSION=system python3 "$here/same_losses.py" "$tmp/continuous.csv" "$tmp/resumed.csv" 5 10 1e-4 "resumed" || exit 1

"$dt" export --hf "$tmp/hf" --from "$tmp/ck" --model tiny-moe >"$tmp/e.log" 2>&1 || { cat "$tmp/e.log"; exit 1; }
PYENV_VERSION=system python3 "$here/read_export.py" "$tmp/hf" "$tmp/ck" || exit 1

# A flipped data byte is refused with exit 2 naming the file, on every rank (no hang).
f="$tmp/ck/step-00000005/rank-00002.safetensors"
size=$(stat -c %s "$f")
printf '\x7f' | dd of="$f" bs=1 seek=$((size - 5)) conv=notrunc status=none
run 2 --steps 10 --schedule "0:tp=1,dp=2" --resume "$tmp/ck" >"$tmp/bad.log" 2>&1
code=$?
[[ $code != 0 && $code != 124 ]] && grep -q "rank-00002.safetensors.*checksum: corrupted" "$tmp/bad.log" ||
  { echo "FAIL: corrupted file -> exit $code"; cat "$tmp/bad.log"; exit 1; }
# A periodic save on the step of a grow: the old world saves it before the commit and the
# started processes must not save it again (they used to, alone, and the job hung).
run 2 --steps 6 --save-every 4 --schedule "0:dp=2;4:dp=4" --save "$tmp/grow" >"$tmp/g.log" 2>&1 ||
  { echo "FAIL: save on a grow step"; cat "$tmp/g.log"; exit 1; }
[[ $(grep -c "saved checkpoint of step 4" "$tmp/g.log") == 1 && $(cat "$tmp/grow/latest") == step-00000006 &&
   -f "$tmp/grow/step-00000006/rank-00003.safetensors" ]] || { echo "FAIL: saves around the grow"; cat "$tmp/g.log"; exit 1; }
echo "ok: save, resume in another layout and process count, export read back, corruption refused, save on a grow step"
