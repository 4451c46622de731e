"""A lost process recovered in place on torch.distributed: the time from the kill to the resumed
step on the survivors (results: bench/results/c10d-recovery.md).

    PYTHONPATH=build/python python3 bench/c10d_recovery.py [RUNS] [--large | --large-only]

Runs tests/python/lost_job.py under `dynatrain launch --keep-going --np 4`: the process of rank
2 SIGKILLs itself before step 3 (`kill at T`, wall clock; "mid-forward": 0.15 s into step 3,
which every process starts from a barrier, so that each survivor is computing that step and
none is still in the step before), the survivors recover and rank 0
prints `resumed at T stopped N met M` when optimizer.step() returns recovered (N: the survivors
whose forward the loss watch stopped, python/dynatrain/_stop.py; M: the first survivor's meeting
of the loss, on the wall clock). The "no pipe" cases run the job
without the launcher's pipe (`env -u DYNATRAIN_LAUNCH_FD`), as under torchrun: the survivors then
learn of the loss from their loss watch's look at /proc (every 20 ms). Printed per run: kill -> resumed,
the recovery's own pause and its parts (agreement through the store, the survivors' group
build, the state's move), and, measured in the same run over the survivors' group, the bare
exchange of the bytes the slowest survivor received, and, for reference, a warm copy of one
process's state. The demo model is the tests' small GPT; --large scales it until the state of
one process is about 1.4 GB (0.7 GB of Adam moments). Layout tp=1,dp=4,zero=0 -> dp=3: every
survivor holds a whole replica, so no byte crosses a link; the lower bound is the survivors'
group build + the bare exchange of the received bytes (the warm copy is not in it: the engine
keeps a survivor's buffers where the layout leaves them, "move s").
"""
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(REPO, "tests", "python", "lost_job.py")
CLI = os.environ.get("DYNATRAIN_CLI", os.path.join(REPO, "build", "dynatrain"))
LARGE = dict(vocab=8000, hidden=1024, heads=16, ffn=4096, layers=6, seq=16)  # ~88 M parameters


def run(layout, dims=None, pipe=True, when="before"):
    env = dict(os.environ, OMP_NUM_THREADS="1", LOST_BENCH="1", LOST_DIMS=json.dumps(dims or {}), LOST_WHEN=when,
               LOST_AFTER="0.15")
    cmd = [CLI, "launch", "--keep-going", "--port", "0", "--np", "4", "--",
           *([] if pipe else ["env", "-u", "DYNATRAIN_LAUNCH_FD"]), sys.executable, JOB, layout, "3", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    kill = float(re.search(r"kill at (\S+)", done.stdout).group(1))
    resumed, stopped, met = re.search(r"resumed at (\S+) stopped (\d+) met (\S+)", done.stdout).groups()
    bench = dict(zip(*[iter(re.search(r"bench (.*)", done.stdout).group(1).split())] * 2))
    return float(resumed) - kill, float(met) - kill, int(stopped), {k: float(v) for k, v in bench.items()}


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 3
    cases = [("demo", "tp=1,dp=4,zero=0", None, "before")] if "--large-only" not in sys.argv else []
    if "--large" in sys.argv or "--large-only" in sys.argv:
        cases.append(("large", "tp=1,dp=4,zero=0", LARGE, "before"))
        cases.append(("large, mid-forward", "tp=1,dp=4,zero=0", LARGE, "forward"))
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("| case | layout | state bytes / process | kill -> met s | kill -> resumed s | stopped mid-step | pause s | "
          "agree s | groups s | move s | received bytes | bare exchange s | warm copy s | bound s | pause / bound | "
          "resumed / bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, layout, dims, when in cases:
        for _ in range(runs):
            for pipe in (True, False):
                total, met, stopped, b = run(layout, dims, pipe, when)
                bound = b["groups"] + b["bare"]
                label = name if pipe else f"{name}, no pipe"
                print(f"| {label} | {layout} | {int(b['state'])} | {met:.3f} | {total:.3f} | {stopped} | {b['pause']:.3f} | "
                      f"{b['agree']:.3f} | "
                      f"{b['groups']:.3f} | {b['engine']:.3f} | {int(b['received'])} | {b['bare']:.4f} | "
                      f"{b['copy']:.4f} | {bound:.3f} | {b['pause'] / bound:.1f}x | {total / bound:.1f}x |", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
