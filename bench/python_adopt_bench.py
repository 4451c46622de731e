"""The adopted example against the plain single-process run: loss agreement and lines changed.

    source scripts/mpi-env.sh   # the last schedule grows 2 -> 4 processes and shrinks back
    PYTHONPATH=build/python python3 bench/python_adopt_bench.py [--steps 25]

Runs examples/train_plain.py once (one process) and examples/torch_gpt.py under mpirun for each
schedule (every layout switch in it), and prints, per schedule, the largest relative loss
difference over the steps, then the lines `diff` reports between the two scripts. Starts its
own mpirun processes; run it from a shell, not under mpirun.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
SCHEDULES = [(2, "0:dp=2,zero=0;6:tp=2;12:dp=2;18:dp=2,zero=2"), (2, "0:tp=2;5:dp=2;10:tp=2,zero=0;15:dp=2,zero=2;20:tp=2"),
             (4, "0:tp=2,dp=2;6:dp=4,zero=2;12:tp=4,zero=0;18:tp=2,dp=2,zero=2"),
             (2, "0:dp=2,zero=0;6:tp=2;10:tp=2,dp=2;14:dp=2;18:dp=2,zero=2")]  # grows to 4, shrinks to 2


def losses(cmd):
    # The scripts run in examples/: a relative PYTHONPATH (build/python) is made absolute first.
    path = os.pathsep.join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=EXAMPLES, timeout=600,
                         env=dict(os.environ, PYTHONPATH=path))
    if run.returncode:
        sys.exit(run.stdout + run.stderr)
    return [float(x) for x in re.findall(r"^step +\d+ +loss (\S+)$", run.stdout, re.M)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=25)
    a = ap.parse_args()
    steps = ["--steps", str(a.steps)]
    plain = losses([sys.executable, "train_plain.py"] + steps)
    print(f"adopted example vs plain single-process run, {a.steps} steps, fp32, AdamW")
    print("| processes | schedule | max relative loss difference | first / last loss |")
    print("|---|---|---|---|")
    for np, schedule in SCHEDULES:
        adopted = losses([shutil.which("mpirun") or "mpirun", "-np", str(np), sys.executable, "torch_gpt.py", *steps,
                          "--schedule", schedule])
        worst = max(abs(x - y) / abs(y) for x, y in zip(adopted, plain))
        print(f"| {np} | `{schedule}` | {worst:.2e} | {adopted[0]:.4f} / {adopted[-1]:.4f} |")
    diff = subprocess.run(["diff", "train_plain.py", "torch_gpt.py"], capture_output=True, text=True,
                          cwd=EXAMPLES).stdout
    removed, added = len(re.findall(r"^<", diff, re.M)), len(re.findall(r"^>", diff, re.M))
    print(f"\nlines changed, train_plain.py -> torch_gpt.py: {removed + added} ({removed} removed, {added} added)")


if __name__ == "__main__":
    main()
