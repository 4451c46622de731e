"""Redundancy 2 on torch.distributed: what the copy on the other node costs per step and what a
lost node's recovery from it takes (results: bench/results/redundancy-python.md).

    PYTHONPATH=build/python python3 bench/copy_bench.py [--dims JSON] [--steps N] [--runs R]

Runs tests/python/lost_job.py under `dynatrain launch --keep-going --np 4`, DYNATRAIN_NODE
faking two nodes of two (LOST_NODES=2), layout tp=1,dp=4,zero=1, three times:
  off      DYNATRAIN_REDUNDANCY=1, nobody killed: the step time without the copy
  on       DYNATRAIN_REDUNDANCY=2, nobody killed: the step time with the copy refreshed after
           every step, the copy's bytes and the refresh's own seconds (rank 0's last)
  lost     DYNATRAIN_REDUNDANCY=2, both processes of node 1 SIGKILL themselves after the backward
           of step 3: the recovery's pause and its parts, the bytes the slowest survivor received,
           and, measured in the same run over the survivors' group, the bare exchange of those
           bytes; the bound is the survivors' group build + that exchange (c10d_recovery.py's)
Step time: the median of rank 0's intervals between counted steps, the first two left out.
With --runs R the off / on pair runs R times, alternating, one row each (the machine's noise
between runs is as large as the copy's cost on a loaded machine).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(REPO, "tests", "python", "lost_job.py")
CLI = os.environ.get("DYNATRAIN_CLI", os.path.join(REPO, "build", "dynatrain"))
# ~32 M parameters: 0.51 GB of state in the job (param, grad, exp_avg, exp_avg_sq in fp32, once)
DIMS = dict(vocab=8000, hidden=512, heads=8, ffn=2048, layers=8, seq=16)
LAYOUT = "tp=1,dp=4,zero=1"


def run(dims, redundancy, kill, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1", LOST_BENCH="1", LOST_DIMS=json.dumps(dims), LOST_NODES="2",
               LOST_WHEN="backward", DYNATRAIN_REDUNDANCY=str(redundancy), LOST_STEPS=str(steps))
    cmd = [CLI, "launch", "--keep-going", "--port", "0", "--np", "4", "--", sys.executable, JOB, LAYOUT, "3",
           "2,3" if kill else "9"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    out = done.stdout
    setup = re.search(r"setup state (\d+) (\{.*\})", out)
    ends = [(int(s), float(t)) for s, t in re.findall(r"(\d+):(\S+)", re.search(r"^steps (.*)$", out, re.M).group(1))]
    gaps = [b[1] - a[1] for a, b in zip(ends, ends[1:]) if b[0] == a[0] + 1 and a[0] >= 1]
    after = [b[1] - a[1] for a, b in zip(ends, ends[1:]) if b[0] == a[0] + 1 and a[0] >= 4]
    result = dict(state=int(setup.group(1)), stats=json.loads(setup.group(2)), step_s=statistics.median(gaps),
                  after_s=statistics.median(after) if after else 0.0)
    bench = re.search(r"^bench (.*)$", out, re.M)
    if bench:
        result.update({k: float(v) for k, v in zip(*[iter(bench.group(1).split())] * 2)})
        result["resumed"] = float(re.search(r"resumed at (\S+)", out).group(1)) - \
            float(re.search(r"kill at (\S+)", out).group(1))
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", default=json.dumps(DIMS))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--runs", type=int, default=1)
    a = parser.parse_args()
    dims = json.loads(a.dims)
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {LAYOUT}, dims {dims}")
    print("| state bytes / process | copy bytes / process | step s, no copy | step s, copy | added s (x) | "
          "refresh s | refresh GB/s |")
    print("|---|---|---|---|---|---|---|", flush=True)
    for _ in range(a.runs):
        off = run(dims, 1, False, a.steps)
        on = run(dims, 2, False, a.steps)
        copy = on["stats"]
        added = on["step_s"] - off["step_s"]
        print(f"| {off['state']} | {copy['copy_bytes']} | {off['step_s']:.3f} | {on['step_s']:.3f} | {added:+.3f} "
              f"({on['step_s'] / off['step_s']:.2f}x) | {copy['refresh_seconds']:.3f} | "
              f"{copy['copy_bytes'] / max(copy['refresh_seconds'], 1e-9) / 1e9:.2f} |", flush=True)
    lost = run(dims, 2, True, a.steps)
    bound = lost["groups"] + lost["bare"]
    print()
    print("| copies used | kill -> resumed s | pause s | agree s | groups s | move s | received bytes | "
          "bare exchange s | link GB/s | bound s | pause / bound | step s after (dp=2) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {int(lost['copies'])} | {lost['resumed']:.3f} | {lost['pause']:.3f} | {lost['agree']:.3f} | "
          f"{lost['groups']:.3f} | {lost['engine']:.3f} | {int(lost['received'])} | {lost['bare']:.4f} | "
          f"{lost['received'] / max(lost['bare'], 1e-9) / 1e9:.2f} | "
          f"{bound:.3f} | {lost['pause'] / bound:.1f}x | {lost['after_s']:.3f} |")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
