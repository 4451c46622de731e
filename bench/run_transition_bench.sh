#!/usr/bin/env bash
# Runs the transition benchmark at 4 and 8 ranks and prints Markdown tables.
#   bench/run_transition_bench.sh [BUILD_DIR] [--quick]
# BUILD_DIR defaults to ./build; it must hold bench_transition (cmake --build BUILD_DIR
# --target bench_transition). Needs a few GB of free memory per run (8 ranks: ~10 GB peak).
set -euo pipefail
build=${1:-build}
shift || true
exe="$build/bench_transition"
[[ -x "$exe" ]] || { echo "no $exe; build the bench_transition target first" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for np in 4 8; do
  mpirun -np "$np" "$exe" "$@"
done
