#!/usr/bin/env bash
# A scheduler driving a running `train --job DIR` job through its files (docs/edm.md, "Driving
# a job from a scheduler"):
#   1. two requests placed together are both answered: the first superseded, the second
#      committed (`request --wait`: exit 2 and exit 0), at the step its answer named;
#   2. a FIFO and a malformed file in DIR/requests/ are refused with one line each and never
#      block the job; a second job on the same DIR is refused while the first lives;
#   3. status.json ends "ended" with exit code 0, events.jsonl holds the story in order, and a
#      request to the ended job fails (exit 2);
#   4. `request --wait` on a job whose leader is killed returns exit 1.
# Usage: job_control_test.sh DYNATRAIN [OUT_DIR]. Needs mpirun.
set -euo pipefail
source "$(dirname "$0")/../edm/mpi_test_lib.sh" "$@"
TRAIN=(train --model tiny-dense --steps 8 --global-batch 4 --seq 16 --threads 1 --schedule "0:dp=2")
field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

D="$OUT/two"
rm -rf "$D" && mkdir -p "$D"
env $(hold_env "$D") mpirun -np 2 "$BIN" "${TRAIN[@]}" --job "$D" --lookahead 2 --csv "$OUT/two.csv" > "$OUT/two.log" 2>&1 &
pid=$!
wait_held "$D"
"$BIN" request --job "$D" --to tp=2 --wait > "$OUT/first.out" 2> "$OUT/first.err" &
first=$!
for _ in $(seq 1 3000); do compgen -G "$D/requests/*.json" > /dev/null && break; sleep 0.02; done
"$BIN" request --job "$D" --to tp=2,zero=0 --wait > "$OUT/second.out" 2> "$OUT/second.err" &
second=$!
for _ in $(seq 1 3000); do [[ $(compgen -G "$D/requests/*.json" | wc -l) == 2 ]] && break; sleep 0.02; done
mkfifo "$D/requests/zz-fifo.json"
printf '{"version":1,\n"to":' > "$D/requests/zz-bad.json"
# The directory is held: a second job there is refused in one line, before it trains.
set +e
mpirun -np 1 "$BIN" train --model tiny-dense --steps 2 --threads 1 --job "$D" > "$OUT/second_job.out" 2> "$OUT/second_job.err"
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "is held by another live job" "$OUT/second_job.err" ||
  { cat "$OUT/second_job.err"; fail "a second job on a held directory: exit $rc"; }
release "$D"
wait "$pid" || { cat "$OUT/two.log"; fail "job with two requests exited with $?"; }
set +e; wait "$first"; rc1=$?; wait "$second"; rc2=$?; set -e
[[ $rc1 == 2 ]] && grep -q "superseded: replaced by request" "$OUT/first.err" ||
  { cat "$OUT/first.out" "$OUT/first.err"; fail "first request: exit $rc1, want 2 (superseded)"; }
[[ $rc2 == 0 ]] && grep -q "committed before step 3" "$OUT/second.out" ||
  { cat "$OUT/second.out" "$OUT/second.err" "$OUT/two.log"; fail "second request: exit $rc2, want 0 (committed before step 3)"; }
awk -F, 'NR > 1 { want = $1 < 3 ? "tp=1 pp=1 dp=2 zero=1" : "tp=2 pp=1 dp=1 zero=0"; if ($5 != want) bad = 1 }
         END { exit bad }' "$OUT/two.csv" || fail "the committed request did not switch before step 3"
for why in "request file 'zz-fifo.json' is not a regular file (a FIFO)" "malformed request: not JSON"; do
  [[ $(grep -c "request refused: $why" "$OUT/two.log") == 1 ]] || { cat "$OUT/two.log"; fail "not refused once: $why"; }
done
[[ $(field "$D/status.json" health) == ended && $(field "$D/status.json" exit_code) == 0 ]] ||
  { cat "$D/status.json"; fail "status.json does not say ended, exit code 0"; }
events=$(sed -n 's/.*"event":"\([a-z_]*\)".*/\1/p' "$D/events.jsonl" | tr '\n' ' ')
echo "events: $events"
echo " $events" | grep -Eq ' job_started (.* )?request_accepted request_superseded request_accepted (.* )?switch_prepared switch_committed job_ended $' ||
  fail "events out of order: $events"
[[ $(grep -c '"v":1' "$D/events.jsonl") == $(wc -l < "$D/events.jsonl") ]] || fail "an event without its schema version"
set +e
"$BIN" request --job "$D" --to dp=2 > /dev/null 2> "$OUT/ended.err"
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "the job ended (exit code 0)" "$OUT/ended.err" || { cat "$OUT/ended.err"; fail "request to an ended job: exit $rc"; }

# The leader dies while a request waits: --wait returns 1.
D="$OUT/dies"
rm -rf "$D" && mkdir -p "$D"
env $(hold_env "$D") mpirun -np 2 "$BIN" "${TRAIN[@]}" --job "$D" > "$OUT/dies.log" 2>&1 &
pid=$!
wait_held "$D"
"$BIN" request --job "$D" --to tp=2 --wait > "$OUT/dies.out" 2> "$OUT/dies.err" &
waiter=$!
for _ in $(seq 1 3000); do compgen -G "$D/requests/*.json" > /dev/null && break; sleep 0.02; done
kill -KILL "$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$D/job.lock")"
wait "$pid" || true
set +e; timeout 60 tail --pid="$waiter" -f /dev/null; wait "$waiter"; rc=$?; set -e
[[ $rc == 1 ]] && grep -q "the job ended without answering" "$OUT/dies.err" ||
  { cat "$OUT/dies.out" "$OUT/dies.err"; fail "request --wait on a dead job: exit $rc, want 1"; }
echo "job control test: ok"
