#!/usr/bin/env bash
# A notice to the last process of a `train --np 2` job that shrank to one (the other left):
# every process has notice, so the job ends at once with 128 + signal and one line, not at the
# notice's deadline (--notice-s 30) with a second, contradicting line (MPI_Finalize would wait
# for the process that left).
# Usage: notice_last_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
"$dt" train --np 2 --mpirun "$mpiexec" --model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1 \
  --steps 4000 --schedule "0:dp=2;4:dp=1" --notice-s 30 >"$tmp/last.log" 2>"$tmp/last.err" &
job=$!
for _ in $(seq 1 6000); do grep -q "step  *8  loss" "$tmp/last.log" 2>/dev/null && break; sleep 0.02; done
grep -q "step  *8  loss" "$tmp/last.log" || { cat "$tmp/last.log" "$tmp/last.err"; fail "the job never reached step 8"; }
workers=($(pgrep -P "$(pgrep -P "$job" | head -1)"))
((${#workers[@]} == 1)) || fail "want 1 process left after the shrink, found ${#workers[@]}"
t0=$SECONDS
kill -TERM "${workers[0]}"
wait "$job"
code=$? took=$((SECONDS - t0))
((code == 143)) || { cat "$tmp/last.err"; fail "exit $code, want 143"; }
((took < 20)) || fail "ended $took s after the notice (the notice's deadline is 30 s)"
(($(wc -l <"$tmp/last.err") == 1)) && grep -q "rank 0 of 1: stopped by SIGTERM to every process" "$tmp/last.err" ||
  { cat "$tmp/last.err"; fail "not the one line of a job that every process has notice of"; }
grep -q "^notice: every process has notice; the job ends (SIGTERM)$" "$tmp/last.log" || fail "no notice line on stdout"
echo "ok: a notice to the last process -> exit 143 in $took s, one line"
