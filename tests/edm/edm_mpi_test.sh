#!/usr/bin/env bash
# Real processes join and leave a running job, through the dynatrain CLI:
#   1. the demo's schedule (switches every 4 steps instead of 20, a smaller batch, to keep the
#      test short) grows 2 -> 4 -> 6 processes by MPI_Comm_spawn and shrinks 6 -> 3 -> 1
#      by processes leaving; `pgrep` (the processes mpirun started or spawned) must see 2, 4, 6,
#      3 and 1 in that order, the CSV's world column must say the same per phase, every switch
#      is reported in the JSON (with its bare-exchange floor and commit CPU), and the loss
#      tracks the static run;
#   2. a grow whose executable is missing, whose host does not resolve, or that needs more slots
#      than the job has is refused with one line and training goes on in the old layout (exit 0,
#      world stays 2); a spawn that fails inside Open MPI is refused alike, and the job then ends
#      through MPI_Abort with a note (exit 1, every step done);
#   3. `dynatrain request` switches a running job at the requested step; a request the trainer
#      cannot run is refused with one line;
#   4. with --job, a rank outside the layout waits without spinning (CPU time) and joins on request;
#   5. `request --vacate 1,2`: new processes take the vacated ranks, the vacated processes exit;
#      vacating a rank outside the world is refused with one line.
# Usage: edm_mpi_test.sh DYNATRAIN [OUT_DIR]. Needs mpirun; sets the Open MPI variables itself.
set -euo pipefail
source "$(dirname "$0")/mpi_test_lib.sh" "$@"
# count_processes PID FILE: the number of dynatrain processes under mpirun PID, every 10 ms,
# one line each, until it ends.
count_processes() {
  while kill -0 "$1" 2>/dev/null; do
    pgrep -P "$1" -c -x dynatrain || true
    sleep 0.01
  done > "$2"
}

SCHED="0:dp=2;4:tp=2,dp=2;8:tp=2,pp=3,pp_layers=2/1/1;12:dp=3;16:dp=1"
COMMON=(train --model tiny-dense --steps 20 --global-batch 6 --seq 32 --threads 1)
mpirun -np 2 "$BIN" "${COMMON[@]}" --schedule "$SCHED" \
  --csv "$OUT/elastic.csv" --json "$OUT/elastic.json" > "$OUT/elastic.log" 2>&1 &
pid=$!
count_processes "$pid" "$OUT/ps.txt"
wait "$pid" || { cat "$OUT/elastic.log"; fail "elastic run exited with $?"; }
# Process counts in order, repeats collapsed; they must pass through 2 4 6 3 and then fall below 3
# (a shrink may show the leavers going one by one). The last phase (1 process, four tiny steps)
# can end between two samples on a loaded machine; the CSV's world column below proves it ran on 1.
seen=$(awk '$1 != last && $1 > 0 { printf "%s ", $1; last = $1 }' "$OUT/ps.txt")
echo "process counts seen: $seen"
echo " $seen" | grep -Eq ' 2 (.* )?4 (.* )?6 (.* )?3 (.* )?[12] $' ||
  fail "process counts '$seen' do not go 2, 4, 6, 3, then 1 (or 2 as the last leaver goes)"
awk -F, 'NR > 1 { want = $1 < 4 ? 2 : $1 < 8 ? 4 : $1 < 12 ? 6 : $1 < 16 ? 3 : 1
                  if ($11 != want) { print "step " $1 ": world " $11 ", want " want; bad = 1 } }
         END { exit bad }' "$OUT/elastic.csv" || fail "CSV world column"
[[ $(wc -l < "$OUT/elastic.csv") -eq 21 ]] || fail "CSV has $(wc -l < "$OUT/elastic.csv") lines, want 21"
[[ $(grep -c '"pause_s"' "$OUT/elastic.json") -eq 4 ]] || fail "JSON does not hold 4 switches"
# Every switch names its floors and CPU: the bare exchange of its bytes was timed (> 0), the
# training thread used CPU in the commit and in the exchange, the ranks' start spread is known.
for field in exchange_s commit_thread_s exchange_thread_s; do
  awk -v f="\"$field\":" '$1 == f { n++; if ($2 + 0 <= 0) bad = 1 } END { exit !(n == 4 && !bad) }' "$OUT/elastic.json" ||
    fail "JSON: $field is not positive in all 4 switches"
