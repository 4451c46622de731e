"""A whole node lost from an adopted job on torch.distributed, two nodes in network namespaces:
the time from the kill to the resumed step on the survivors (results:
bench/results/netns-lost-node.md, rewritten whole; DT_RESULTS=0 prints only).

    flock /tmp/dt-bench.lock env PYTHONPATH=build/python python3 bench/lost_node_bench.py [RUNS] [--large]

Root, iproute2: sets up the two-node rehearsal (scripts/netns-up.sh 8 2, under its lock) and
runs tests/python/lost_job.py with LOST_BENCH=1 on 2 nodes x 2 processes (netns_lost_node.run:
`dynatrain launch --nnodes 2` in each namespace, --keep-going), layout tp=2,dp=2,zero=0; once
both nodes printed step 2's loss, every process of node 1 (its launcher too) is SIGKILLed. Rank 0
prints `resumed at T` when optimizer.step() returns recovered. Per run: kill -> resumed, the
recovery's pause and parts, and, measured in the same run over the survivors' group, the bare
exchange of the bytes the slowest survivor received (the rebuilt bytes at the link they
crossed: the survivors are both on node 0). --large: once more with the model of
bench/c10d_recovery.py. Then, for comparison, twice the process of rank 3 alone (tp=1,dp=4,zero=0:
it SIGKILLs itself before step 3 and rank 2, on its node, reports it gone)."""
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO / "tests" / "python"))
sys.path.append(str(REPO / "bench"))
import netns_lost_node  # noqa: E402
from c10d_recovery import LARGE  # noqa: E402

CLI = os.environ.get("DYNATRAIN_CLI", str(REPO / "build" / "dynatrain"))
RESULTS = REPO / "bench" / "results" / "netns-lost-node.md"
LAYOUT = "tp=2,dp=2,zero=0"  # node 1 lost: the survivors hold a whole replica
ONE = "tp=1,dp=4,zero=0"  # rank 3 lost: rank 2 on its node reports it


def one(port, dims, layout, whole):
    """One run: node 1 lost whole (`whole`), or the process of rank 3 alone (it SIGKILLs itself
    before step 3, its node-mate reports it)."""
    paths = os.pathsep.join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    env = dict(os.environ, LOST_BENCH="1", LOST_DIMS=json.dumps(dims or {}), PYTHONPATH=paths)  # the jobs run elsewhere
    results, killed_at = netns_lost_node.run(CLI, layout, port, kill=1 if whole else None,
                                             self_kill="99 99" if whole else "3 3", env=env, timeout=600)
    out = results[0][1]
    if not whole:
        killed_at = float(re.search(r"kill at (\S+)", results[1][1]).group(1))
    if results[0][0] != 0 or killed_at is None or "resumed at" not in out:
        raise SystemExit(f"run failed: {results}")
    resumed = float(re.search(r"resumed at (\S+)", out).group(1))
    bench = dict(zip(*[iter(re.search(r"bench (.*)", out).group(1).split())] * 2))
    into = re.search(r"recovery: lost .* of 4; (\S+) on", out).group(1)
    return resumed - killed_at, {k: float(v) for k, v in bench.items()}, into


def table(runs, large):
    rows = []
    cases = [("node 1", "demo", None, LAYOUT)] * runs + ([("node 1", "large", LARGE, LAYOUT)] if large else []) + \
        [("rank 3", "demo", None, ONE)] * 2
    for i, (lost, name, dims, layout) in enumerate(cases):
        total, b, into = one(29621 + i, dims, layout, lost == "node 1")
        bound = b["groups"] + b["bare"]
        rows.append(f"| {lost} | {name} | {layout} -> {into} | {int(b['state'])} | {total:.3f} | {b['pause']:.3f} | "
                    f"{b['agree']:.3f} | {b['groups']:.3f} | {b['engine']:.3f} | {int(b['received'])} | "
                    f"{b['bare']:.4f} | {bound:.3f} | {b['pause'] / bound:.1f}x | {total / bound:.1f}x |")
        print(rows[-1], flush=True)
    return rows


