#!/usr/bin/env python3
"""The chaos run of an adopted PyTorch job (tests/python/chaos_job.py): a GPT adopted by
`dynatrain.adopt()` in tp=2,dp=2 on 4 processes, under mpirun (MPI) or `dynatrain launch`
(torch.distributed, Gloo), hit at seeded random steps by a preemption notice (SIGTERM to one
process: vacated live, the others go on) or a loss (SIGKILL of one process: the job ends, and this
driver starts it again on 4 processes from the checkpoint the job saves after every step, as a
scheduler would). A notice goes to a process that may leave: never the last one (that would be a
notice to every process) nor, on torch.distributed, the store host (global rank 0); with one
process left the event is a kill.

Checked at the end: every event injected, the last attempt exit 0, every restart trains first
the step after its checkpoint's, 0 steps lost (steps printed as done before a kill and trained
again after it: a step's line waits for its save), every step once (the lines of the attempt that
kept it; a restart prints its checkpoint's last step again, from the checkpoint), every loss within BOUND relative of plain single-process
torch on the same batches (layout changes reorder the fp32 reductions; BOUND 1e-4).
Prints one markdown table row: transport, seed, steps, events, notices, kills, notices acted on,
restarts, steps lost, the largest loss difference, wall time. Exits 1 with one "chaos: FAIL ..."
line on the first failed check.

Usage: scripts/chaos_python.py [--c10d] [--seed N] [--events N] [--steps N] [--build DIR] [--out DIR]
Environment: the test environment of tests/python/CMakeLists.txt (PYTHONPATH reaching
build/python, scripts/mpi-env.sh's Open MPI settings)."""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(os.path.join(REPO, "tests", "python"))
DONE = re.compile(r"^done step (\d+) loss (\S+) config (\S+) processes (\d+)( restored)?$")
BOUND = 1e-4


def fail(why):
    print(f"chaos: FAIL {why}", flush=True)
    sys.exit(1)


class Attempt:
    """One start of the job; its stdout read on a thread: `done` is {step: (loss, processes)}."""

    def __init__(self, args, out):
        env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                   OMPI_MCA_orte_allowed_exit_without_sync="1", OMPI_MCA_orte_execute_quiet="1")
        job = [sys.executable, os.path.join(REPO, "tests", "python", "chaos_job.py"), os.path.join(out, "ck"),
               str(args.steps), "tp=2,dp=2"]
        start = [os.path.join(args.build, "dynatrain"), "launch", "--port", "0", "--np", "4", "--"] if args.c10d \
            else [shutil.which("mpirun") or "mpirun", "-np", "4"]
        self.log = open(os.path.join(out, "job.log"), "a")
        self.proc = subprocess.Popen(start + job, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env,
                                     start_new_session=True)
        self.done, self.trained, self.restored, self.left = {}, [], -1, 0  # restored: the checkpoint's step
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            m = DONE.match(line.strip())
            if m:
                self.done[int(m.group(1))] = (float(m.group(2)), int(m.group(4)))
                if m.group(5):
                    self.restored = int(m.group(1))
                else:
                    self.trained.append(int(m.group(1)))
            self.left += line.startswith("left pid ")

    def workers(self):
        """(pid, rank) of the job's live worker processes: the launcher's children (mpirun's or launch's)."""
        out = []
        for pid in _children(self.proc.pid):
            env = _environ(pid)
            rank = env.get("OMPI_COMM_WORLD_RANK", env.get("RANK"))
            if rank is not None and "chaos_job.py" in _cmdline(pid):
                out.append((pid, int(rank)))
        return out

    def last(self):
        return max(self.done) if self.done else -1


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(kv.split("=", 1) for kv in f.read().decode(errors="replace").split("\0") if "=" in kv)
    except OSError:
        return {}


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def wait_for(cond, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def run(args):
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    rng = random.Random(args.seed)
    targets = sorted(rng.randrange(2, args.steps - 2) for _ in range(args.events))
    t0 = time.monotonic()
    kept = {}  # step -> (loss, processes), from the attempt that kept it
    notices = kills = restarts = lost = fired = 0
    acted = 0
    attempt = Attempt(args, out)
    for target in targets:
        if not wait_for(lambda: attempt.last() >= target or attempt.proc.poll() is not None, 300):
            fail(f"the job did not reach step {target} in 300 s (job.log)")
        if attempt.proc.poll() is not None:
            break
        workers = attempt.workers()
        movable = [w for w in workers if not (args.c10d and w[1] == 0)]
        kind = "notice" if rng.random() < 0.5 and len(workers) > 1 and movable else "kill"
        pid, rank = rng.choice(movable if kind == "notice" else workers)
        step = attempt.last()
        os.kill(pid, signal.SIGTERM if kind == "notice" else signal.SIGKILL)
        fired += 1
        print(f"step {step} {kind} pid {pid} rank {rank}", file=attempt.log, flush=True)
        if kind == "notice":
            notices += 1
            before = attempt.left
            if not wait_for(lambda: attempt.left > before or attempt.proc.poll() is not None, 120):
                fail(f"the notice to pid {pid} was not acted on in 120 s")
            acted += attempt.left > before
            continue
        kills += 1
        if attempt.proc.wait(timeout=120) == 0:
            fail(f"the job ended with exit 0 after the kill of pid {pid}")
        attempt.reader.join(timeout=30)
        printed = attempt.last()
        kept.update(attempt.done)
        restarts += 1
        attempt = Attempt(args, out)
        if not wait_for(lambda: attempt.trained or attempt.proc.poll() is not None, 300):
            fail("the restarted job trained no step in 300 s")
        restored = attempt.restored
        first = attempt.trained[0] if attempt.trained else args.steps  # none left to train
        if first != restored + 1 and not (first == args.steps and attempt.proc.wait() == 0):
            fail(f"restart {restarts} trained step {first} first; its checkpoint holds step {restored}")
        lost += max(0, printed - restored)  # steps printed as done, trained again (a printed step is saved)
    code = attempt.proc.wait(timeout=600)
    attempt.reader.join(timeout=30)
    kept.update(attempt.done)
    wall = time.monotonic() - t0
    import chaos_job
    reference = chaos_job.plain_losses(args.steps)
    worst = max((abs(kept[s][0] - reference[s]) / abs(reference[s]), s) for s in kept)
    transport = "torch.distributed (Gloo)" if args.c10d else "MPI"
    print(f"| {transport} | {args.seed} | {args.steps} | {fired} | {notices} | {kills} | {acted} | {restarts} | "
          f"{lost} | {worst[0]:.1e} (step {worst[1]}) | {wall:.0f} s |", flush=True)
    if code != 0:
        fail(f"the last attempt ended with exit {code} (job.log)")
    if fired != args.events:
        fail(f"only {fired} of {args.events} events were injected")
    if acted != notices:
        fail(f"{notices - acted} notices were not acted on")
    if lost:
        fail(f"{lost} steps printed as done were trained again after a restart")
    if sorted(kept) != list(range(args.steps)):
        fail(f"steps not each once: {len(kept)} kept of {args.steps}")
    if worst[0] > BOUND:
        fail(f"step {worst[1]}: loss off plain torch's by {worst[0]:.2e} relative (bound {BOUND:g})")
    print(f"chaos: ok ({out}/job.log)", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--c10d", action="store_true", help="under `dynatrain launch` (torch.distributed), not mpirun")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--events", type=int, default=12)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--out", default="/tmp/dt-chaos-python")
    run(p.parse_args())


if __name__ == "__main__":
    main()
