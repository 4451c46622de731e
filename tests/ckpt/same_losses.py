#!/usr/bin/env python3
"""Checks that a resumed run's per-step losses equal a continuous run's.

Usage: same_losses.py CONTINUOUS_CSV RESUMED_CSV FIRST_STEP STEPS REL_TOL [LABEL]
The resumed CSV must hold exactly steps FIRST_STEP .. STEPS-1, each within REL_TOL (relative)
of the continuous run's loss at that step (CSVs of `dynatrain train --csv`).
"""
import csv
import sys

cont_csv, res_csv, first, steps, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
label = sys.argv[6] if len(sys.argv) > 6 else "resumed"
cont = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(cont_csv))}
res = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(res_csv))}
if sorted(res) != list(range(first, steps)):
    sys.exit(f"resumed steps {sorted(res)}")
for s, loss in res.items():
    rel = abs(loss - cont[s]) / cont[s]
    if rel >= tol:
        sys.exit(f"step {s}: resumed loss {loss} vs continuous {cont[s]} (rel {rel:.2e}, tolerance {tol:.0e})")
print(f"{label} losses equal the continuous run's:", {s: round(l, 5) for s, l in res.items()})
