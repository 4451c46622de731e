"""Manager: switches keep every tensor's values, views alias the manager's memory, groups match
the config, extra state is carried, bad input raises ValueError. Runs at any world size, on a
fixed set of processes (elastic=False: smaller layouts leave ranks idle; pytest cannot be the
script a grow starts, so process-count changes are in test_elastic.py)."""
import pytest
import torch
from mpi4py import MPI  # noqa: F401  (MPI is initialised before dynatrain)

import dynatrain
from conftest import fill_oracle, oracle_mismatches

# Layouts visited in order; those needing more ranks than the job has are skipped.
SCHEDULES = {
    "tiny-dense": ["tp=2,dp=2", "dp=4", "tp=4", "pp=2,dp=2,zero=0", "tp=2,pp=2,zero=3", "tp=1", "tp=2,zero=2",
                   "dp=2,zero=3", "pp=2", "zero=0", "zero=3"],
    "tiny-moe": ["dp=4,ep=2", "ep=4,dp=4", "tp=2,dp=2,ep=2", "dp=2,ep=2", "tp=1"],
}


def schedule(model, size):
    from dynatrain._native import Manager  # noqa: F401  (the module must import)
    out = []
    for cfg in SCHEDULES[model]:
        sizes = dict(kv.split("=") for kv in cfg.split(","))
        ranks = 1
        for key in ("tp", "pp", "dp", "cp"):
            ranks *= int(sizes.get(key, 1))
        if ranks <= size:
            out.append(cfg)
    return out


def custom_model(layers=4):
    t = [dynatrain.Tensor("embed", [100, 16], split="vocab", stage="pre")]
    for l in range(layers):
        t += [dynatrain.Tensor(f"l{l}.norm", [16], layer=l),
              dynatrain.Tensor(f"l{l}.up", [32, 16], split="dim", dim=0, layer=l),
              dynatrain.Tensor(f"l{l}.down", [16, 32], split="dim", dim=1, layer=l)]
    t.append(dynatrain.Tensor("head", [100, 16], stage="post"))
    return dynatrain.Model(t, layers=layers, vocab_divisible_by=8)


def gather_all(m, kind):
    return {name: m.gather(name, kind) for name in m.names}


@pytest.mark.parametrize("model", ["tiny-dense", "tiny-moe", "custom"])
def test_switches_keep_every_value(world, model):
    cfgs = schedule("tiny-dense" if model == "custom" else model, world.size)
    model_arg = custom_model() if model == "custom" else model
    m = dynatrain.Manager(world, model_arg, cfgs[0], bucket_elems=5000, elastic=False)
    fill_oracle(m)
    before = {kind: gather_all(m, kind) for kind in ("param", "exp_avg")}
    for cfg in cfgs[1:] + cfgs[:1]:
        stats = m.switch(cfg)
        assert oracle_mismatches(m) == [], f"after switching to {cfg}"
        assert stats["config"] == m.config["config"]
        assert stats["bytes_sent"] + stats["bytes_kept"] > 0
        assert stats["peak_bytes"] >= stats["max_dst_bytes"] > 0
    for kind, tensors in before.items():
        after = gather_all(m, kind)
        for name in tensors:
            assert torch.equal(tensors[name], after[name]), (kind, name)


def test_tensors_view_the_buffers_without_copy(world):
    m = dynatrain.Manager(world, "tiny-dense", "dp=1", bucket_elems=5000)
    if not m.active:
        return
    w = m.tensors("param")
    name = "layers.0.mlp.fc2.weight"
    w[name][0, 0] = 42.0  # writes through to the buffer and shows in the segments
    seen = [v for n, v, lo, hi in m.segments("param") if n == name]
    assert seen[0][0].item() == 42.0
    base = {b.data_ptr() for b in m.buffers("param")}
    owners = [b for b in m.buffers("param") if b.data_ptr() <= w[name].data_ptr() < b.data_ptr() + 4 * b.numel()]
    assert len(owners) == 1 and len(base) == len(m.buffers("param"))
    # ZeRO-1: optimizer state is the flat shard; at dp=1 the shard is the whole tensor.
    assert m.shard_slice(name, "master") == (0, w[name].numel())
    assert m.tensors("master")[name].shape == (w[name].numel(),)


def test_zero_shards_partition_each_bucket(world):
    if world.size < 2:
        pytest.skip("needs 2 ranks")
    m = dynatrain.Manager(world, "tiny-dense", "dp=2,zero=1", bucket_elems=5000)
    for b in m.buckets if m.active else []:
        lo_hi = m.group("dp").allgather((b["shard_lo"], b["shard_hi"]))
        assert lo_hi[0][0] == 0 and lo_hi[0][1] == lo_hi[1][0] and lo_hi[1][1] == b["bucket_numel"]
    if m.active:
        total = sum(m.tensors("master")[n].numel() for n in m.names)
        assert m.group("dp").allreduce(total) == sum(
            torch.Size(m.global_shape(n)).numel() for n in m.names)


