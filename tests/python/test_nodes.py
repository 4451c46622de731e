"""Which node a process runs on, as a lost process's recovery uses it (python/dynatrain/_nodes.py):
DYNATRAIN_NODE over the hostname, the lost ranks named with their node and "(the whole node)",
this node's ended processes, and which survivor prints its node's line when the store is lost.
Pure functions over a table of (node, pid) and this machine's /proc; one process."""
import os
import socket
import subprocess
import sys

from dynatrain import _nodes


def ended_pid():
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_node_is_dynatrain_node_else_the_hostname(monkeypatch):
    monkeypatch.delenv("DYNATRAIN_NODE", raising=False)
    assert _nodes.name() == socket.gethostname()
    monkeypatch.setenv("DYNATRAIN_NODE", "fake-b")
    assert _nodes.name() == "fake-b"


def test_lost_ranks_are_named_with_their_node_and_a_whole_node_as_such():
    where = {0: ("a", 1), 1: ("a", 2), 2: ("b", 3), 3: ("b", 4)}
    ranks = [0, 1, 2, 3]
    assert _nodes.lost_text(ranks, [3], where) == "rank 3 (global 3) on node b"
    assert _nodes.lost_text(ranks, [2, 3], where) == "rank 2 (global 2), rank 3 (global 3) on node b (the whole node)"
    assert _nodes.lost_text(ranks, [1, 3], where) == "rank 1 (global 1) on node a and rank 3 (global 3) on node b"
    assert _nodes.lost_text([3, 0, 2, 1], [2], where) == "rank 2 (global 2) on node b"  # layout rank 2 is global 2
    assert _nodes.lost_text([2, 0, 3, 1], [2], where) == "rank 0 (global 2) on node b"
    assert _nodes.lost_text(ranks, [3], None) == "rank 3 (global 3)"  # no table: no nodes


def test_only_this_nodes_ended_processes_are_reported(monkeypatch):
    monkeypatch.setenv("DYNATRAIN_NODE", "here")
    dead = ended_pid()
    where = {0: ("here", os.getpid()), 1: ("here", dead), 2: ("there", dead), 3: ("there", os.getpid())}
    assert _nodes.gone_here(where) == [1]  # rank 2's pid is another node's: not looked at


def test_the_store_lost_line_comes_from_the_lowest_rank_of_the_node_but_0(monkeypatch):
    monkeypatch.setenv("DYNATRAIN_NODE", "b")
    where = {0: ("a", 1), 1: ("a", 2), 2: ("b", 3), 3: ("b", 4), 4: ("b", 5)}
    assert _nodes.reports(where, 2) and not _nodes.reports(where, 3) and not _nodes.reports(where, 4)
    monkeypatch.setenv("DYNATRAIN_NODE", "a")  # rank 0's own node: rank 1 reports, 0 never does
    assert _nodes.reports(where, 1)
