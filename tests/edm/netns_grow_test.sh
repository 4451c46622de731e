#!/usr/bin/env bash
# A grow onto another host (hosts from an MPI hostfile or --host, so it works across
# machines), on the two-node rehearsal (scripts/netns-*.sh: two network namespaces with
# their own hostnames, Open MPI's remote launch through scripts/netns-agent.sh, TCP between
# them). mpirun is given node 0 only; `train --host NODE1:2` grows dp=2 -> dp=4 onto node 1
# (the hosts join the job's allocation with the spawn) and shrinks back to dp=2. Checks: node 1
# runs 2 dynatrain processes, then none; the CSV's world column is 2, 4, 2 per phase; the
# loss equals a static dp=2 run's within 1e-4. Skips (exit 77) where namespaces cannot be made.
# Usage: netns_grow_test.sh DYNATRAIN
set -u
dt="$1"
scripts="$(cd "$(dirname "$0")/../../scripts" && pwd)"
fail() { echo "FAIL: $*"; exit 1; }
export DTC_STATE
DTC_STATE=$(mktemp -d)
source "$scripts/netns-env.sh"
dtc_lock  # a rehearsal or bench using the namespaces finishes first
dtc_can_make_nodes || { echo "skip: cannot create network namespaces, veth pairs or tc qdiscs here"; exit 77; }
trap '"$scripts/netns-down.sh" >/dev/null' EXIT
"$scripts/netns-up.sh" 8 2 || exit 1
out="$DTC_STATE/out"
mkdir -p "$out"
# dynatrain processes alive (not zombies) in a node's namespace.
alive_in() { ip netns pids "$(dtc_ns "$1")" | xargs -r ps -o stat=,comm= -p | grep -v '^Z' | grep -c dynatrain; }
COMMON=(train --model tiny-dense --steps 20 --global-batch 8 --seq 32 --threads 1)
timeout 150 "$scripts/netns-mpirun.sh" -np 2 --host "$(dtc_addr 0):2" "$dt" "${COMMON[@]}" \
  --schedule "0:dp=2;5:dp=4;11:dp=2" --host "$(dtc_addr 1):2" --csv "$out/grow.csv" > "$out/grow.log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  alive_in 1
  sleep 0.05
done > "$out/node1.txt"
wait "$pid" || { cat "$out/grow.log"; fail "the run across two nodes exited with $?"; }
seen=$(awk '$1 != last { printf "%s ", $1; last = $1 }' "$out/node1.txt")
echo "dynatrain processes on node 1: $seen"
# The grow's processes start while dp=2 still trains (prepared ahead), so the first sample may
# already see them, and they start and leave one by one (a sample may see 1): node 1 must reach
# 2, never more, and end with none.
awk 'NR == 1 { m = $1 } { if ($1 > m) m = $1; last = $1 } END { exit !(m == 2 && last == 0) }' "$out/node1.txt" ||
  { cat "$out/grow.log"; fail "node 1 ran '$seen' processes, want up to 2, then none"; }
awk -F, 'NR > 1 { want = $1 < 5 ? 2 : $1 < 11 ? 4 : 2; if ($11 != want) { print "step " $1 ": world " $11 ", want " want; bad = 1 } }
         END { exit bad }' "$out/grow.csv" || fail "CSV world column"
source "$scripts/mpi-env.sh"
mpirun -np 2 "$dt" "${COMMON[@]}" --schedule "0:dp=2" --static --csv "$out/static.csv" > "$out/static.log" 2>&1 ||
  { cat "$out/static.log"; fail "static run"; }
paste -d, "$out/static.csv" "$out/grow.csv" | awk -F, 'NR > 1 { d = $2 - $14; if (d < 0) d = -d; if (d > m) m = d }
  END { printf "max |loss across nodes - static| = %.2e\n", m; exit !(m < 1e-4) }' || fail "loss does not track the static run"
echo "ok: a grow onto another host and back"
