#!/usr/bin/env bash
# Nightly-size random switch run: every kind of switch (tp, pp, dp, ep, zero, grow, shrink,
# hybrid; dense and MoE) drawn PER_KIND times for each process count 2..8, executed under
# mpirun by the real engine and checked byte by byte (tests/exec/exec_cases.cc). A fresh seed
# each run (DT_TEST_SEED, printed; set it to replay). Needs build/ (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi-env.sh
export DT_TEST_SEED="${DT_TEST_SEED:-$(date +%s)}"
per_kind="${PER_KIND:-8}"
total=0
for np in 2 3 4 5 6 7 8; do
  n=$(mpirun -np "$np" build/tests/exec/test_exec_mpi "$per_kind" | grep '^\[ok\] np' | grep -vc 'message counts')
  echo "np $np: $n switches verified"
  total=$((total + n))
done
echo "random switches byte-verified under mpirun: $total (DT_TEST_SEED=$DT_TEST_SEED, $per_kind per kind)"
