#!/usr/bin/env bash
# Runs every scenario of bench_mpi_recovery_probe (bench/mpi_recovery/recovery_probe.cc) and prints
# each command line, its output, exit status and wall time: the raw record behind
# bench/results/mpi_recovery.md.  Usage: bench/mpi_recovery/run.sh [build dir] > log
set -u
build=${1:-build}
probe=$(realpath "$build/bench_mpi_recovery_probe")
cd "$(dirname "$0")/../.." && source scripts/mpi-env.sh
export OMPI_MCA_orte_execute_quiet=0   # keep mpirun's own account of the loss
deadline=15
run() {  # run <mpirun options...> -- <probe args...>
  local opts=() ; while [ "$1" != "--" ]; do opts+=("$1"); shift; done; shift
  echo "### timeout 90 mpirun ${opts[*]} -np 3 bench_mpi_recovery_probe $*"
  local start=$(date +%s.%N)
  local out rc
  out=$(cd /tmp && timeout 90 mpirun "${opts[@]}" -np 3 "$probe" "$@" 2>&1)
  rc=$?
  grep -v '^\s*$' <<<"$out"
  echo "--> exit $rc, wall $(echo "$(date +%s.%N) - $start" | bc | cut -c1-5) s"
  echo
}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $(nproc) cores, $(mpirun --version | head -1)"
echo
# (a) does the job survive the loss?
run -- none none $deadline
run --enable-recovery -- none none $deadline
run --mca orte_enable_recovery 1 -- none none $deadline
run --mca mpi_ft_enable 1 -- none none $deadline
# (b) a blocking call that involves the dead rank, shared memory and TCP
for btl in vader tcp; do
  for op in recv send allreduce barrier; do
    run --enable-recovery --mca btl self,$btl -- $op none $deadline
  done
done
# (c) a communicator over the survivors; (d) a replacement
run --enable-recovery -- none shrink $deadline
run --enable-recovery -- allreduce shrink $deadline
run --enable-recovery -- none split $deadline
run --enable-recovery -- none spawn $deadline
run --enable-recovery --mca btl self,tcp -- none spawn $deadline
# and whether the survivors can finalize
run --enable-recovery -- none shrink $deadline finalize
