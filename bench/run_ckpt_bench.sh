#!/usr/bin/env bash
# Checkpoint benchmark (bench/ckpt_bench.cc) at 4 ranks: times a bare process restart (mpirun
# of bench_ckpt --restart-probe: MPI start-up and exit, best of 3), then runs the benchmark with
# it. Under flock so that two benchmarks never overlap on the shared machine.
#   bench/run_ckpt_bench.sh [BUILD_DIR] [--quick]
# Checkpoint files go to DT_CKPT_DIR (default /tmp); needs ~7 GB of free memory.
set -euo pipefail
build=${1:-build}
shift || true
exe="$build/bench_ckpt"
[[ -x "$exe" ]] || { echo "no $exe; build the bench_ckpt target first" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
np=4
best=""
for i in 1 2 3; do
  t0=$(date +%s.%N)
  mpirun -np "$np" "$exe" --restart-probe
  t=$(echo "$(date +%s.%N) - $t0" | bc -l)
  if [[ -z $best ]] || (( $(echo "$t < $best" | bc -l) )); then best=$t; fi
done
echo "process restart (mpirun -np $np, MPI init + exit, best of 3): $best s"
exec flock /tmp/dt-bench.lock mpirun -np "$np" "$exe" --restart-s "$best" "$@"
