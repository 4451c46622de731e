#!/usr/bin/env bash
# Whole-job migration, through the dynatrain CLI under mpirun:
#   1. a 2-process dp=2 job is asked (`dynatrain request --migrate`) to move onto new processes
#      before step 4, then again before step 10: each time 2 processes are started, the state
#      moves onto them, the leader role (world rank 0: CSV, JSON, requests) moves to a new
#      process, and the old processes exit 0. Asserted with PIDs (the processes mpirun started
#      or spawned, sampled every 10 ms): the job trains on while none of the processes it had
#      before a migration is alive; the new leaders are new PIDs; all 16 steps are in the CSV
#      (written by three different leaders), both switches in the JSON, and the loss tracks
#      the static run;
#      The job runs from inside OUT with relative --job, --csv and --json paths: the processes
#      that the migrations start (and that become the leader) must resolve them the same way;
#   2. `--migrate` names the processes of the world as it is when the switch is prepared: a
#      request taken before a grow (2 -> 4 processes) vacates all 4, the 2 started by the grow
#      included (placement 4,5,6,7: every rank on a process the migration started);
#   3. a migration whose processes cannot start is refused with one line and the job finishes
#      in its old processes.
# Usage: edm_migrate_test.sh DYNATRAIN [OUT_DIR]. Needs mpirun; sets the Open MPI variables itself.
set -euo pipefail
source "$(dirname "$0")/mpi_test_lib.sh" "$@"
# sample_pids PID FILE: the PIDs of the dynatrain processes under mpirun PID, every 10 ms, one
# sample a line, until mpirun ends.
sample_pids() {
  while kill -0 "$1" 2>/dev/null; do
    echo " $(pgrep -P "$1" -x dynatrain | tr '\n' ' ')"
    sleep 0.01
  done > "$2"
}

COMMON=(train --model tiny-dense --steps 16 --global-batch 6 --seq 32 --threads 1 --schedule "0:dp=2")
mpirun -np 2 "$BIN" "${COMMON[@]}" --static --csv "$OUT/static.csv" > "$OUT/static.log" 2>&1 ||
  { cat "$OUT/static.log"; fail "static run"; }

rm -rf "$OUT/job" && mkdir -p "$OUT/job"
rm -f "$OUT/migrate.csv" "$OUT/migrate.json"
(cd "$OUT" && exec env $(hold_env "$OUT/job") mpirun -np 2 "$BIN" "${COMMON[@]}" --job job --lookahead 2 --csv migrate.csv \
  --json migrate.json > migrate.log 2>&1) &
pid=$!
sample_pids "$pid" "$OUT/pids.txt" &
sampler=$!
# Both requests queued together: each is answered, and both run.
wait_held "$OUT/job"
"$BIN" request --job "$OUT/job" --migrate --at-step 4 > /dev/null || fail "request --migrate"
"$BIN" request --job "$OUT/job" --migrate --at-step 10 > /dev/null || fail "second request --migrate"
release "$OUT/job"
wait "$pid" || { cat "$OUT/migrate.log"; fail "migrating run exited with $?"; }
wait "$sampler"

