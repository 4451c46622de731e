#!/usr/bin/env bash
# Placement under mpirun: run-transition with a destination placement moves real bytes between
# real processes and every destination element is verified (content oracle), forward and, with
# --repeat 2, back and forward again (the way back has the placement on its source side).
# Usage: placement_mpi_test.sh DYNATRAIN MPIEXEC
set -u
dt="$1"
mpiexec="${2:-mpirun}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
run() {  # run <np> <expected placement line or -> -- args...
  local np="$1" want="$2"
  shift 3
  if ! timeout 120 "$mpiexec" -np "$np" "$dt" run-transition --verify --repeat 2 "$@" >"$tmp/out" 2>&1 ||
     ! grep -q "^verify: ok" "$tmp/out" || { [[ $want != - ]] && ! grep -qF -- "$want" "$tmp/out"; }; then
    echo "FAIL: mpirun -np $np dynatrain run-transition $*"; cat "$tmp/out"; fail=1
  else
    echo "ok: mpirun -np $np dynatrain run-transition $* ($(grep -m1 placement "$tmp/out" | xargs))"
  fi
}
# A given placement: the ranks in reverse order, TP change with ZeRO-1 buckets.
run 4 "placement            3,2,1,0 (4 of 4" -- --model tiny-dense --from tp=2,dp=2 --to tp=4 \
    --placement 3,2,1,0 --bucket-elems 700 --gpus-per-node 2
# Grow 2 -> 4 with a given placement: joining processes 0 and 2 take ranks 1 and 3.
run 4 "placement            1,0,3,2" -- --model tiny-moe --from tp=2,zero=1 --to tp=2,dp=2,ep=2,zero=1 \
    --placement 1,0,3,2 --bucket-elems 900 --gpus-per-node 2
# Auto on a switch where it moves ranks (checked by `plan --placement auto`, tests/plan).
run 4 "placement " -- --model tiny-dense --from tp=4,zero=1 --to tp=2,dp=2,zero=1 --placement auto \
    --bucket-elems 700 --gpus-per-node 2
# Auto chooses by node, not only by what one process keeps (tests/plan, AutoPlacement.
# PrefersTheNodeHoldingMostOverAProcessKeepingAsMuch): dp=6 -> dp=2 on nodes of two; rank 1 on
# process 4 finds two of its three ZeRO sixths on its node, so two sixths of the optimizer state
# cross nodes; on process 3, which keeps as much, three do. Packed layouts (--no-align-pages),
# as `plan` lays them out below: page padding would move the ZeRO sixths' bounds.
run 6 "inter-node bytes     706.43 KiB" -- --model tiny-dense --from dp=6,zero=1 --to dp=2,zero=1 \
    --placement auto --bucket-elems 700 --gpus-per-node 2 --no-align-pages
run 6 "inter-node bytes     1.03 MiB" -- --model tiny-dense --from dp=6,zero=1 --to dp=2,zero=1 \
    --placement 0,3 --bucket-elems 700 --gpus-per-node 2 --no-align-pages
# Auto on a switch where the identity is best: no placement line, still verified.
run 2 - -- --model tiny-dense --from tp=2 --to tp=2 --placement auto
# plan prints the floor over all placements; on the switch above auto reaches it (2 sixths).
if ! "$dt" plan --model tiny-dense --from dp=6,zero=1 --to dp=2,zero=1 --placement auto --bucket-elems 700 \
     --gpus-per-node 2 >"$tmp/out" 2>&1 || ! grep -q "inter-node 706.43 KiB vs 1.38 MiB fixed" "$tmp/out" ||
   ! grep -q "no placement sends fewer than 706.43 KiB across nodes" "$tmp/out"; then
  echo "FAIL: plan --placement auto did not print auto's bytes and the floor"; cat "$tmp/out"; fail=1
else
  echo "ok: plan prints the floor, and auto reaches it"
fi
# A bad placement is one error on every rank, not a hang.
if timeout 60 "$mpiexec" -np 2 "$dt" run-transition --model tiny-dense --from tp=2 --to dp=2 --placement 0,0 \
     >"$tmp/out" 2>&1 || ! grep -q "puts ranks 0 and 1 on process 0" "$tmp/out"; then
  echo "FAIL: a placement putting two ranks on one process was not rejected"; cat "$tmp/out"; fail=1
else
  echo "ok: --placement 0,0 rejected"
fi
exit $fail
