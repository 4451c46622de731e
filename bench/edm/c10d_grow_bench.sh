#!/usr/bin/env bash
# The CLI trainer's grow on torch.distributed against MPI, at GB scale: the llama-style 133M
# model (2.1 GB of state over 4 processes) on 2 processes in dp=2 grows to tp=2,dp=2 on 4 before
# step 3, prepared behind the steps before it. Once under `dynatrain launch --np 2` (c10d: world
# rank 0 starts the 2 joiners, which join through the job's rendezvous store,
# edm/store_launcher.h), once under `mpirun -np 2` (Open MPI: MPI_Comm_spawn and a merge). Each
# switch's pause against two floors measured in the same run through `--json`: the bare exchange
# of the switch's own bytes with the same peers right after its commit, and the bound from one
# link measured after the commit; and its prepare (the joiners' start-up and groups), with the
# share of it hidden behind steps.
# Run under `flock /tmp/dt-bench.lock` on a shared machine.
# Usage: bench/edm/c10d_grow_bench.sh [BUILD_DIR] [OUT_DIR]   (refreshes bench/results/c10d-grow.md)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench-out/c10d-grow}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN="$BUILD/dynatrain"
source "$HERE/../../scripts/mpi-env.sh"
source "$HERE/../results.sh"
source "$HERE/switch_report.sh"
results_begin c10d-grow text "$0 $*"
TRAIN=(train --model "$HERE/llama-133m.json" --global-batch 4 --seq 32 --threads 1 --steps 5
  --schedule "0:dp=2;3:tp=2,dp=2")
uptime
for transport in c10d mpi; do
  if [[ $transport == c10d ]]; then
    echo "== c10d: dynatrain launch --np 2 -- dynatrain ${TRAIN[*]}"
    launcher=("$BIN" launch --np 2 --port 0 -- "$BIN")
  else
    echo "== mpi: mpirun -np 2 dynatrain ${TRAIN[*]}"
    launcher=(mpirun -np 2 "$BIN")
  fi
  "${launcher[@]}" "${TRAIN[@]}" --json "$OUT/$transport.json" >"$OUT/$transport.log" 2>&1 ||
    { tail -20 "$OUT/$transport.log"; exit 1; }
  switch_report "$OUT/$transport.log" "$OUT/$transport.json"
  grep -oE 'step +4 .*' "$OUT/$transport.log" | sed 's/^/   last step: /'
done
uptime
results_end
