# Sourced by the reliability scripts that run `dynatrain train` end to end: DYNATRAIN and
# MPIEXEC from the arguments ($dt, $mpiexec), a scratch directory $tmp removed at exit, no core
# files, the fixed training text $data (tests/data/train_text.txt), fail MESSAGE, py (Debian's
# python3), and for a job run in the background with its output in $tmp/NAME.log and
# $tmp/NAME.err and its pid in $job: finish NAME EXIT, wait_for_step NAME STEP and
# two_notices_sizes NAME PID PID.
set -u
dt="$1"
mpiexec="${2:-mpirun}"
here="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ulimit -c 0
data="$(cd "$here/../data" && pwd)/train_text.txt"
fail() { echo "FAIL: $*"; exit 1; }
py() { PYENV_VERSION=system python3 "$@"; }
finish() {  # NAME EXPECTED_EXIT
  wait "$job"
  local code=$?
  ((code == $2)) || { cat "$tmp/$1.log" "$tmp/$1.err"; fail "$1: exit $code, expected $2"; }
}
wait_for_step() {  # NAME STEP: until the job's leader has printed that step's line
  for _ in $(seq 600); do
    grep -Eq "step +$2  loss" "$tmp/$1.log" 2>/dev/null && return
    sleep 0.1
  done
  fail "$1: step $2 never written"
}
two_notices_sizes() {  # NAME PID1 PID2: after SIGTERM to world ranks 1 and 2 of a 4-process job
  # Prints the job's process counts by step ("0:4,S:2", or "0:4,S:3,T:2"), or fails (on stderr).
  # Two signals from outside may straddle a boundary's agreement: then one notice is acted on at
  # that boundary and the other's a boundary or two later, a switch each.
  local log="$tmp/$1.log" notices pids first second
  if grep -q "^notice: ranks 1 (pid $2), 2 (pid $3) will be gone in 30 s (SIGTERM): vacating them into .* before step [0-9]*$" "$log"; then
    echo "0:4,$(sed -n 's/^notice: ranks 1 .* before step \([0-9]*\)$/\1/p' "$log"):2"
    return
  fi
  notices=$(grep "^notice: rank [0-9] (pid [0-9]*) will be gone in 30 s (SIGTERM): vacating it into .* before step [0-9]*$" "$log")
  pids=$(sed -n 's/^notice: rank [0-9] (pid \([0-9]*\)).*/\1/p' <<<"$notices" | sort | tr '\n' ' ')
  [[ $pids == "$(printf '%s\n' "$2" "$3" | sort | tr '\n' ' ')" ]] ||
    { { cat "$log"; echo "FAIL: $1: no notice line for both, nor one each for pids $2 and $3"; } >&2; return 1; }
  read -r first second < <(sed -n 's/.* before step \([0-9]*\)$/\1/p' <<<"$notices" | tr '\n' ' ')
  echo "0:4,$first:3,$second:2"
}
