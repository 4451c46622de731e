#!/usr/bin/env bash
# --bf16 checkpoints under real processes: train tiny-dense with bf16 params in tp=2,dp=2,zero=3
# (the bf16 params sharded too) on 4 processes, save at step 5, resume on 2 processes in
# tp=1,pp=2 (then switch to dp=2) and check that every loss after the resume equals the
# continuous --bf16 run's within bf16 reduction noise. The checkpoint keeps the params as BF16
# entries and the master as F32; resuming it without --bf16 is refused (exit 2, naming the
# element sizes). Then export it and read it back with Python: BF16 tensors equal to the
# checkpoint's params and to its fp32 master rounded to nearest even.
# Usage: resume_bf16_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/../reliability/script_prelude.sh"
common=(--model tiny-dense --global-batch 8 --seq 32 --threads 1)
run() { local np="$1"; shift; timeout 120 "$mpiexec" -np "$np" "$dt" train "${common[@]}" "$@"; }

run 4 --bf16 --steps 10 --schedule "0:tp=2,dp=2,zero=3" --csv "$tmp/continuous.csv" >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; exit 1; }
run 4 --bf16 --steps 5 --schedule "0:tp=2,dp=2,zero=3" --save "$tmp/ck" >"$tmp/s.log" 2>&1 || { cat "$tmp/s.log"; exit 1; }
grep -q '"param/.*"dtype":"BF16"' "$tmp/ck/step-00000005/rank-00000.safetensors" &&
  grep -q '"master/.*"dtype":"F32"' "$tmp/ck/step-00000005/rank-00000.safetensors" ||
  { echo "FAIL: checkpoint entries are not BF16 params and F32 master"; exit 1; }
run 2 --bf16 --steps 10 --schedule "0:tp=1,pp=2;8:dp=2" --resume "$tmp/ck" --csv "$tmp/resumed.csv" >"$tmp/r.log" 2>&1 || { cat "$tmp/r.log"; exit 1; }
grep -q "resumed from .*step-00000005 .* into tp=1,pp=2,dp=1" "$tmp/r.log" || { echo "FAIL: resume line"; cat "$tmp/r.log"; exit 1; }

# Relative tolerance 1e-3: another reduction order moves a bf16 run's loss by ~1e-4 of itself
# over these steps (tests/train Bf16LossTracksStaticRun), while losing the Adam moments moves it
# by up to 0.3 (the lost-moments control there).
PYENV_VERSION=system python3 "$here/same_losses.py" "$tmp/continuous.csv" "$tmp/resumed.csv" 5 10 1e-3 "bf16 resumed" || exit 1

run 2 --steps 10 --schedule "0:dp=2" --resume "$tmp/ck" >"$tmp/fp32.log" 2>&1
code=$?
[[ $code == 2 ]] && grep -q "holds bf16 params (saved with --bf16); resume it with --bf16" "$tmp/fp32.log" ||
  { echo "FAIL: a bf16 checkpoint resumed without --bf16 -> exit $code"; cat "$tmp/fp32.log"; exit 1; }

"$dt" export --hf "$tmp/hf" --from "$tmp/ck" --model tiny-dense >"$tmp/e.log" 2>&1 || { cat "$tmp/e.log"; exit 1; }
PYENV_VERSION=system python3 "$here/read_export.py" "$tmp/hf" "$tmp/ck" --bf16-of-master || exit 1
echo "ok: bf16 save, resume in another layout and process count, fp32 resume refused, BF16 export read back"
