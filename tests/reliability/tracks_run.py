#!/usr/bin/env python3
"""Checks a `dynatrain train --csv` file against the uninterrupted run's: every step 0..STEPS-1
exactly once (none repeated or skipped), the process count (the `world` column) from the step
each change names, and every loss within fp32 reduction noise (relative 1e-4) of the
uninterrupted run's (another dp split adds in another order).

Usage: tracks_run.py UNINTERRUPTED_CSV CSV STEPS WORLD_SIZES
       WORLD_SIZES: "STEP:N,STEP:N": from STEP on the job has N processes ("0:4,10:3")
"""
import csv
import sys


def main(cont_path, path, steps, world_sizes):
    cont = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(cont_path))}
    rows = list(csv.DictReader(open(path)))
    got = [int(r["step"]) for r in rows]
    assert got == list(range(steps)), f"steps {got}"
    changes = [tuple(map(int, c.split(":"))) for c in world_sizes.split(",")]
    for r in rows:
        s = int(r["step"])
        want = [n for at, n in changes if at <= s][-1]
        assert int(r["world"]) == want, f"step {s}: {r['world']} processes, expected {want}"
        rel = abs(float(r["loss"]) - cont[s]) / cont[s]
        assert rel < 1e-4, f"step {s}: loss {r['loss']} vs uninterrupted {cont[s]} (rel {rel:.2e})"
    name = path.split("/")[-1]
    print(f"  {name}: steps 0-{steps - 1} once, processes {world_sizes}, losses track the uninterrupted run")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
