#!/usr/bin/env bash
# Checkpoint benchmark (bench/ckpt_bench.cc) at 4 ranks: times a process restart, best of 3, then
# runs the benchmark with it. The restart is the real one when BUILD_DIR/dynatrain has `train`:
# `mpirun -np 4 dynatrain train` of tiny-dense for one step (MPI start-up, libtorch, the trainer's
# groups and state, one small step, exit); else, and printed in any case, a bare mpirun of
# bench_ckpt --restart-probe (MPI start-up and exit only). The whole script, restart timing
# included, runs under flock /tmp/dt-bench.lock so that two benchmarks never overlap on the
# shared machine and the restart is timed in the same run as the save, load and switch.
#   bench/run_ckpt_bench.sh [BUILD_DIR] [--quick]
# Checkpoint files go to DT_CKPT_DIR (default /tmp); needs ~7 GB of free memory. Refreshes
# bench/results/checkpoint.md (bench/results.sh; not with --quick).
set -euo pipefail
if [[ -z ${DT_BENCH_LOCKED:-} ]]; then DT_BENCH_LOCKED=1 exec flock /tmp/dt-bench.lock "$0" "$@"; fi
build=${1:-build}
shift || true
source "$(dirname "$0")/results.sh"
[[ " $* " == *" --quick "* ]] && export DT_RESULTS=0
results_begin checkpoint text "$0 $build $*"
exe="$build/bench_ckpt"
[[ -x "$exe" ]] || { echo "no $exe; build the bench_ckpt target first" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
np=4
best_of_3() {  # seconds of the fastest of three runs of "$@"
  local best="" t0 t
  for i in 1 2 3; do
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t=$(echo "$(date +%s.%N) - $t0" | bc -l)
    if [[ -z $best ]] || (( $(echo "$t < $best" | bc -l) )); then best=$t; fi
  done
  echo "$best"
}
best=$(best_of_3 mpirun -np "$np" "$exe" --restart-probe)
echo "bare process restart (mpirun -np $np, MPI init + exit, best of 3): $best s"
if "$build/dynatrain" train --help >/dev/null 2>&1 && ! "$build/dynatrain" train --help | grep -q "no libtorch"; then
  best=$(best_of_3 mpirun -np "$np" "$build/dynatrain" train --model tiny-dense --steps 1 --global-batch 4 --seq 16 \
    --threads 1 --schedule "0:tp=2,dp=2")
  echo "trainer restart (mpirun -np $np dynatrain train, tiny-dense, 1 step, best of 3): $best s (counted below)"
fi
mpirun -np "$np" "$exe" --restart-s "$best" "$@"
results_end
