#!/usr/bin/env bash
# Notices a job cannot act on by a vacating switch, each ended at once with one line naming the
# cause, and a supervised job restarted on the processes that stay, every step once:
#   idle:     `train --np 4 --max-restarts 1 --redundancy 1` in tp=1,dp=2 (world ranks 2 and 3 hold
#             no rank until the grow at step 50): SIGTERM to world rank 3 after step 8. Refused
#             at once (not at --notice-s 60) with one line naming the layout, restarted from the
#             memory copy on 3 processes with 0 steps lost.
#   start-up: `train --np 2` SIGTERMed in one worker as soon as it exists (before its notice
#             handler: while the program loads). The supervisor's one line names the signal and
#             the start-up, exit 143. The same under `dynatrain launch` (torch.distributed):
#             the launcher's one line names the rank, SIGTERM and the start-up.
# Usage: notice_idle_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
common=(--mpirun "$mpiexec" --model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1)
workers_of() { pgrep -P "$(pgrep -P "$1" | head -1)"; }  # the supervisor's mpirun's children
world_rank() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }

# idle
"$dt" train --np 4 --max-restarts 1 --redundancy 1 "${common[@]}" --steps 60 --schedule "0:tp=1,dp=2;50:tp=2,dp=2" \
  --notice-s 60 --save "$tmp/ck" --save-every 100 --csv "$tmp/idle.csv" >"$tmp/idle.log" 2>"$tmp/idle.err" &
job=$!
for _ in $(seq 1 6000); do grep -q "step  *8  loss" "$tmp/idle.log" 2>/dev/null && break; sleep 0.02; done
grep -q "step  *8  loss" "$tmp/idle.log" || { cat "$tmp/idle.log" "$tmp/idle.err"; fail "idle: the job never reached step 8"; }
noticed=""
for p in $(workers_of "$job"); do [[ $(world_rank "$p") == 3 ]] && noticed=$p; done
[[ -n $noticed ]] || fail "idle: no process of world rank 3"
t0=$SECONDS
kill -TERM "$noticed"
for _ in $(seq 1 3000); do grep -q "^supervise: .* restart " "$tmp/idle.log" && break; sleep 0.02; done
took=$((SECONDS - t0))
wait "$job"
code=$?
((code == 0)) || { cat "$tmp/idle.log" "$tmp/idle.err"; fail "idle: exit $code, want 0"; }
((took < 30)) || fail "idle: the restart came $took s after the notice (its deadline is 60 s)"
lines=$(grep -c '^dynatrain: ' "$tmp/idle.err")
want="^dynatrain: error: rank 3 of 4: notice \(SIGTERM\) to this process, which holds no rank of tp=1,pp=1,dp=2,zero=1 \(2 of the 4 processes hold ranks\): a process outside the layout cannot be vacated; the job ends so that it restarts"
((lines == 1)) && grep -Eq "$want" "$tmp/idle.err" || { cat "$tmp/idle.err"; fail "idle: not the one line naming the layout"; }
grep -Eq "^supervise: .* restart 1 of 1 from step [0-9]+ \(0 steps lost\) on 3 processes .*, from the memory copy$" \
  "$tmp/idle.log" || { grep '^supervise' "$tmp/idle.log"; fail "idle: no restart from the copy on 3 processes"; }
python3 - "$tmp/idle.csv" <<'PY' || fail "idle: the CSV (above)"
import csv, sys
steps = [int(r["step"]) for r in csv.DictReader(open(sys.argv[1]))]
assert steps == list(range(60)), f"steps not each once: {steps}"
PY
echo "ok: a notice to an idle process -> one line, restart from the copy $took s after it, every step once"

# The start-up cases: CASE's job (its pid $job) gets SIGTERM in the process of rank 1 as soon as it
# exists (LIST lists the job's processes, VAR names the rank in their environment); it must end
# with 143 before any step and print exactly one line matching WANT (of LOG and ERR).
notice_at_start() {  # CASE LIST VAR WANT
  local target="" p _ code out
  for _ in $(seq 1 2000); do
    for p in $($2 "$job" 2>/dev/null); do
      [[ $(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n "s/^$3=//p") == 1 ]] && target=$p
    done
    [[ -n $target ]] && break
    sleep 0.005
  done
  [[ -n $target ]] || fail "$1: no process of rank 1 appeared"
  kill -TERM "$target"
  wait "$job"
  code=$?
  grep -q "step  *0  loss" "$tmp/$1.log" && fail "$1: the job trained before the signal arrived; the test needs it in start-up"
  ((code == 143)) || { cat "$tmp/$1.log" "$tmp/$1.err"; fail "$1: exit $code, want 143"; }
  out=$(cat "$tmp/$1.log" "$tmp/$1.err" | grep -E '^(dynatrain|supervise):')
  [[ $(wc -l <<<"$out") == 1 ]] && grep -Eq "${4//PID/$target}" <<<"$out" ||
    { cat "$tmp/$1.log" "$tmp/$1.err"; fail "$1: not one line naming SIGTERM and the start-up"; }
  echo "ok: a notice during start-up ($1) -> exit 143, one line"
}
children() { pgrep -P "$1"; }

"$dt" train --np 2 "${common[@]}" --steps 40 --schedule "0:dp=2" >"$tmp/up.log" 2>"$tmp/up.err" &
job=$!
notice_at_start up workers_of OMPI_COMM_WORLD_RANK "^dynatrain: error: a process of the job ended by SIGTERM before \
training started \(a notice during start-up, before the process could take notices\?\)$"

# under `dynatrain launch`: its ranks are its children, RANK in their environment
"$dt" launch --np 2 -- "$dt" train --model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1 \
  --steps 40 --schedule "0:dp=2" >"$tmp/launch.log" 2>"$tmp/launch.err" &
job=$!
notice_at_start launch children RANK "^dynatrain: error: launch: rank 1 \(pid PID\) on node \S+ ended by SIGTERM \
\(not handled: a notice during start-up, before the process could take notices\?\); ending the other ranks$"
