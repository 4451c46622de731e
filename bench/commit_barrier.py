"""The per-step commit barrier of an adopted job on torch.distributed: its cost in the step
(results: bench/results/c10d-recovery.md, "The commit barrier").

    PYTHONPATH=build/python python3 bench/commit_barrier.py [RUNS] [STEPS]

optimizer.step() of a job that recovers a lost process in place ends its collectives with a
barrier over every process (_recover.commit), so that a step is applied by every survivor or
by none. For 2 and 4 processes (`dynatrain launch --keep-going`, layout dp=N, zero=0, the tests'
demo GPT, global batch 12) this runs the same STEPS steps with the barrier and without it (this
script replaces _recover.commit in its own processes: no setting of the package), RUNS times
each, alternating, and prints per run the mean step time (slowest process) and, with the
barrier, the barrier's own mean time per step. Started by the launcher (RANK set) it is the job.
"""
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("DYNATRAIN_CLI", os.path.join(REPO, "build", "dynatrain"))
WARMUP = 5


def job(mode, steps):
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    import torch
    import torch.distributed as dist
    from notice_job import DIMS, GLOBAL_BATCH, PLAN, batch, loss_of, model_and_optimizer
    dist.init_process_group("gloo")
    import dynatrain
    from dynatrain import _recover
    spent, commit = [], _recover.commit

    def timed(m):
        t0 = time.perf_counter()
        commit(m)
        spent.append(time.perf_counter() - t0)
    _recover.commit = timed if mode == "with" else (lambda m: None)
    model, optimizer = model_and_optimizer()
    n = dist.get_world_size()
    job = dynatrain.adopt(model, optimizer, PLAN, f"tp=1,dp={n},zero=0", pipeline="blocks", vocab_divisible_by=8)
    t0 = 0.0
    while job.step < WARMUP + steps:
        if job.step == WARMUP:
            spent.clear()
            job.manager.comm.Barrier()
            t0 = time.perf_counter()
        optimizer.zero_grad()
        loss_of(model, job.local_batch(batch(job.step, GLOBAL_BATCH, DIMS["vocab"], DIMS["seq"]))).backward()
        optimizer.step()
    step = torch.tensor([(time.perf_counter() - t0) / steps, sum(spent) / steps])
    dist.all_reduce(step, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(f"bench step {step[0]:.6f} commit {step[1]:.6f}", flush=True)


def run(np, mode, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [CLI, "launch", "--keep-going", "--port", "0", "--np", str(np), "--", sys.executable,
           os.path.abspath(__file__), mode, str(steps)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    line = [x for x in done.stdout.splitlines() if x.startswith("bench ")]
    if done.returncode != 0 or not line:
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    _, _, step, _, commit = line[0].split()
    return float(step), float(commit)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {steps} steps a run")
    print("| processes | run | step ms with | step ms without | barrier ms / step |")
    print("|---|---|---|---|---|")
    for np in (2, 4):
        with_, without = [], []
        for r in range(runs):
            step, commit = run(np, "with", steps)
            bare, _ = run(np, "without", steps)
            with_.append(step)
            without.append(bare)
            print(f"| {np} | {r + 1} | {step * 1e3:.2f} | {bare * 1e3:.2f} | {commit * 1e3:.2f} |", flush=True)
        print(f"| {np} | median | {statistics.median(with_) * 1e3:.2f} | {statistics.median(without) * 1e3:.2f} | |")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    if "RANK" in os.environ:
        job(sys.argv[1], int(sys.argv[2]))
    else:
        main()