done
[[ $(grep -c '"start_spread_s"' "$OUT/elastic.json") -eq 4 ]] || fail "JSON: start_spread_s missing"

mpirun -np 2 "$BIN" "${COMMON[@]}" --schedule "0:dp=2" --static \
  --csv "$OUT/static.csv" > "$OUT/static.log" 2>&1 || fail "static run"
paste -d, "$OUT/static.csv" "$OUT/elastic.csv" | awk -F, 'NR > 1 { d = $2 - $14; if (d < 0) d = -d; if (d > m) m = d }
  END { printf "max |loss elastic - static| = %.2e\n", m; exit !(m < 1e-4) }' || fail "loss does not track the static run"

# A join that cannot start is refused; the job keeps its layout and finishes.
DT_EDM_EXECUTABLE=/nonexistent/dynatrain mpirun -np 2 "$BIN" train --model tiny-dense --steps 8 \
  --schedule "0:dp=2;4:dp=4" --threads 1 --csv "$OUT/refused.csv" > "$OUT/refused.log" 2>&1 ||
  { cat "$OUT/refused.log"; fail "refused grow: exit status $?"; }
grep -q "refused: cannot start 2 process(es): executable '/nonexistent/dynatrain' is missing" "$OUT/refused.log" ||
  { cat "$OUT/refused.log"; fail "no refusal line"; }
awk -F, 'NR > 1 && $11 != 2 { bad = 1 } END { exit bad }' "$OUT/refused.csv" || fail "world changed after a refused grow"
# Hosts that do not resolve, and a grow beyond the job's slots without oversubscription, are
# refused before any spawn (Open MPI would end the job, or fail the spawn).
REFUSE=(train --model tiny-dense --steps 6 --global-batch 8 --seq 32 --threads 1 --schedule "0:dp=2;3:dp=4")
mpirun -np 2 "$BIN" "${REFUSE[@]}" --host no-such-host.invalid:2 > "$OUT/refused_host.log" 2>&1 ||
  { cat "$OUT/refused_host.log"; fail "refused host: exit status $?"; }
grep -q "refused: cannot start 2 process(es): host 'no-such-host.invalid' of --host does not resolve" \
  "$OUT/refused_host.log" || { cat "$OUT/refused_host.log"; fail "no refusal line for a host that does not resolve"; }
printf 'localhost slots=2\n' > "$OUT/two_slots"
env -u OMPI_MCA_rmaps_base_oversubscribe mpirun --hostfile "$OUT/two_slots" -np 2 "$BIN" "${REFUSE[@]}" \
  > "$OUT/refused_slots.log" 2>&1 || { cat "$OUT/refused_slots.log"; fail "refused slots: exit status $?"; }
grep -q "refused: cannot start 2 process(es): the job's hosts have 2 slots and 2 are in use" "$OUT/refused_slots.log" ||
  { cat "$OUT/refused_slots.log"; fail "no refusal line for a grow beyond the slots"; }
# A spawn that fails inside Open MPI (2 processes onto a host given 1 slot, no oversubscription)
# is refused on every rank alike and training goes on; the job then ends through MPI_Abort with
# a note (Open MPI 4.1's mpirun would not exit after it): exit status 1, every step in the CSV.
set +e
env -u OMPI_MCA_rmaps_base_oversubscribe timeout 120 mpirun --hostfile "$OUT/two_slots" -np 2 "$BIN" "${REFUSE[@]}" \
  --host localhost:1 --csv "$OUT/refused_spawn.csv" > "$OUT/refused_spawn.log" 2>&1
rc=$?
set -e
[[ $rc == 1 ]] || { cat "$OUT/refused_spawn.log"; fail "failed spawn: exit status $rc, want 1 (124: mpirun did not exit)"; }
grep -q "refused: cannot start 2 process(es): MPI_Comm_spawn failed: MPI_ERR_SPAWN" "$OUT/refused_spawn.log" ||
  { cat "$OUT/refused_spawn.log"; fail "no refusal line for a failed spawn"; }
[[ $(grep -c "refused" "$OUT/refused_spawn.log") == 1 ]] || { cat "$OUT/refused_spawn.log"; fail "refusal not printed once"; }
grep -q "^note: every step is done; ending the job with MPI_Abort" "$OUT/refused_spawn.log" ||
  { cat "$OUT/refused_spawn.log"; fail "no note on ending the job"; }