def test_groups_follow_rank_order(world):
    cfg = "tp=2,dp=2" if world.size >= 4 else ("tp=2" if world.size >= 2 else "tp=1")
    m = dynatrain.Manager(world, "tiny-dense", cfg)
    if not m.active:
        assert m.group("tp") is None
        return
    c = m.config
    for name in ("tp", "dp", "pp", "cp"):
        g = m.group(name)
        assert g.size == c[name] and g.rank == c[name + "_rank"]
        ranks = g.allgather(world.rank)
        # rank = tp + tp*(cp + cp*(dp + dp*pp)): members differ only in their own coordinate.
        stride = {"tp": 1, "cp": c["tp"], "dp": c["tp"] * c["cp"], "pp": c["tp"] * c["cp"] * c["dp"]}[name]
        assert ranks == [world.rank + (i - c[name + "_rank"]) * stride for i in range(c[name])]


def test_step_and_extra_state_are_carried(world):
    m = dynatrain.Manager(world, "tiny-dense", "tp=1", elastic=False)
    state = {"pos": -1}
    m.register("data_position", lambda: state["pos"], lambda v: state.update(pos=v))
    rng = {"seed": 100 + world.rank}
    m.register("rng", lambda: rng["seed"], lambda seeds: rng.update(seed=seeds[-1 - world.rank]), per_rank=True)
    if world.rank == 0:
        state["pos"], m.step = 1234, 17
    m.switch("dp=2" if world.size >= 2 else "tp=1,zero=0")
    assert (m.step, state["pos"]) == (17, 1234)
    assert rng["seed"] == 100 + world.size - 1 - world.rank  # every rank's value reached every rank
    with pytest.raises(ValueError, match="already registered"):
        m.register("rng", lambda: 0, lambda v: None)


def test_bad_inputs_raise_value_error(world):
    with pytest.raises(ValueError, match="tp=3 does not divide 8 attention heads"):
        dynatrain.Manager(world, "tiny-dense", "tp=3")
    with pytest.raises(ValueError, match="unknown key 'tq'"):
        dynatrain.Manager(world, "tiny-dense", "tq=2")
    with pytest.raises(ValueError, match="not-a-model"):
        dynatrain.Manager(world, "not-a-model", "tp=1")
    bad = custom_model()
    bad.tensors[2].split = "rows"
    with pytest.raises(ValueError, match="unknown split 'rows'; valid: replicated, dim, vocab"):
        dynatrain.Manager(world, bad, "tp=1")
    with pytest.raises(ValueError, match=r"tp=3 does not divide dim 0 \(32\) of tensor 'l0.up'"):
        dynatrain.Manager(world, custom_model(), "tp=3")
    m = dynatrain.Manager(world, "tiny-dense", "tp=1", bucket_elems=5000, elastic=False)
    fill_oracle(m)
    with pytest.raises(ValueError, match=f"needs {2 * world.size} ranks but the communicator has {world.size}"):
        m.switch(f"dp={2 * world.size}")
    assert oracle_mismatches(m) == []  # nothing moved; views rebound
    with pytest.raises(ValueError, match="unknown state kind 'moments'"):
        m.tensors("moments")
    with pytest.raises(ValueError, match="unknown group 'sp'"):
        m.group("sp")
    with pytest.raises(ValueError, match=r"global shape \(256, 64\), got \(64, 256\)"):
        m.load("embedding.word.weight", "param", torch.zeros(64, 256))
    with pytest.raises(ValueError, match="unknown tensor 'nope' in model 'tiny-dense'"):
        m.gather("nope", "param")


@pytest.mark.parametrize("model", ["tiny-dense", "custom"])
def test_switch_moves_exactly_the_planned_bytes(world, model):
    cfgs = schedule("tiny-dense", world.size)
    model_arg = custom_model() if model == "custom" else model
    m = dynatrain.Manager(world, model_arg, cfgs[0], bucket_elems=5000, param_dtype=torch.bfloat16, elastic=False)
    for src, dst in zip(cfgs, cfgs[1:]):
        planned = dynatrain.plan(model_arg, src, dst, bucket_elems=5000)["total"]  # bf16 weights, fp32 optimizer
        stats = m.switch(dst)
        assert stats["bytes_sent"] == planned["intra_node_bytes"] + planned["inter_node_bytes"], (src, dst)
        assert stats["bytes_kept"] == planned["kept_bytes"], (src, dst)
    assert all(t.dtype == torch.bfloat16 for t in m.tensors("grad").values())
    assert all(t.dtype == torch.float32 for t in m.tensors("exp_avg_sq").values())


def test_hugging_face_config_json(world, tmp_path):
    import json
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 100}))
    cfgs = [c for c in ("tp=2", "pp=2", "dp=2", "tp=1") if world.size >= 2 or c == "tp=1"]
    m = dynatrain.Manager(world, path, cfgs[0], bucket_elems=1000, elastic=False)
    assert m.global_shape("embedding.word.weight") == (100, 32)
    fill_oracle(m)
    for cfg in cfgs[1:] + ["zero=0"]:
        m.switch(cfg)
        assert oracle_mismatches(m) == [], cfg
