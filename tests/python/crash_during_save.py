"""Helper of test_checkpoint.py (run under mpirun -np 2): saves step 1 of an oracle-filled
manager into DIR, then dies during the save of step 2 at WHERE: `write` (the last rank exits
right after writing its rank file) or `commit` (rank 0 exits where it would write the index and
switch `latest`, every rank file written). The process exits with code 9 without finalizing."""
import os
import sys

from mpi4py import MPI

import dynatrain
from conftest import fill_oracle
from dynatrain import _native

directory, where = sys.argv[1], sys.argv[2]
world = MPI.COMM_WORLD
m = dynatrain.Manager(world, "tiny-dense", "tp=2", bucket_elems=5000)
fill_oracle(m)
m.step = 1
m.save(directory)
name, dying_rank = {"write": ("ckpt_write_rank", world.size - 1), "commit": ("ckpt_commit", 0)}[where]
real = getattr(_native, name)


def dying(*args):
    if world.rank != dying_rank:
        return real(*args)
    if where == "write":
        real(*args)
    os._exit(9)


setattr(_native, name, dying)
m.step = 2
m.save(directory)
