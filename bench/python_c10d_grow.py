"""An adopted job's grow on torch.distributed (processes joining by the job's store, prepared ahead)
against the same switch between processes already in the job: same script, same run.

    PYENV_VERSION=system python3 bench/python_c10d_grow.py [--hidden 1024 --blocks 2 --rounds 3]

The driver starts the worker (this file with --worker) under `dynatrain launch --np 2`; it calls
torch.distributed.init_process_group("gloo") and adopts column/row-parallel MLP blocks with
torch.optim.AdamW (fp32: 16 bytes a parameter) in dp=2. Each round:
  1. job.manager.prepare("dp=4"): world rank 0 starts two processes of this command line, which
     join by the store; the job trains until every process's preparation is done (no step waits);
  2. job.switch("dp=4"), timed (slowest process, from a barrier of the two to the end on all four):
     the grow's pause, and how much of the joiners' start-up the training steps hid;
  3. the reference, with the four processes present: job.switch("dp=2", keep_processes=True)
     (ranks 2 and 3 idle), then job.switch("dp=4") timed the same way: the same state moves to
     processes already in the job;
  4. job.switch("dp=2"): the joined processes leave.
Prints the medians and their ratio (target <= 1.5x) and writes bench/results/python_c10d_grow.md
(--out) with the command, the machine, its load and the date.
"""
import argparse
import datetime
import json
import os
import pathlib
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from python_c10d_bench import machine  # noqa: E402


