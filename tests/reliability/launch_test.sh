#!/usr/bin/env bash
# One way to start a job (job/supervisor.h): `dynatrain train --np N`, run in an environment
# that has NOT sourced scripts/mpi-env.sh (env -i with PATH and HOME only), starts mpirun with
# what Open MPI needs itself. Checked by content:
#  * a job that grows from 2 to 4 processes and shrinks to 3 and 1 finishes (exit 0, nothing
#    on stderr, no note), each step on the processes its layout has (the CSV's world column),
#    with every loss equal to a static run's within fp32 reduction noise (another dp split);
#  * a plain `mpirun -np 2 dynatrain train` whose schedule shrinks, without
#    OMPI_MCA_orte_allowed_exit_without_sync=1, says so once at start (one line naming the
#    variable and `dynatrain train --np 2`), and not when the variable is set.
# Usage: launch_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"
common=(--model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1)
bare=(env -i PATH="$PATH" HOME="${HOME:-/root}")
schedule="0:dp=2;3:dp=4;6:dp=3;8:dp=1"

"${bare[@]}" timeout 300 "$dt" train --np 2 --mpirun "$mpiexec" "${common[@]}" --steps 10 --schedule "$schedule" --static \
  --csv "$tmp/static.csv" >"$tmp/s.log" 2>&1 || { cat "$tmp/s.log"; fail "static run"; }
"${bare[@]}" timeout 300 "$dt" train --np 2 --mpirun "$mpiexec" "${common[@]}" --steps 10 --schedule "$schedule" \
  --csv "$tmp/elastic.csv" >"$tmp/e.log" 2>"$tmp/e.err"
code=$?
((code == 0)) || { cat "$tmp/e.log" "$tmp/e.err"; fail "elastic run under train --np 2: exit $code"; }
[[ ! -s $tmp/e.err ]] || { cat "$tmp/e.err"; fail "stderr of the elastic run"; }
grep -q "^note:" "$tmp/e.log" && fail "train --np printed a note: $(grep '^note:' "$tmp/e.log")"
grep -q "processes 2 -> 4" "$tmp/e.log" && grep -q "processes 4 -> 3" "$tmp/e.log" && grep -q "processes 3 -> 1" "$tmp/e.log" ||
  { cat "$tmp/e.log"; fail "the switches did not change the processes"; }
PYENV_VERSION=system python3 - "$tmp/static.csv" "$tmp/elastic.csv" <<'PY' || fail "CSV"
import csv, sys
ref = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))}
rows = list(csv.DictReader(open(sys.argv[2])))
assert [int(r["step"]) for r in rows] == list(range(10)), "steps"
world = [int(r["world"]) for r in rows]
assert world == [2, 2, 2, 4, 4, 4, 3, 3, 1, 1], f"processes by step {world}"
for r in rows:
    s, loss = int(r["step"]), float(r["loss"])
    assert abs(loss - ref[s]) / ref[s] < 1e-4, f"step {s}: loss {loss} vs static {ref[s]}"
print("train --np 2 without mpi-env.sh: grew to 4, shrank to 3 and 1, losses equal the static run's")
PY

# A plain mpirun: the missing variable named once, at start.
root=()
((EUID == 0)) && root=(--allow-run-as-root)
plain() {  # plain ENV... : rank 0's stdout of a 3-step run that shrinks 2 -> 1
  "${bare[@]}" "$@" timeout 120 "$mpiexec" "${root[@]}" --oversubscribe -np 2 "$dt" train "${common[@]}" --steps 3 \
    --schedule "0:dp=2;2:dp=1" >"$tmp/p.log" 2>&1 || { cat "$tmp/p.log"; fail "plain mpirun run"; }
}
plain
(($(grep -c "^note: this mpirun's environment lacks" "$tmp/p.log") == 1)) &&
  grep -q "^note: this mpirun's environment lacks OMPI_MCA_orte_allowed_exit_without_sync=1 .*start the job as \`dynatrain train --np 2 ...\`" "$tmp/p.log" ||
  { cat "$tmp/p.log"; fail "no single note naming the variable under a plain mpirun"; }
[[ $(grep -n "^note: this mpirun" "$tmp/p.log" | cut -d: -f1) -lt $(grep -n "step *0 " "$tmp/p.log" | head -1 | cut -d: -f1) ]] ||
  fail "the note comes after training started"
plain OMPI_MCA_orte_allowed_exit_without_sync=1
grep -q "^note: this mpirun" "$tmp/p.log" && { cat "$tmp/p.log"; fail "a note with the variable set"; }
echo "ok: train --np 2 needs no sourced environment; a plain mpirun names what it lacks once"