def nodes_up(state):
    """The rehearsal's two nodes (its lock held by this process until it exits)."""
    lock = open("/tmp/dt-netns.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.environ["DTC_STATE"] = state  # netns-launch.sh reads the hostfile there
    env = dict(os.environ)
    probe = subprocess.run(["bash", "-c", f"source {REPO}/scripts/netns-env.sh && dtc_can_make_nodes"], env=env)
    if probe.returncode != 0:
        raise SystemExit("lost_node_bench: cannot create network namespaces here (root and iproute2 needed)")
    subprocess.run([str(REPO / "scripts" / "netns-up.sh"), "8", "2"], env=env, check=True, stdout=subprocess.DEVNULL)
    return lock, env


def write(rows, load, runs, large):
    head = ("| lost | model | layout | state bytes / process | kill -> resumed s | pause s | agree s | groups s | move s | "
            "received bytes | bare exchange s | bound s | pause / bound | resumed / bound |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    text = f"""# A whole node lost on torch.distributed (two nodes in network namespaces)

An adopted GPT on torch.distributed (Gloo) on 2 nodes x 2 processes, started by `dynatrain launch
--nnodes 2 --node-rank R --keep-going --np 2` in each of the two rehearsal namespaces
(scripts/netns-launch.sh; veth between them shaped to 8 gbit/s). Once both nodes printed step
2's loss, every process of node 1, its launcher too, is SIGKILLed: the whole node. The two survivors
(node 0) recover in place (python/dynatrain/_recover.py) and do the interrupted step again; the
test `python_netns_lost_node` checks every step once, each loss within 1e-5 of plain torch, the
survivors' pids, and the line naming the node.

```
flock /tmp/dt-bench.lock env PYTHONPATH=build/python python3 bench/lost_node_bench.py {runs}{' --large' if large else ''}
```

Machine: {os.cpu_count()} cores, {mem_gib:.0f} GiB; load average {load[0]:.1f} at the start, {load[1]:.1f} at the end
(the benchmark's own processes count in it, and whatever else ran); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.

{head}{chr(10).join(rows)}

Columns as in [c10d-recovery.md](c10d-recovery.md): *kill -> resumed*: from the kill (this
script's wall clock, just before the first SIGKILL) to rank 0's `optimizer.step()` returning
recovered; *pause*: the recovery from the caught error (slowest survivor); *agree*: its part until
the survivors agreed through the store; *groups*: the survivors' Gloo group; *move*: the planned
switch; *received bytes*: the most a survivor received in it; *bare exchange*: those bytes sent
around a ring over the survivors' group in the same run (*node 1* rows: both survivors are on
node 0, the rebuilt bytes would cross node 0's own link, not the veth; *rank 3* rows: the ring
crosses the veth); *bound*: groups + bare exchange.

How to read it: when a whole node is lost no survivor is on it to see its processes' pids gone,
so the decision (rank 0, the store's host) waits `SETTLE_S` = 1 s after the last arrival for
them (a survivor still in the step's compute could yet arrive): that wait is nearly all of
*agree* and of the pause in the *node 1* rows, and the ratio to the bound is that second. When
one process of a node is lost (*rank 3* rows), its node-mate reports it gone through the store
and the decision does not wait. No byte is rebuilt in either case (every survivor holds a dp
replica), so the bound is the group build. The rest of kill -> resumed is the interrupted step's
compute before the survivors meet the error (large: 0.74 GB of state a process, 4 processes on 2
loaded cores). The next step to the bound for a whole node: learn that its processes ended
without the settle wait (the node's launcher is gone too; a heartbeat per node in the store, or
Gloo's connection errors naming the peers, would tell).
"""
    if os.environ.get("DT_RESULTS", "1") != "0":
        RESULTS.write_text(text)
    print(text)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 3
    large = "--large" in sys.argv
    with tempfile.TemporaryDirectory() as state:
        lock, env = nodes_up(state)
        try:
            start = os.getloadavg()[0]
            rows = table(runs, large)
            load = (start, os.getloadavg()[0])
        finally:
            subprocess.run([str(REPO / "scripts" / "netns-down.sh")], env=env, stdout=subprocess.DEVNULL)
            lock.close()
    write(rows, load, runs, large)


if __name__ == "__main__":
    main()
