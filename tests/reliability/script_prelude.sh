# Sourced by the reliability scripts that run `dynatrain train` end to end: DYNATRAIN and
# MPIEXEC from the arguments ($dt, $mpiexec), a scratch directory $tmp removed at exit, no core
# files, the fixed training text $data (tests/data/train_text.txt), fail MESSAGE.
set -u
dt="$1"
mpiexec="${2:-mpirun}"
here="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ulimit -c 0
data="$(cd "$here/../data" && pwd)/train_text.txt"
fail() { echo "FAIL: $*"; exit 1; }
