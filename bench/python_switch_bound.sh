#!/usr/bin/env bash
# An adopted PyTorch job's job.switch() against its lower bound: 2 processes, an nn.Module of
# fp32 MLP blocks (hidden 1024, 4 blocks, 16.8 M parameters) with AdamW, 0.5-1.1 GB of state
# over the job; each pair switched there and back 14 times, the bound being the bytes into the
# busiest rank over the point-to-point rate measured in the same run (bench/python_switch_bench.py).
# Usage: bench/python_switch_bound.sh [BUILD_DIR]   (refreshes bench/results/python-switch-bound.md)
set -euo pipefail
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../scripts/mpi-env.sh"
source "$HERE/results.sh"
results_begin python-switch-bound text "$0 $*"
PYENV_VERSION=system PYTHONPATH="$BUILD/python" mpirun -np 2 -x PYENV_VERSION python3 "$HERE/python_switch_bench.py" --adopted --hidden 1024 --blocks 4 \
  --rounds 7 --adopted-pairs "tp=2>dp=2;dp=2,zero=0>tp=2;tp=2>dp=2,zero=2"
uptime
results_end