awk -F, 'NR > 1 { n++; if ($11 != 2) bad = 1 } END { exit bad || n != 6 }' "$OUT/refused_spawn.csv" ||
  fail "steps missing or world changed after a failed spawn"
# A switch requested from outside (`dynatrain request`) happens at the requested step; a request
# the trainer cannot run is refused with one line and the job goes on.
rm -rf "$OUT/job" && mkdir -p "$OUT/job"
env $(hold_env "$OUT/job") mpirun -np 2 "$BIN" train --model tiny-dense --steps 6 --global-batch 4 --seq 16 --threads 1 \
  --schedule "0:dp=2" --job "$OUT/job" --csv "$OUT/request.csv" > "$OUT/request.log" 2>&1 &
pid=$!
wait_held "$OUT/job"
"$BIN" request --job "$OUT/job" --to tp=2 --at-step 3 > /dev/null || fail "request command"
release "$OUT/job"
wait "$pid" || { cat "$OUT/request.log"; fail "run with a request"; }
grep -q "request: switch to tp=2,pp=1,dp=1,zero=1 before step 3" "$OUT/request.log" || { cat "$OUT/request.log"; fail "request not taken"; }
awk -F, 'NR > 1 { want = $1 < 3 ? "tp=1 pp=1 dp=2 zero=1" : "tp=2 pp=1 dp=1 zero=1"; if ($5 != want) bad = 1 }
         END { exit bad }' "$OUT/request.csv" || fail "requested switch not at step 3"
rm -rf "$OUT/job" && mkdir -p "$OUT/job"
env $(hold_env "$OUT/job") mpirun -np 2 "$BIN" train --model tiny-dense --steps 2 --global-batch 4 --seq 16 --threads 1 \
  --schedule "0:dp=2" --job "$OUT/job" > "$OUT/request_bad.log" 2>&1 &
pid=$!
wait_held "$OUT/job"
"$BIN" request --job "$OUT/job" --to tp=3 > /dev/null || fail "request command (tp=3)"
release "$OUT/job"
wait "$pid" || { cat "$OUT/request_bad.log"; fail "bad request ended the job"; }
grep -q "request refused: tp=3 does not divide" "$OUT/request_bad.log" || { cat "$OUT/request_bad.log"; fail "bad request not refused"; }
# With --job, a rank outside the layout waits for rank 0 without spinning: 3 processes train
# dp=2 (rank 2 idle) until a request brings in dp=3 at step 40. Over steps 5-35 the idle rank
# must use under 15 % of the CPU time of the least busy active rank (a per-step broadcast,
# as before, used 23 %; the sleep-polled wait 1-2 % alone and up to 11 % while other tests load
# the 2 cores), and the switch must still happen.
rm -rf "$OUT/idle" && mkdir -p "$OUT/idle"
env $(hold_env "$OUT/idle") mpirun -np 3 "$BIN" train --model tiny-dense --steps 44 --global-batch 12 --seq 64 --threads 1 \
  --schedule "0:dp=2" --job "$OUT/idle" --csv "$OUT/idle.csv" > "$OUT/idle.log" 2>&1 &
pid=$!
wait_held "$OUT/idle"
"$BIN" request --job "$OUT/idle" --to dp=3 --at-step 40 > /dev/null || fail "request command (dp=3)"
release "$OUT/idle"
declare -A rank_of at5 at35
cpu_s() { awk '{ print ($14 + $15) / 100 }' "/proc/$1/stat" 2>/dev/null; }
while kill -0 "$pid" 2>/dev/null; do
  for p in $(pgrep -P "$pid" -x dynatrain); do
    [ -n "${rank_of[$p]:-}" ] || rank_of[$p]=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    if [ -z "${at5[$p]:-}" ] && grep -q "step     5 " "$OUT/idle.log"; then at5[$p]=$(cpu_s "$p"); fi
    if [ -z "${at35[$p]:-}" ] && grep -q "step    35 " "$OUT/idle.log"; then at35[$p]=$(cpu_s "$p"); fi
  done
  sleep 0.05
done
wait "$pid" || { cat "$OUT/idle.log"; fail "idle-rank run exited with $?"; }
awk -F, 'NR > 1 { want = $1 < 40 ? "tp=1 pp=1 dp=2 zero=1" : "tp=1 pp=1 dp=3 zero=1"; if ($5 != want) bad = 1 }
         END { exit bad }' "$OUT/idle.csv" || fail "requested dp=3 not at step 40"
