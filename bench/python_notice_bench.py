"""What preemption notices cost an adopted job at every step while none arrives: the step
boundary's agreement on notices (python/dynatrain/_notice.py, one all-gather of job/notice.h).

    source scripts/mpi-env.sh
    PYTHONPATH=build/python mpirun -np 2 python3 bench/python_notice_bench.py [--calls 2000]

Times `--calls` agreements (after 100 warm-up calls) over a Manager of every process and prints
rank 0's mean per call. The pause of a notice's vacate itself is printed by the job (`notice:
vacated; ... after a 0.054 s pause`): tests/python/notice_job.py shows it.
"""
import argparse
import time

from mpi4py import MPI

import dynatrain


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    calls = parser.parse_args().calls
    world = MPI.COMM_WORLD
    m = dynatrain.Manager(world, "tiny-dense", f"dp={world.size}")
    for _ in range(100):
        dynatrain._native.agree_on_notices(m._native, 0.0)
    world.Barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        dynatrain._native.agree_on_notices(m._native, 0.0)
    mean = (time.perf_counter() - t0) / calls
    if world.rank == 0:
        print(f"agreement on notices: {mean * 1e6:.1f} us per step boundary on {world.size} processes", flush=True)


if __name__ == "__main__":
    main()
