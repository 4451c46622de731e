#!/usr/bin/env bash
# Builds (installing what is missing) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/mpi-env.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
