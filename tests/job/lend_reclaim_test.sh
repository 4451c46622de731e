#!/usr/bin/env bash
# `dynatrain request --lend N` / `--reclaim` on a running `train --job DIR` job under mpirun -np 4
# (docs/cli.md, "request"): the job runs tp=2,dp=2; a reclaim with nothing lent is refused; a
# lend of 2 before step 4 moves the state onto 2 processes (tp=2,dp=1) while the other 2 stay,
# idle; a --to switch while they are lent is refused; the reclaim before step 8 takes them back.
# Checked: the same 4 process ids from the first step to the end (no process leaves or starts),
# the layouts of the CSV rows, every step's loss equal to that of a run given the same layouts by
# --schedule, whose processes may not leave (the switches are bit-exact; training at dp=1 rounds
# differently from dp=2, so a run that stays at dp=2 is no reference), the answers (refused,
# committed) and world_before = world_after = 4 in each switch.
# Usage: lend_reclaim_test.sh DYNATRAIN [OUT_DIR]. Needs mpirun.
set -euo pipefail
source "$(dirname "$0")/../edm/mpi_test_lib.sh" "$@"
BASE=(train --model tiny-dense --steps 12 --global-batch 8 --seq 16 --threads 1 --lookahead 2)
TRAIN=("${BASE[@]}" --schedule "0:tp=2,dp=2")

# The reference: the same layouts by --schedule; without Open MPI's exit permission no process leaves.
rm -f "$OUT/static.csv"
env -u OMPI_MCA_orte_allowed_exit_without_sync mpirun -np 4 "$BIN" "${BASE[@]}" --schedule "0:tp=2,dp=2;4:tp=2,dp=1;8:tp=2,dp=2" \
  --csv "$OUT/static.csv" > "$OUT/static.log" 2>&1 || { cat "$OUT/static.log"; fail "scheduled run"; }
grep -q "stay, idle" "$OUT/static.log" || { cat "$OUT/static.log"; fail "the scheduled run's processes did not stay"; }

D="$OUT/job"
rm -rf "$D" "$OUT/lend.csv" "$OUT/pids.seen" && mkdir -p "$D"
env $(hold_env "$D") mpirun -np 4 "$BIN" "${TRAIN[@]}" --job "$D" --csv "$OUT/lend.csv" > "$OUT/lend.log" 2>&1 &
pid=$!
wait_held "$D"
pgrep -P "$pid" | sort > "$OUT/pids.start"
[[ $(wc -l < "$OUT/pids.start") == 4 ]] || fail "want 4 processes under mpirun, got: $(cat "$OUT/pids.start")"
queued() { for _ in $(seq 1 3000); do [[ $(compgen -G "$D/requests/*.json" | wc -l) == "$1" ]] && return; sleep 0.02; done; fail "request $1 never queued"; }
"$BIN" request --job "$D" --reclaim --wait > "$OUT/early.out" 2> "$OUT/early.err" &
early=$!
queued 1
"$BIN" request --job "$D" --lend 2 --at-step 4 --wait > "$OUT/lend.out" 2> "$OUT/lend.err" &
lend=$!
queued 2
"$BIN" request --job "$D" --to tp=1,dp=2 --at-step 6 --wait > "$OUT/to.out" 2> "$OUT/to.err" &
to=$!
queued 3
"$BIN" request --job "$D" --reclaim --at-step 8 --wait > "$OUT/reclaim.out" 2> "$OUT/reclaim.err" &
reclaim=$!
queued 4
release "$D"
while kill -0 "$pid" 2> /dev/null; do pgrep -P "$pid" >> "$OUT/pids.seen" || true; sleep 0.05; done
wait "$pid" || { cat "$OUT/lend.log"; fail "the job exited with $?"; }
sort -u "$OUT/pids.seen" | cmp -s - "$OUT/pids.start" || fail "process ids changed: $(sort -u "$OUT/pids.seen" | tr '\n' ' ') vs $(tr '\n' ' ' < "$OUT/pids.start")"
declare -A waiter=([early]=$early [lend]=$lend [to]=$to [reclaim]=$reclaim) want=([early]=2 [lend]=0 [to]=2 [reclaim]=0)
for r in early lend to reclaim; do
  set +e; wait "${waiter[$r]}"; rc=$?; set -e
  [[ $rc == "${want[$r]}" ]] || { cat "$OUT/$r.out" "$OUT/$r.err" "$OUT/lend.log"; fail "request $r: exit $rc, want ${want[$r]}"; }
done
grep -q "no process is lent" "$OUT/early.err" || fail "early reclaim: $(cat "$OUT/early.err")"
grep -q "while processes are lent .*--reclaim first" "$OUT/to.err" || fail "--to while lent: $(cat "$OUT/to.err")"
grep -q "committed before step 4 (tp=2,pp=1,dp=1,zero=1," "$OUT/lend.out" || fail "lend: $(cat "$OUT/lend.out")"
grep -q "committed before step 8 (tp=2,pp=1,dp=2,zero=1," "$OUT/reclaim.out" || fail "reclaim: $(cat "$OUT/reclaim.out")"
awk -F, 'NR > 1 { want = ($1 >= 4 && $1 < 8) ? "tp=2 pp=1 dp=1 zero=1" : "tp=2 pp=1 dp=2 zero=1"; if ($5 != want) bad = 1; n++ }
         END { exit bad || n != 12 }' "$OUT/lend.csv" || { cat "$OUT/lend.csv"; fail "layouts by step"; }
paste -d, <(cut -d, -f1,2 "$OUT/static.csv") <(cut -d, -f1,2 "$OUT/lend.csv") |
  awk -F, 'NR > 1 { if ($1 != $3 || $2 != $4) { print "step " $1 ": loss " $4 " vs static " $2; bad = 1 } } END { exit bad }' ||
  fail "losses differ from the scheduled run"
worlds=$(python3 -c 'import json, sys
print(sum(1 for l in open(sys.argv[1]) for e in [json.loads(l)] if e["event"] == "switch_committed"
          and e.get("world_before") == e.get("world_after") == 4))' "$D/events.jsonl")
[[ $worlds == 2 ]] || { grep switch_ "$D/events.jsonl"; fail "want 2 switches on 4 processes, got $worlds"; }
echo "lend / reclaim test: ok"
