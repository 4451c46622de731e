# Sourced by the edm/ mpirun tests (edm_mpi_test.sh, edm_migrate_test.sh) after `set -euo pipefail`:
# BIN and OUT from the arguments (DYNATRAIN [OUT_DIR]), the Open MPI variables, fail().
BIN=$(readlink -f "$1")
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_orte_allowed_exit_without_sync=1
export PMIX_MCA_gds=hash  # spawned processes can hang in PMIx_Init otherwise (scripts/mpi-env.sh)
fail() { echo "FAIL: $*" >&2; exit 1; }
