"""Refusals of redundancy 2 (test_redundancy.py), under `dynatrain launch --np 2` on one node:
each a ValueError on every process naming the value and what is valid; nothing is held."""
import os

import torch.distributed as dist

import dynatrain


def refused(what, make, expect):
    try:
        make()
    except ValueError as e:
        assert expect in str(e), (what, str(e))
        print(f"refused {what}: {e}", flush=True)
        return
    raise AssertionError(f"{what} was accepted")


def main():
    dist.init_process_group("gloo")
    os.environ.pop("DYNATRAIN_NODE", None)

    def manager(**kwargs):
        return dynatrain.Manager(None, "tiny-dense", "dp=2", **kwargs)
    refused("one node", lambda: manager(redundancy=2), "redundancy=2 needs processes on at least two nodes; all 2 "
            "processes run on node")
    refused("redundancy=3", lambda: manager(redundancy=3), "redundancy 3: valid are 1 (no copy) and 2")
    refused("redundancy=True", lambda: manager(redundancy=True), "redundancy True: valid are 1")
    os.environ["DYNATRAIN_REDUNDANCY"] = "two"
    refused("DYNATRAIN_REDUNDANCY=two", manager, "redundancy 'two' (DYNATRAIN_REDUNDANCY): valid are 1")
    os.environ["DYNATRAIN_REDUNDANCY"] = "1"
    m = manager()
    assert m.redundancy_stats() == {"redundancy": 1, "copy_bytes": 0}, m.redundancy_stats()
    print("refusals ok", flush=True)


if __name__ == "__main__":
    main()
