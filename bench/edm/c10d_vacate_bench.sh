#!/usr/bin/env bash
# The CLI trainer's notice vacated live, on torch.distributed against MPI, at GB scale: the
# llama-style 133M model (2.1 GB of state over 4 processes) in tp=2,dp=2 on 4 processes; rank 3
# gets a notice (DT_FAULT=notice) during step 1 and is vacated into the layout for 3
# (the restart rule picks tp=1,pp=3), prepared behind step 2 and committed before step 3 (a
# 60 s notice: two of c10d's 6 s steps must fit in half of it for the prepare to be hidden,
# else it is prepared and committed at once, in the pause). Once started by `dynatrain launch --np 4` (c10d, Gloo over TCP loopback), once by
# `mpirun -np 4` (Open MPI: shared memory and cross-memory attach). Each switch's pause against
# two floors measured in the same run through `--json`: the bare exchange of the switch's own
# bytes with the same peers right after its commit, and the bound from one link measured after
# Run under `flock /tmp/dt-bench.lock` on a shared machine.
# Usage: bench/edm/c10d_vacate_bench.sh [BUILD_DIR] [OUT_DIR]   (refreshes bench/results/c10d-vacate.md)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench-out/c10d-vacate}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN="$BUILD/dynatrain"
source "$HERE/../../scripts/mpi-env.sh"
source "$HERE/../results.sh"
source "$HERE/switch_report.sh"
results_begin c10d-vacate text "$0 $*"
TRAIN=(train --model "$HERE/llama-133m.json" --global-batch 4 --seq 32 --threads 1 --steps 5
  --schedule "0:tp=2,dp=2" --notice-s 60)
uptime
for transport in c10d mpi; do
  if [[ $transport == c10d ]]; then
    echo "== c10d: dynatrain launch --np 4 -- dynatrain ${TRAIN[*]}"
    launcher=("$BIN" launch --np 4 --port 0 -- "$BIN")
  else
    echo "== mpi: mpirun -np 4 dynatrain ${TRAIN[*]}"
    launcher=(mpirun -np 4 "$BIN")
  fi
  rm -f "$OUT/$transport.stamp"  # the fault fires once per stamp file
  DT_FAULT=notice:3:step:0:1 DT_FAULT_STAMP="$OUT/$transport.stamp" \
    "${launcher[@]}" "${TRAIN[@]}" --json "$OUT/$transport.json" >"$OUT/$transport.log" 2>&1 ||
    { tail -20 "$OUT/$transport.log"; exit 1; }
  rm -f "$OUT/$transport.stamp"
  switch_report "$OUT/$transport.log" "$OUT/$transport.json"
  grep -oE 'step +4 .*' "$OUT/$transport.log" | sed 's/^/   last step: /'
done
uptime
results_end
