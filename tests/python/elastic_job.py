"""A training loop whose process count changes, run the way a user runs one:

    mpirun -np 2 python3 tests/python/elastic_job.py --schedule "tp=2;tp=2,dp=2;pp=2"

Layout i of the schedule is switched to at step i (`CFG@R1,R2` vacates world ranks R1, R2).
Processes a grow starts run this script from the top: their Manager joins and the loop goes on
from the step it carries. Processes a shrink or vacate ends leave through dynatrain.Leaving.
After every switch each process of the job checks every state element it holds against the
oracle and the carried extras, and prints one `check` line (tests/python/test_elastic.py
reads them). `--refusals` instead tries switches that must be refused on every rank (on 2 processes).
"""
import argparse
import os
import sys

from mpi4py import MPI

import dynatrain
from conftest import fill_oracle, oracle_mismatches


def say(line):
    """One line in one write, so that mpirun never interleaves two processes' lines."""
    sys.stdout.flush()
    os.write(1, (line + "\n").encode())


def parse_schedule(text):
    out = []
    for item in text.split(";"):
        cfg, _, vacate = item.partition("@")
        out.append((cfg, [int(r) for r in vacate.split(",")] if vacate else None))
    return out


class Extras:
    """A job-wide value (rank 0's reaches everybody) and a per-rank one (every rank's value, by
    its rank before the switch), set before each switch and checked after it."""

    def __init__(self, m):
        self.position, self.seeds = None, None
        m.register("position", lambda: self.position, lambda v: setattr(self, "position", v))
        m.register("seed", lambda: self.seed, lambda v: setattr(self, "seeds", v), per_rank=True)

    def before(self, m, step):
        self.position = 1000 + step if m.comm.rank == 0 else -1
        self.seed = (m.comm.rank, step)

    def ok(self, step, world_before):
        return self.position == 1000 + step and self.seeds == [(r, step) for r in range(world_before)]


def handed_out(m):
    """A tensor this process holds from before a switch (None where it holds no param)."""
    return next(iter(m.tensors("param").values()), None)


def stale(old) -> bool:
    """Whether a tensor from before the switch raises StaleTensorError on use, as it must."""
    if old is None:
        return True
    try:
        old.sum()
    except dynatrain.StaleTensorError:
        return True
    return False


def check(m, extras, stats, old=None):
    bad = oracle_mismatches(m)
    extras_ok = extras.ok(m.step, stats.get("world_before", m.comm.size))
    say(f"check step {m.step} config {m.config['config']} rank {m.comm.rank} of {m.comm.size} pid {os.getpid()} "
        f"joined {m.joined} mismatches {len(bad)} extras {extras_ok} stale {stale(old)} "
        f"spawn_s {stats.get('spawn_seconds', 0):.3f} pause_s {stats['pause_seconds']:.3f}")


def run(schedule, model, ahead):
    m = dynatrain.Manager(MPI.COMM_WORLD, model, schedule[0][0], bucket_elems=5000)
    if not m.joined:
        fill_oracle(m)  # a joined manager holds the job's values already
    extras = Extras(m)  # in a joined process, register() delivers the carried values
    if m.joined:
        check(m, extras, m.join_stats)
    while m.step + 1 < len(schedule):
        step = m.step + 1
        cfg, vacate = schedule[step]
        extras.before(m, step)
        say(f"before step {step} rank {m.comm.rank} pid {os.getpid()}")
        m.step = step  # carried: processes this switch starts go on from here
        if ahead:  # start the processes, then go on training (collectives on m.comm) meanwhile
            m.prepare(cfg, vacate=vacate)
            for _ in range(3):
                m.comm.allreduce(m.comm.rank)
        old = handed_out(m)
        try:
            stats = m.switch(cfg, vacate=vacate)
        except dynatrain.Leaving:
            say(f"leaving step {step} pid {os.getpid()} stale {stale(old)}")
            raise
        check(m, extras, stats, old)
    say(f"done rank {m.comm.rank} pid {os.getpid()}")


def refusals(attempts, model):
    """Each attempt must raise ValueError on every rank and move nothing; the job then goes on.
    Besides `attempts`: a vacate list of non-ints and a config the model cannot take."""
    world = MPI.COMM_WORLD
    m = dynatrain.Manager(world, model, "dp=2", bucket_elems=5000)
    fill_oracle(m)
    for cfg, vacate in attempts + [("dp=2", ["1"]), ("tp=3,dp=2", None)]:
        try:
            m.switch(cfg, vacate=vacate)
            say(f"refusal {cfg}@{vacate} rank {world.rank}: NOT REFUSED")
        except ValueError as e:
            say(f"refusal {cfg}@{vacate} rank {world.rank}: {e}")
        say(f"intact {cfg}@{vacate} rank {world.rank} mismatches {len(oracle_mismatches(m))} "
            f"world {m.comm.size}")
    if os.environ.get("DT_EDM_EXECUTABLE"):  # a grow prepared ahead is refused by its switch
        m.prepare("dp=4")
        try:
            m.switch("dp=4")
            say(f"refusal prepared dp=4 rank {world.rank}: NOT REFUSED")
        except ValueError as e:
            say(f"refusal prepared dp=4 rank {world.rank}: {e}")
        say(f"intact prepared dp=4 rank {world.rank} mismatches {len(oracle_mismatches(m))} world {m.comm.size}")
    stats = m.switch("tp=2")  # the job still switches
    say(f"after refusals rank {world.rank} mismatches {len(oracle_mismatches(m))} bytes {stats['bytes_sent']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--schedule", default="tp=2;tp=2,dp=2;pp=2")
    ap.add_argument("--model", default="tiny-dense")
    ap.add_argument("--ahead", action="store_true", help="prepare each switch before its step's work")
    ap.add_argument("--refusals", help="switches that must be refused, in --schedule's form")
    a = ap.parse_args()
    if a.refusals:
        refusals(parse_schedule(a.refusals), a.model)
    else:
        run(parse_schedule(a.schedule), a.model, a.ahead)


if __name__ == "__main__":
    sys.exit(main())
