#!/usr/bin/env bash
# Builds (installing what is missing) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/mpi-env.sh
# Open MPI leaves a job's shared-memory segments in /dev/shm when the job is killed (the fault
# tests kill many); on a machine that ran the suite often, stale ones coincided with spawned
# processes that never joined. Remove those no running process maps.
for segment in /dev/shm/vader_segment.*; do
  [[ -e $segment ]] || continue
  grep -qsF -- "$segment" /proc/[0-9]*/maps || rm -f -- "$segment"
done
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
