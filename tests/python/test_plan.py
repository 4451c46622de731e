"""dynatrain.plan / check: the same statistics as `dynatrain plan --json`, errors as ValueError."""
import json
import subprocess

import pytest
from mpi4py import MPI

import dynatrain
from conftest import cli_path

TIMINGS = {"plan_seconds", "rank_plan_seconds", "check_seconds", "planner_peak_bytes"}
CASES = [
    ("llama2-70b", "tp=8,pp=4,dp=4", "tp=4,pp=8,dp=4", 8, "all"),
    ("tiny-moe", "dp=4,ep=2", "tp=2,dp=2,ep=4", 2, "optimizer"),
    ("gpt3-1.3b", "tp=2,pp=2,dp=2", "tp=4,dp=3,zero=0", 4, "param,grad"),
]


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="runs the CLI; once is enough")
@pytest.mark.parametrize("model,src,dst,gpn,states", CASES)
def test_plan_statistics_equal_the_cli(tmp_path, model, src, dst, gpn, states):
    out = tmp_path / "plan.json"
    subprocess.run([str(cli_path()), "plan", "--model", model, "--from", src, "--to", dst, "--gpus-per-node",
                    str(gpn), "--states", states, "--check", "--json", str(out)], check=True, capture_output=True)
    cli = json.loads(out.read_text())
    py = dynatrain.plan(model, src, dst, gpus_per_node=gpn, states=states, check=True)
    # Every statistic the binding returns equals the CLI's (the CLI may write more, e.g. placement).
    assert {"total", "per_kind", "messages", "max_in_bytes", "max_out_bytes", "lower_bound_seconds", "check"} <= set(py)
    assert {k: v for k, v in py.items() if k not in TIMINGS} == {k: cli[k] for k in py if k not in TIMINGS}
    assert py["total"]["intra_node_bytes"] + py["total"]["inter_node_bytes"] > 0
    assert py["plan_seconds"] > 0 and py["check"] == "ok"


def test_check_and_user_models():
    assert dynatrain.check("qwen3-235b-a22b", "tp=4,pp=2,dp=16,ep=16", "tp=2,pp=2,dp=48,ep=32") == (True, "ok")
    model = dynatrain.Model([dynatrain.Tensor("w", [8, 6], split="dim", dim=1, layer=0),
                             dynatrain.Tensor("e", [4, 6, 2], expert=True, split="dim", dim=2, layer=1)], layers=2)
    stats = dynatrain.plan(model, "tp=2,dp=2,ep=2", "pp=2,dp=2,etp=2", gpus_per_node=2, check=True)
    assert stats["check"] == "ok" and stats["model"] == "custom"
    assert stats["total"]["kept_bytes"] + stats["total"]["intra_node_bytes"] + stats["total"]["inter_node_bytes"] > 0


def test_plan_bad_inputs_raise_value_error():
    with pytest.raises(ValueError, match="tp=3 does not divide 64 attention heads; valid tp: 1, 2, 4, 8"):
        dynatrain.plan("llama2-70b", "tp=3", "tp=4")
    with pytest.raises(ValueError, match="unknown state kind 'weights'"):
        dynatrain.plan("tiny-dense", "tp=1", "tp=2", states="weights")
    with pytest.raises(ValueError, match="gpus per node must be at least 1"):
        dynatrain.plan("tiny-dense", "tp=1", "tp=2", gpus_per_node=0)
    with pytest.raises(ValueError, match="has no experts"):
        dynatrain.plan("tiny-dense", "dp=2,ep=2", "tp=2")
    with pytest.raises(TypeError):
        dynatrain.plan(42, "tp=1", "tp=2")
