#!/usr/bin/env bash
# The nightly chaos run of an adopted PyTorch job (scripts/chaos_python.py), on MPI and on
# torch.distributed (Gloo under `dynatrain launch`): EVENTS seeded notices and kills over STEPS
# steps each; the table goes into bench/results/chaos-python.md (DT_RESULTS=0: left alone).
# Environment: CHAOS_SEED (default 1), STEPS (120), EVENTS (12).
# Usage: scripts/chaos-python.sh [BUILD] [OUT]
set -uo pipefail  # a failed run fails the pipe into grep
BUILD=${1:-build}
OUT=${2:-/tmp/dt-chaos-python}
SEED=${CHAOS_SEED:-1} STEPS=${STEPS:-120} EVENTS=${EVENTS:-12}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$BUILD" && pwd)
source "$HERE/mpi-env.sh"
source "$HERE/../bench/results.sh"
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 PYENV_VERSION=system
results_begin chaos-python markdown "CHAOS_SEED=$SEED STEPS=$STEPS EVENTS=$EVENTS $0 $*"
echo "| transport | seed | steps | events | notices | kills | notices acted on | restarts | steps lost | largest loss difference from plain torch (relative) | wall time |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
code=0
for c10d in "" --c10d; do
  python3 "$HERE/chaos_python.py" $c10d --seed "$SEED" --events "$EVENTS" --steps "$STEPS" --build "$BUILD" \
    --out "$OUT${c10d:+-c10d}" | grep -v '^chaos: ok' || code=1
done
((code == 0)) || { echo "chaos-python: FAIL (above)"; exit 1; }
results_end