def worker(a) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    dist.init_process_group("gloo")
    import dynatrain
    from dynatrain import _c10d
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(a.hidden, 4 * a.hidden), nn.GELU(),
                                          nn.Linear(4 * a.hidden, a.hidden)) for _ in range(a.blocks)])
    optimizer = torch.optim.AdamW(model.parameters())
    job = dynatrain.adopt(model, optimizer, {"*.0": "column", "*.2": "row"}, "dp=2", bucket_elems=4_000_000)
    m = job.manager
    x = torch.randn(8, a.hidden)

    def train() -> None:
        if job.active:  # ranks 2 and 3 idle in the reference's dp=2 take part in the step only
            model(job.local_batch(x)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    def timed(cfg, **kw):
        m.comm.Barrier()
        t0 = time.perf_counter()
        stats = job.switch(cfg, **kw)
        return _c10d.all_max(m.comm, time.perf_counter() - t0), stats

    def four(out) -> None:
        """Steps 2-4 on all four processes (a joined one starts here)."""
        train()
        job.switch("dp=2", keep_processes=True)
        train()
        seconds, stats = timed("dp=4")
        out["reference"].append(seconds)
        out["reference_native"].append(stats["seconds"])
        train()
        job.switch("dp=2")  # Leaving in the joined processes

    out = {"grow": [], "reference": [], "hidden": [], "startup": [], "wait": [], "steps": [], "sent": [],
           "grow_native": [], "reference_native": []}
    if m.joined:
        _c10d.all_max(m.comm, 0.0)  # the grow's timing, which the job's processes end with
        four(out)
        return
    for _ in range(a.rounds):
        m.prepare("dp=4")
        steps = 0
        while not all(m.comm.allgather(m._grow.ready_at is not None)) and steps < a.max_steps:
            train()
            steps += 1
        seconds, stats = timed("dp=4")
        out["grow"].append(seconds)
        out["grow_native"].append(stats["seconds"])
        out["startup"].append(stats["join_startup_seconds"])
        out["wait"].append(stats["join_wait_seconds"])
        out["hidden"].append(stats["join_startup_seconds"] - stats["join_wait_seconds"])
        out["steps"].append(steps)
        out["sent"].append(stats["bytes_sent"])
        four(out)
    if m.comm.rank == 0:
        out["state"] = _c10d.all_sum(m.comm, sum(b.numel() * b.element_size() for k in m._kinds for b in m.buffers(k)))
        with open(a.worker, "w") as f:
            json.dump(out, f)
    else:
        _c10d.all_sum(m.comm, sum(b.numel() * b.element_size() for k in m._kinds for b in m.buffers(k)))


def report(a, r: dict, started: str, load: str) -> str:
    grow, ref = statistics.median(r["grow"]), statistics.median(r["reference"])
    lines = ["# Python grow on torch.distributed: processes joining by the store, prepared ahead", "",
             "An adopted job (column/row-parallel MLP blocks, torch.optim.AdamW, fp32) under `dynatrain launch --np 2`",
             "after `torch.distributed.init_process_group(\"gloo\")`, grown dp=2 -> dp=4: `job.manager.prepare(\"dp=4\")`",
             "starts two processes of the same command line, which join through the job's rendezvous store while",
             "the job trains; then `job.switch(\"dp=4\")`. The reference, same run: with the four processes present,",
             "`job.switch(\"dp=2\", keep_processes=True)` then `job.switch(\"dp=4\")`, the same state moving to processes",
             "already in the job. Each pause: slowest process, from a barrier to the end of `job.switch()`.", "",
             f"- Command: `{' '.join(['PYENV_VERSION=system python3 bench/python_c10d_grow.py', a.cli]).strip()}`",
             f"- Machine: {load} (loaded: shared by other work)",
             f"- Date: {started}", "",
             "| round | state | bytes sent | steps trained while preparing | joiners' start-up | hidden behind steps | "
             "commit waited | grow pause (native part) | reference pause (native part) | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, (g, f) in enumerate(zip(r["grow"], r["reference"])):
        lines.append(f"| {i + 1} | {r['state'] / 1e6:.0f} MB | {r['sent'][i] / 1e6:.0f} MB | {r['steps'][i]} | "
                     f"{r['startup'][i]:.2f} s | {r['hidden'][i]:.2f} s | {r['wait'][i]:.3f} s | "
                     f"{g:.3f} s ({r['grow_native'][i]:.3f} s) | {f:.3f} s ({r['reference_native'][i]:.3f} s) | "
                     f"{g / f:.2f}x |")
    hidden = sum(r["hidden"]) / max(sum(r["startup"]), 1e-9)
    ratios = [g / f for g, f in zip(r["grow"], r["reference"])]
    lines += ["", f"Median grow pause {grow:.3f} s against {ref:.3f} s for the same switch between processes already "
              f"in the job: {grow / ref:.2f}x; per round {min(ratios):.2f}x - {max(ratios):.2f}x (median "
              f"{statistics.median(ratios):.2f}x; target <= 1.5x). {100 * hidden:.0f}% of the joiners' start-up "
              f"(interpreter, imports, their own init_process_group, adopt, the new world's group) was hidden "
              f"behind training steps; load average {os.getloadavg()[0]:.1f} at the end.", "",
              "How to read: the joiners' start-up runs from prepare() until the new world's group and native",
              "transport are built on every process; the commit waits only for what is not ready then (`commit",
              "waited`). What the grow's pause adds to the reference: the agreement on the outcome over the old",
              "world, the check of the joiners' command line and Manager arguments over the new one, and the",
              "joiners' first touch of the pages their state lands in.", ""]
    return "\n".join(lines)


def run(a) -> dict:
    """The worker under `dynatrain launch --np 2`: its results."""
    sizes = [x for flag in OPTIONS for x in (flag, str(getattr(a, flag[2:].replace("-", "_"))))]
    with tempfile.NamedTemporaryFile(suffix=".json") as results:
        subprocess.run([str(REPO / "build" / "dynatrain"), "launch", "--port", "0", "--np", "2", "--", sys.executable,
                        str(pathlib.Path(__file__).resolve()), "--worker", results.name, *sizes], check=True,
                       timeout=1800, env=dict(os.environ, PYTHONPATH=str(REPO / "build" / "python"),
                                              OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1")))
        return json.loads(pathlib.Path(results.name).read_text())


OPTIONS = {"--hidden": 1024, "--blocks": 2, "--rounds": 3, "--max-steps": 400}  # --max-steps: per round, preparing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    for flag, default in OPTIONS.items():
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "python_c10d_grow.md"))
    a = ap.parse_args()
    if a.worker:
        return worker(a) or 0
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), machine()  # load at the start
    a.cli = " ".join(shlex.quote(x) for x in sys.argv[1:])
    text = report(a, run(a), *when)
    pathlib.Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
