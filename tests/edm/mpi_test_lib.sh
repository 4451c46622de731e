# Sourced by the edm/ mpirun tests (edm_mpi_test.sh, edm_migrate_test.sh) after `set -euo pipefail`:
# BIN and OUT from the arguments (DYNATRAIN [OUT_DIR]), the Open MPI variables, fail().
BIN=$(readlink -f "$1")
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_orte_allowed_exit_without_sync=1
export PMIX_MCA_gds=hash  # spawned processes can hang in PMIx_Init otherwise (scripts/mpi-env.sh)
fail() { echo "FAIL: $*" >&2; exit 1; }
# A job that takes requests at known steps: `hold_env DIR` is the environment that makes its
# leader stop itself (SIGSTOP) before step 0 (job/fault_injection.h; the stamp keeps processes
# started later from stopping too); `wait_held DIR` waits for that; requests placed then are
# taken at the boundary of step 1; `release DIR` lets the leader go on (SIGCONT to the pid in
# DIR/job.lock). A held job's heartbeat stops: DT_JOB_STALE_S keeps it live for the test.
export DT_JOB_STALE_S=600
hold_env() { echo "DT_FAULT=stop:0:step:0 DT_FAULT_STAMP=$1/held.stamp"; }
HELD=()
# A test that fails while a job is held leaves no stopped leader behind.
kill_held() {
  local rc=$? dir
  if ((rc != 0)); then
    for dir in "${HELD[@]}"; do [[ -e $dir/job.lock ]] && kill -KILL "$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$dir/job.lock")" 2>/dev/null; done
    kill -KILL $(jobs -p) 2>/dev/null
  fi
  return $rc
}
trap kill_held EXIT
wait_held() {
  HELD+=("$1")
  for _ in $(seq 1 6000); do [[ -e $1/held.stamp && -e $1/job.lock ]] && return 0; sleep 0.02; done
  fail "the job in $1 never held before step 0"
}
release() { kill -CONT "$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$1/job.lock")"; }