idle="" busy=""
for p in "${!rank_of[@]}"; do
  [ -n "${at5[$p]:-}" ] && [ -n "${at35[$p]:-}" ] || fail "no CPU sample of process $p (rank ${rank_of[$p]})"
  used=$(awk -v a="${at5[$p]}" -v b="${at35[$p]}" 'BEGIN { print b - a }')
  if [ "${rank_of[$p]}" = 2 ]; then idle=$used; else busy="$busy $used"; fi
done
echo "CPU seconds over steps 5-35: idle rank $idle, active ranks$busy"
awk -v i="$idle" -v b="$busy" 'BEGIN { n = split(b, a, " "); m = a[1]; for (k = 2; k <= n; ++k) if (a[k] < m) m = a[k];
  exit !(i != "" && n == 2 && i < 0.15 * m) }' || fail "the idle rank used $idle CPU s against$busy (spinning?)"
# A request that vacates ranks 1 and 2 of a 3-process dp=3 job: two processes are started,
# take their ranks (placement 0,3,4), the vacated ones hand over their state and exit (3 -> 5 ->
# 3 processes), and the loss tracks the static run.
rm -rf "$OUT/vacate" && mkdir -p "$OUT/vacate"
VCOMMON=(train --model tiny-dense --steps 10 --global-batch 6 --seq 16 --threads 1 --schedule "0:dp=3")
mpirun -np 3 "$BIN" "${VCOMMON[@]}" --static --csv "$OUT/vacate_static.csv" > "$OUT/vacate_static.log" 2>&1 ||
  { cat "$OUT/vacate_static.log"; fail "static dp=3 run"; }
env $(hold_env "$OUT/vacate") mpirun -np 3 "$BIN" "${VCOMMON[@]}" --job "$OUT/vacate" --lookahead 2 --csv "$OUT/vacate.csv" > "$OUT/vacate.log" 2>&1 &
pid=$!
wait_held "$OUT/vacate"
"$BIN" request --job "$OUT/vacate" --to dp=3 --vacate 1,2 --at-step 4 > /dev/null || fail "request command (--vacate)"
release "$OUT/vacate"
count_processes "$pid" "$OUT/vacate_ps.txt"
wait "$pid" || { cat "$OUT/vacate.log"; fail "vacating run exited with $?"; }
grep -q "placement 0,3,4" "$OUT/vacate.log" || { cat "$OUT/vacate.log"; fail "vacated ranks not placed on new processes"; }
seen=$(awk '$1 != last && $1 > 0 { printf "%s ", $1; last = $1 }' "$OUT/vacate_ps.txt")
echo "process counts seen (vacate): $seen"
echo " $seen" | grep -Eq ' 3 (.* )?5 (.* )?3 ' || fail "process counts '$seen' do not go 3, 5, 3 (then the end)"
paste -d, "$OUT/vacate_static.csv" "$OUT/vacate.csv" | awk -F, 'NR > 1 { d = $2 - $14; if (d < 0) d = -d; if (d > m) m = d; n++ }
  END { printf "max |loss vacate - static| = %.2e over %d steps\n", m, n; exit !(n == 10 && m < 1e-4) }' ||
  fail "loss does not track the static run after vacating"
"$BIN" request --job "$OUT/vacate" --to dp=3 --vacate 1,x > /dev/null 2>&1 && fail "request --vacate 1,x accepted"
# A request to vacate a rank the job does not have is refused by the job with one line
# (vacating rank 0 moves the leader role: edm_migrate_test.sh).
rm -rf "$OUT/vacate" && mkdir -p "$OUT/vacate"
env $(hold_env "$OUT/vacate") mpirun -np 3 "$BIN" train --model tiny-dense --steps 2 --global-batch 6 --seq 16 --threads 1 --schedule "0:dp=3" --job "$OUT/vacate" > "$OUT/vacate5.log" 2>&1 &
pid=$!
wait_held "$OUT/vacate"
"$BIN" request --job "$OUT/vacate" --to dp=3 --vacate 5 > /dev/null || fail "request command (--vacate 5)"
release "$OUT/vacate"
wait "$pid" || { cat "$OUT/vacate5.log"; fail "a refused vacate ended the job"; }
grep -q "request refused: cannot vacate rank 5: valid ranks are 0..2" "$OUT/vacate5.log" || { cat "$OUT/vacate5.log"; fail "vacating rank 5 not refused"; }
echo "edm mpi test: ok"