first=$(awk 'NF == 2 { print; exit }' "$OUT/pids.txt")
mapfile -t leaders < <(sed -n 's/^leader: process \([0-9]*\) took over.*/\1/p' "$OUT/migrate.log")
echo "first processes:$first; new leaders: ${leaders[*]:-none}"
[[ ${#leaders[@]} -eq 2 ]] || { cat "$OUT/migrate.log"; fail "want 2 leader hand-overs, got ${#leaders[@]}"; }
[[ ${leaders[0]} != "${leaders[1]}" ]] || fail "both migrations ended on the same leader"
for p in "${leaders[@]}"; do [[ " $first " != *" $p "* ]] || fail "new leader $p is an original process"; done
# alive_without PID OLD...: some sample shows PID alive and none of OLD.
alive_without() {
  local want=$1; shift
  awk -v want="$want" -v old="$*" 'BEGIN { n = split(old, o, " ") }
    index($0, " " want " ") { ok = 1; for (i = 1; i <= n; ++i) if (index($0, " " o[i] " ")) ok = 0; if (ok) { found = 1; exit } }
    END { exit !found }' "$OUT/pids.txt"
}
alive_without "${leaders[0]}" $first || fail "no moment where leader ${leaders[0]} ran without the original processes"
# The processes of the first migration: those seen with its leader before the second one.
gen1=$(awk -v l="${leaders[0]}" 'index($0, " " l " ") && NF == 2 { print; exit }' "$OUT/pids.txt")
[[ -n $gen1 ]] || fail "never saw the first migration's 2 processes alone"
alive_without "${leaders[1]}" $first $gen1 || fail "no moment where leader ${leaders[1]} ran without the earlier processes"
last=$(awk 'NF > 0 { l = $0 } END { print l }' "$OUT/pids.txt")
for p in $first $gen1; do [[ " $last " != *" $p "* ]] || fail "process $p of an earlier generation still ran at the end"; done
echo "generations: [$first ] -> [$gen1 ] -> [$last ]"

[[ $(wc -l < "$OUT/migrate.csv") -eq 17 ]] || fail "CSV has $(wc -l < "$OUT/migrate.csv") lines, want 17"
[[ $(grep -c '"pause_s"' "$OUT/migrate.json") -eq 2 ]] || fail "JSON does not hold 2 switches"
grep -c '"placement": "2,3"' "$OUT/migrate.json" | grep -qx 2 || fail "a migration did not place both ranks on new processes"
paste -d, "$OUT/static.csv" "$OUT/migrate.csv" | awk -F, 'NR > 1 { d = $2 - $14; if (d < 0) d = -d; if (d > m) m = d; n++ }
  END { printf "max |loss migrated - static| = %.2e over %d steps\n", m, n; exit !(n == 16 && m < 1e-4) }' ||
  fail "loss does not track the static run"

# A migration requested before a grow moves the processes the grow started too.
rm -rf "$OUT/job_grow" && mkdir -p "$OUT/job_grow"
env $(hold_env "$OUT/job_grow") mpirun -np 2 "$BIN" train --model tiny-dense --steps 6 --global-batch 8 --seq 32 --threads 1 --schedule "0:dp=2;3:dp=4" \
  --job "$OUT/job_grow" --lookahead 1 --json "$OUT/grow_migrate.json" > "$OUT/grow_migrate.log" 2>&1 &
pid=$!
wait_held "$OUT/job_grow"
"$BIN" request --job "$OUT/job_grow" --migrate --to dp=4 --at-step 5 > /dev/null || fail "request --migrate (after a grow)"
release "$OUT/job_grow"
wait "$pid" || { cat "$OUT/grow_migrate.log"; fail "grow then migrate: exit status $?"; }
grep -q '"placement": "4,5,6,7"' "$OUT/grow_migrate.json" ||
  { grep '"placement"' "$OUT/grow_migrate.json"; fail "the migration after the grow did not vacate all 4 processes"; }

# A migration whose processes cannot start is refused; the job finishes in its processes.
rm -rf "$OUT/job_refused" && mkdir -p "$OUT/job_refused"
env $(hold_env "$OUT/job_refused") DT_EDM_EXECUTABLE=/nonexistent/dynatrain mpirun -np 2 "$BIN" train --model tiny-dense --steps 5 --global-batch 6 \
  --seq 32 --threads 1 --schedule "0:dp=2" --job "$OUT/job_refused" --lookahead 1 --csv "$OUT/refused.csv" \
  > "$OUT/refused.log" 2>&1 &
pid=$!
wait_held "$OUT/job_refused"
# --wait follows the request to its answer: the migration is refused (its processes cannot start).
"$BIN" request --job "$OUT/job_refused" --migrate --at-step 2 --wait > "$OUT/refused_wait.out" 2> "$OUT/refused_wait.err" &
waiter=$!
for _ in $(seq 1 3000); do compgen -G "$OUT/job_refused/requests/*.json" > /dev/null && break; sleep 0.02; done
release "$OUT/job_refused"
wait "$pid" || { cat "$OUT/refused.log"; fail "refused migration: exit status $?"; }
set +e; wait "$waiter"; rc=$?; set -e
[[ $rc == 2 ]] && grep -q "refused: cannot start 2 process(es)" "$OUT/refused_wait.err" ||
  { cat "$OUT/refused_wait.out" "$OUT/refused_wait.err"; fail "request --wait on a refused migration: exit $rc"; }
grep -q "refused: cannot start 2 process(es): executable '/nonexistent/dynatrain' is missing" "$OUT/refused.log" ||
  { cat "$OUT/refused.log"; fail "no refusal line"; }
grep -q "^leader:" "$OUT/refused.log" && fail "the leader moved in a refused migration"
[[ $(wc -l < "$OUT/refused.csv") -eq 6 ]] || fail "refused run's CSV has $(wc -l < "$OUT/refused.csv") lines, want 6"
echo "edm migrate test: ok"
