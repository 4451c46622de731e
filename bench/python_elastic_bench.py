"""Pause of a Python job's grow and shrink vs the C++ engine's switch of the same state.

    source scripts/mpi-env.sh
    PYTHONPATH=build/python mpirun -np 2 python3 bench/python_elastic_bench.py --state small|200mb [--rounds 3] [--ahead S]

2 processes hold the model in layout A (2 ranks); Manager.switch(B) grows the job to 4 (the
script runs again in the 2 new processes and joins), then, on the same 4 processes, the C++
Manager alone switches A <-> B `rounds` times (fixed world: A leaves ranks 2, 3 idle), timed in
C++ between barriers: the same bytes between the same processes over the same links, without
starting or ending processes and without Python. Last, Manager.switch(A) shrinks the job back
to 2 (ranks 2, 3 leave). Rank 0 prints one JSON line: the grow's pause (and of it, starting the
processes), the shrink's pause, the C++ medians, and the ratios. With --ahead S the grow is
prepared S seconds of steps before its switch (Manager.prepare): its pause is the commit alone.
Figures come from a shared 2-core machine: the ratios are the figure, not the seconds.
"""
import argparse
import json
import statistics
import sys
import time

from mpi4py import MPI

import dynatrain
from python_switch_bench import shared_config  # bench/, beside this script

LAYOUTS = {"small": ("tiny-dense", "tp=2", "tp=2,dp=2"),
           "200mb": (None, "tp=2", "tp=2,dp=2")}


def model_200mb() -> str:
    """A llama of ~10.5 M parameters: ~210 MB of fp32 weights, grads, master and both moments."""
    return shared_config({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
                          "num_key_value_heads": 8, "intermediate_size": 1408, "vocab_size": 4000,
                          "tie_word_embeddings": False})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--state", choices=sorted(LAYOUTS), default="small")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ahead", type=float, default=0,
                    help="Manager.prepare() the grow this many seconds of steps before its switch")
    a = ap.parse_args()
    model, small, big = LAYOUTS[a.state]
    m = dynatrain.Manager(MPI.COMM_WORLD, model or model_200mb(), small, bucket_elems=4_000_000)
    if m.joined:
        grow = m.join_stats
    else:
        for kind in m._kinds:  # every byte non-zero (no page is left untouched)
            for b in m.buffers(kind):
                b.fill_(1.0)
        if a.ahead > 0:  # prepared ahead: the processes start while "steps" run, then the commit
            m.prepare(big)
            t_end = time.perf_counter() + a.ahead
            while m.comm.allreduce(time.perf_counter() < t_end, op=MPI.LAND):
                time.sleep(0.05)
        grow = m.switch(big)
    state = m.comm.allreduce(sum(b.numel() * b.element_size() for k in m._kinds for b in m.buffers(k)))
    cpp_shrink, cpp_grow = [], []
    for _ in range(a.rounds):
        cpp_shrink.append(m._reference_switch(small))
        cpp_grow.append(m._reference_switch(big))
    rank = m.comm.rank
    shrink = m.switch(small)  # ranks 2, 3 leave here (dynatrain.Leaving)
    if rank == 0:
        g, s = statistics.median(cpp_grow), statistics.median(cpp_shrink)
        commit = grow["pause_seconds"] - (grow["spawn_seconds"] if a.ahead == 0 else 0)
        print(json.dumps({
            "state": a.state, "ahead_s": a.ahead, "state_bytes": state, "from": small, "to": big,
            "grow_pause_s": grow["pause_seconds"], "grow_spawn_s": grow["spawn_seconds"],
            "grow_without_spawn_s": commit, "grow_engine_s": grow["engine_seconds"],
            "shrink_pause_s": shrink["pause_seconds"], "shrink_engine_s": shrink["engine_seconds"],
            "cpp_grow_s": g, "cpp_shrink_s": s,
            "grow_without_spawn_over_cpp": commit / g, "shrink_over_cpp": shrink["pause_seconds"] / s}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
