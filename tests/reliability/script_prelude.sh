# Sourced by the reliability scripts that run `dynatrain train` end to end: DYNATRAIN and
# MPIEXEC from the arguments ($dt, $mpiexec), a scratch directory $tmp removed at exit, no core
# files, the fixed training text $data (tests/data/train_text.txt), fail MESSAGE, py (Debian's
# python3), and for a job run in the background with its output in $tmp/NAME.log and
# $tmp/NAME.err and its pid in $job: finish NAME EXIT and wait_for_step NAME STEP.
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
