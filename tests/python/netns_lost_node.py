"""A whole node lost from an adopted job on torch.distributed, across the two rehearsal nodes
(network namespaces, scripts/netns-up.sh first; netns_lost_node_test.sh sets them up):

    netns_lost_node.py DYNATRAIN

Each case starts lost_job.py on 2 nodes x 2 processes (scripts/netns-launch.sh R: `dynatrain
launch --nnodes 2 --node-rank R --np 2 --keep-going`, hostnames dtc-node0 / dtc-node1):
  a. tp=1,dp=4: the process of rank 3 (node 1) SIGKILLs itself before step 3, mid-step for the
     others;
  b. tp=2,dp=2: every process of node 1, its launcher too, SIGKILLed from here once both nodes
     printed step 2's loss: the whole node;
  c. tp=1,dp=4: the same to node 0, which hosts the store: node 1's survivors end with one line
     naming the cause (no hang, no traceback).
a and b check every step done once, each loss within 1e-5 of plain torch's, the survivors' pids
unchanged and the recovery's line naming the lost node. run() is also the figure's
(bench/netns_lost_node.py)."""
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCH = HERE.parent.parent / "scripts" / "netns-launch.sh"
sys.path.append(str(HERE))
import notice_job  # noqa: E402

LOCAL_LOSS = re.compile(r"loss step (\d+) rank (\d+) of (\d+) value (\S+) pid (\d+) config (\S+)")
START = re.compile(r"start pid (\d+)")
END = re.compile(r"end pid (\d+) gone \[([\d, ]*)\]")


class Node:
    """One node's `dynatrain launch`, its output read as it comes."""

    def __init__(self, rank, dt, port, args, env):
        self.rank = rank
        cmd = [str(LAUNCH), str(rank), dt, "--np", "2", "--master-port", str(port), "--keep-going", "--",
               sys.executable, str(HERE / "lost_job.py"), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=HERE)
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=lambda s=s, into=into: into.extend(iter(s.readline, "")))
                        for s, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self.readers:
            t.start()

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_node(self.rank)  # a hang: the failure is reported below, nothing left running
            rc = self.proc.wait()
        for t in self.readers:
            t.join()
        return rc, "".join(self.out), "".join(self.err)


def kill_node(node):
    """SIGKILL to every process in the namespace of `node` (its launcher too): the node is gone."""
    pids = subprocess.run(["ip", "netns", "pids", f"dtc-node{node}"], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def run(dt, layout, port, kill=None, self_kill="99 99", env=None, timeout=90):
    """lost_job.py LAYOUT on both nodes; with `kill` (a node), that node is killed once both
    nodes printed step 2's loss (a line the killed node still owed would be missing). Returns [(rc, out, err) of node 0, of node 1], the kill's wall clock."""
    env = dict(env or os.environ, OMP_NUM_THREADS="1")
    nodes = [Node(r, dt, port, [layout, *self_kill.split()], env) for r in (0, 1)]
    killed_at = None
    deadline = time.monotonic() + timeout
    while kill is not None and killed_at is None and time.monotonic() < deadline and nodes[0].proc.poll() is None:
        if all(any(line.startswith("loss step 2 ") for line in list(n.out)) for n in nodes):
            killed_at = time.time()
            kill_node(kill)
        time.sleep(0.002)
    return [n.wait(max(1.0, deadline - time.monotonic())) for n in nodes], killed_at


def check_recovered(results, layout, lost_text):
    """Every step once (one line per dp rank), its loss within 1e-5 of plain torch's, the
    survivors' pids unchanged, one recovery line naming `lost_text` (a regex)."""
    out = results[0][1] + results[1][1]
    assert results[0][0] == 0, results
    steps = {}
    for step, dp_rank, of, value, pid, _ in LOCAL_LOSS.findall(out):
        steps.setdefault(int(step), []).append((int(dp_rank), int(of), float(value), int(pid)))
    reference = notice_job.plain_losses()
    assert sorted(steps) == list(range(notice_job.STEPS)), out
    for step, lines in steps.items():
        dp = lines[0][1]
        assert sorted(r for r, *_ in lines) == list(range(dp)) and {of for _, of, *_ in lines} == {dp}, (step, out)
        mean = sum(v for _, _, v, _ in lines) / dp
        assert abs(mean - reference[step]) <= 1e-5, (step, mean, reference[step])
    starts = [int(p) for p in START.findall(out)]
    ends = {int(p): g for p, g in END.findall(out)}
    killed = set(starts) - set(ends)
    assert len(starts) == 4 and len(ends) == 4 - len(killed) and killed, out
    for gone in ends.values():  # the survivors kept their pids; only the killed processes are gone
        assert [int(g) for g in gone.split(",") if g.strip()] == sorted(killed), out
    line = re.search(rf"^recovery: lost {lost_text} of 4; \S+ on {4 - len(killed)} processes after a \S+ s pause; "
                     r"step \d+ again$", out, re.M)
    assert line, out
    assert out.count("recovery:") == 1 and "Traceback" not in results[0][2], out + results[0][2]
    print(line.group(0))


def main(dt):
    t0 = time.monotonic()
    results, _ = run(dt, "tp=1,dp=4,zero=0", 29611, self_kill="3 3")
    check_recovered(results, "tp=1,dp=4,zero=0", r"rank 3 \(global 3\) on node dtc-node1")
    assert "launch: rank 3 (pid" in results[1][2] and "on node dtc-node1 ended by SIGKILL" in results[1][2], results
    print(f"ok: a. rank 3 of node 1 lost, recovered in place ({time.monotonic() - t0:.1f} s)", flush=True)
    t0 = time.monotonic()
    results, _ = run(dt, "tp=2,dp=2,zero=0", 29612, kill=1)
    check_recovered(results, "tp=2,dp=2,zero=0",
                    r"rank 2 \(global 2\), rank 3 \(global 3\) on node dtc-node1 \(the whole node\)")
    print(f"ok: b. node 1 lost (its 2 processes and launcher), recovered in place ({time.monotonic() - t0:.1f} s)",
          flush=True)
    t0 = time.monotonic()
    results, _ = run(dt, "tp=1,dp=4,zero=0", 29613, kill=0)
    rc, out, err = results[1]
    lines = [line for line in err.splitlines() if line.startswith("dynatrain:")]
    assert rc == 1 and len(lines) == 1, (rc, out, err)
    assert re.fullmatch(r"dynatrain: error: the survivors on node dtc-node1 could not agree through the store "
                        r"\(.*\): it lives in the process of torch.distributed global rank 0 on node dtc-node0, "
                        r"whose loss cannot be recovered; resume from a checkpoint", lines[0]), lines
    assert "Traceback" not in err and "recovery:" not in out, out + err
    print(lines[0])
    print(f"ok: c. node 0 (the store's) lost, node 1 ended with one line ({time.monotonic() - t0:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1])
