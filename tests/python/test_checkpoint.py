"""Manager.save / Manager(..., resume=): a checkpoint saved in one layout loads into others and
other process counts with every element equal to the oracle; step and extras come back through
register(); damaged, missing or foreign checkpoints and failed writes raise on every rank naming
the path, leaving the previous checkpoint the latest. Runs at any world size; its Managers keep
their processes (elastic=False: a smaller layout leaves ranks idle), as pytest cannot be grown."""
import json
import os
import pathlib
import pickle
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
import torch
from mpi4py import MPI

import dynatrain
from conftest import box_indices, cli_path, fill_oracle, oracle, oracle_mismatches

# (save config, resume configs) per world size; every config uses at most that many ranks.
LAYOUTS = {
    1: ("tp=1,zero=0", ["tp=1", "tp=1,zero=3"]),
    2: ("tp=2", ["dp=2", "tp=1", "pp=2,zero=0", "dp=2,zero=3"]),
    4: ("tp=2,dp=2", ["dp=2", "tp=4", "tp=1", "pp=2,dp=2,zero=0", "tp=2,pp=2,zero=3", "dp=4,zero=2"]),
}
MOE_LAYOUTS = {
    1: ("tp=1", ["tp=1,zero=0"]),
    2: ("dp=2,ep=2", ["tp=2", "tp=1", "dp=2,ep=1,zero=3"]),
    4: ("tp=2,dp=2,ep=2", ["dp=2,ep=2", "dp=4,ep=4", "tp=1", "pp=2,dp=2,ep=2"]),
}


def custom_model(head_rows=100):
    t = [dynatrain.Tensor("embed", [100, 16], split="vocab", stage="pre")]
    for l in range(2):
        t += [dynatrain.Tensor(f"l{l}.norm", [16], layer=l),
              dynatrain.Tensor(f"l{l}.up", [32, 16], split="dim", dim=0, layer=l),
              dynatrain.Tensor(f"l{l}.down", [16, 32], split="dim", dim=1, layer=l)]
    t.append(dynatrain.Tensor("head", [head_rows, 16], stage="post"))
    return dynatrain.Model(t, layers=2, vocab_divisible_by=8)


def world_size_of(cfg):
    sizes = dict(kv.split("=") for kv in cfg.split(","))
    n = 1
    for key in ("tp", "pp", "dp", "cp"):
        n *= int(sizes.get(key, 1))
    return n


def layouts(world, table=LAYOUTS):
    return table[max(n for n in table if n <= world.size)]


@pytest.fixture
def shared_dir(world):
    """A fresh directory every rank sees, removed after the test."""
    path = world.bcast(tempfile.mkdtemp(prefix="dt-ckpt-") if world.rank == 0 else None, root=0)
    yield pathlib.Path(path)
    world.Barrier()
    if world.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def on_ranks(world, n, body):
    """Runs body(sub) on the first n ranks of `world` (a communicator of their own); the rest wait."""
    sub = world.Split(0 if world.rank < n else MPI.UNDEFINED, world.rank)
    if sub != MPI.COMM_NULL:
        body(sub)
        sub.Free()
    world.Barrier()


def saved(world, directory, model="tiny-dense", cfg=None, step=12, **kw):
    m = dynatrain.Manager(world, model, cfg or layouts(world)[0], bucket_elems=5000, elastic=False, **kw)
    fill_oracle(m)
    m.step = step
    m.save(directory)
    return m


@pytest.mark.parametrize("model", ["tiny-dense", "tiny-moe", "custom"])
def test_resume_into_other_layouts_and_process_counts(world, shared_dir, model):
    table = MOE_LAYOUTS if model == "tiny-moe" else LAYOUTS
    save_cfg, resume_cfgs = layouts(world, table)
    arg = custom_model() if model == "custom" else model
    saved_as = saved(world, shared_dir, arg, save_cfg).config["config"]

    def check(sub, cfg):
        m = dynatrain.Manager(sub, arg, cfg, bucket_elems=3000, resume=shared_dir, elastic=False)
        assert m.resumed and m.step == 12
        assert oracle_mismatches(m) == [], f"resumed {save_cfg} into {cfg} on {sub.size} processes"
        assert m._resume_stats["saved_config"] == saved_as

    for cfg in resume_cfgs:
        on_ranks(world, world_size_of(cfg), lambda sub: check(sub, cfg))  # the config's own process count
    check(world, resume_cfgs[0])  # and on the whole job: ranks beyond the config hold nothing


def test_step_and_extras_come_back_through_register(world, shared_dir):
    m = dynatrain.Manager(world, "tiny-dense", layouts(world)[0], bucket_elems=5000, elastic=False)
    m.step = 41
    m.register("data_pos", lambda: {"epoch": 3, "pos": 1234 + world.rank}, lambda v: None)
    m.register("rng", lambda: torch.tensor([world.rank, 7]), lambda v: None, per_rank=True)
    m.register("unused", lambda: "kept", lambda v: None)
    m.save(shared_dir)

    def check(sub):
        got = {}
        r = dynatrain.Manager(sub, "tiny-dense", "tp=1", resume=shared_dir, elastic=False)
        assert r.step == 41 and r.resumed
        assert sorted(r._pending_extra) == ["data_pos", "rng", "unused"]
        r.register("data_pos", lambda: None, lambda v: got.__setitem__("data_pos", v))
        r.register("rng", lambda: None, lambda v: got.__setitem__("rng", v), per_rank=True)
        r.register("fresh", lambda: None, lambda v: got.__setitem__("fresh", v))
        assert got["data_pos"] == {"epoch": 3, "pos": 1234}  # rank 0's value
        assert [t.tolist() for t in got["rng"]] == [[rank, 7] for rank in range(world.size)]  # every saving rank's
        assert "fresh" not in got and list(r._pending_extra) == ["unused"]
        with pytest.raises(ValueError, match="already registered"):
            r.register("rng", lambda: None, lambda v: None)

    on_ranks(world, 1, check)
    # A save after a resume keeps the loaded values not registered yet.
    r = dynatrain.Manager(world, "tiny-dense", "tp=1", resume=shared_dir, elastic=False)
    r.register("data_pos", lambda: "new", lambda v: None)
    r.step = 42
    r.save(shared_dir)
    again = dynatrain.Manager(world, "tiny-dense", "tp=1", resume=shared_dir, elastic=False)
    assert again._pending_extra["data_pos"] == "new" and again._pending_extra["unused"] == "kept"
    assert [t.tolist() for t in again._pending_extra["rng"]] == [[rank, 7] for rank in range(world.size)]
    fresh = dynatrain.Manager(world, "tiny-dense", "tp=1", elastic=False)
    assert not fresh.resumed and fresh._pending_extra == {} and fresh.step == 0


def test_resumed_manager_switches_and_saves_again(world, shared_dir):
    save_cfg, resume_cfgs = layouts(world)
    saved(world, shared_dir, step=5)
    m = dynatrain.Manager(world, "tiny-dense", resume_cfgs[0], bucket_elems=5000, resume=shared_dir, elastic=False)
    for cfg in resume_cfgs[1:] + [save_cfg]:
        m.switch(cfg)
        assert oracle_mismatches(m) == [], f"after switching to {cfg}"
    m.step = 6
    m.save(shared_dir)
    names = sorted(p.name for p in shared_dir.iterdir())
    assert names == ["latest", "step-00000005", "step-00000006"]  # the previous one is kept
    again = dynatrain.Manager(world, "tiny-dense", resume_cfgs[0], resume=shared_dir, elastic=False)
    assert again.step == 6 and oracle_mismatches(again) == []


def rx(path):
    """A regular expression matching `path` literally."""
    return re.escape(str(path))


def flip_last_byte(path):
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x5A]))


def alter_header(path):
    """Changes one hex digit of the first entry checksum in the header (still valid JSON)."""
    with open(path, "r+b") as f:
        head = f.read(1 << 16)
        at = head.index(b'\\"]') - 1
        f.seek(at)
        f.write(b"1" if head[at:at + 1] == b"0" else b"0")


def refused(world, directory, match, model="tiny-dense", **kw):
    """Resuming raises ValueError on every rank, with `match` (a regex) in its message."""
    with pytest.raises(ValueError, match=match):
        dynatrain.Manager(world, model, "tp=1", resume=directory, **kw, elastic=False)


def test_foreign_damaged_and_missing_checkpoints_are_refused(world, shared_dir):
    saved(world, shared_dir)
    step_dir = shared_dir / "step-00000012"
    at = rx(step_dir)
    refused(world, shared_dir, f"'{at}' was saved for model 'tiny-dense', which differs from 'tiny-moe'", "tiny-moe")
    refused(world, shared_dir, f"'{at}' was saved .* differs from 'custom' at tensor 0", custom_model())
    refused(world, shared_dir, f"'{at}/index.json' holds param with 4-byte elements; this manager's are 2-byte",
            param_dtype=torch.bfloat16)
    params_only = shared_dir / "params-only"
    saved(world, params_only, states="param")
    refused(world, params_only, f"'{rx(params_only)}/step-00000012/index.json' holds no master state")
    refused(world, shared_dir / "nope", f"checkpoint directory '{rx(shared_dir / 'nope')}' does not exist")
    refused(world, step_dir, f"'{at}' holds no complete checkpoint")
    world.Barrier()

    def damage(name, how):
        world.Barrier()
        if world.rank == 0:
            shutil.copy(step_dir / name, shared_dir / "good")
            how(step_dir / name)
        world.Barrier()

    def restore(name):
        world.Barrier()
        if world.rank == 0:
            shutil.move(shared_dir / "good", step_dir / name)
        world.Barrier()

    rank_file = step_dir / "rank-00000.safetensors"
    for how, what in [(flip_last_byte, "fails its checksum: corrupted"),
                      (lambda p: os.truncate(p, p.stat().st_size - 100), "truncated"),
                      (alter_header, "header checksum differs from the index: corrupted")]:
        damage(rank_file.name, how)
        refused(world, shared_dir, f"'{at}/rank-00000.safetensors'.*{what}")
        restore(rank_file.name)
    damage("python-state.pkl", flip_last_byte)
    refused(world, shared_dir, f"'{at}/python-state.pkl' fails its checksum: corrupted")
    restore("python-state.pkl")
    damage("index.json", lambda p: p.write_text("{"))
    refused(world, shared_dir, f"checkpoint index '{at}/index.json' is corrupted")
    restore("index.json")
    m = dynatrain.Manager(world, "tiny-dense", "tp=1", resume=shared_dir, elastic=False)  # undamaged again
    assert oracle_mismatches(m) == []


def latest_of(directory):
    return (directory / "latest").read_text().strip()


def test_saves_that_cannot_complete_raise_on_every_rank_and_publish_nothing(world, shared_dir):
    m = saved(world, shared_dir, step=3)
    m.step = 4
    # Another model's checkpoint directory: refused before anything is written.
    other = dynatrain.Manager(world, "tiny-moe", "tp=1", bucket_elems=5000, elastic=False)
    other.step = 9
    with pytest.raises(ValueError, match=f"'{rx(shared_dir / 'step-00000003')}' was saved for model "
                                         "'tiny-dense'.*; save into another directory"):
        other.save(shared_dir)
    # An extra whose value does not pickle: ValueError naming it, before anything is written.
    m.register("lock", lambda: (lambda: None), lambda v: None)
    with pytest.raises(ValueError, match="extra state 'lock' cannot be saved"):
        m.save(shared_dir)
    m._extra.pop("lock")
    # The same step as the latest again.
    m.step = 3
    with pytest.raises(ValueError, match="already holds step 3 as its latest"):
        m.save(shared_dir)
    m.step = 4
    # An unwritable directory (below a regular file, which even root cannot create under).
    blocker = shared_dir / "a-file"
    if world.rank == 0:
        blocker.write_text("x")
    world.Barrier()
    with pytest.raises(OSError, match=f"'{rx(blocker / 'ckpt')}'.*Not a directory"):
        m.save(blocker / "ckpt")
    # A full disk on the last rank: its write fails; every rank raises naming its file.
    last = world.size - 1
    failing = shared_dir / "step-00000004" / f"rank-{last:05d}.safetensors"
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if world.rank == last:
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, hard))
    try:
        with pytest.raises(OSError, match=f"cannot write '{rx(failing)}': File too large"):
            m.save(shared_dir)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    world.Barrier()
    assert latest_of(shared_dir) == "step-00000003"
    assert sorted(p.name for p in shared_dir.iterdir()) == ["a-file", "latest", "step-00000003"]
    r = dynatrain.Manager(world, "tiny-dense", "tp=1", resume=shared_dir, elastic=False)
    assert r.step == 3 and oracle_mismatches(r) == []
    m.save(shared_dir)  # and a save that can complete does
    assert latest_of(shared_dir) == "step-00000004"


def safetensors_entries(path):
    """name -> (shape, float32 values) of a safetensors file, read without dynatrain."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__")
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", name
        begin, end = e["data_offsets"]
        out[name] = (e["shape"], torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32))
    return out


def entry_box(name):
    """(kind, tensor, lo, hi) of a rank file's entry name "<kind>/<tensor>/<lo>-<hi>"."""
    kind, tensor, box = name.split("/")
    lo, hi = ([int(x) for x in side.split(",")] for side in box.split("-"))
    return kind, tensor, lo, hi


def test_checkpoint_is_the_trainers_format(world, shared_dir):
    """The files are ckpt/'s: safetensors rank files whose entries are VPS boxes
    ("<kind>/<tensor>/<lo>-<hi>", every element the oracle's), an index naming every file, the
    Python state as a checksummed attachment."""
    m = saved(world, shared_dir, step=2)
    step_dir = shared_dir / "step-00000002"
    index = json.loads((step_dir / "index.json").read_text())
    assert index["format"] == "dynatrain-checkpoint-1" and index["model"] == "tiny-dense"
    assert index["kinds"] == ["param", "grad", "master", "exp_avg", "exp_avg_sq"]
    files = [f["name"] for f in index["files"]]
    assert files == [f"rank-{r:05d}.safetensors" for r in range(world_size_of(index["config"]))]
    assert index["trainer"]["step"] == 2 and index["step"] == 2
    (attachment,) = index["attachments"]
    data = (step_dir / attachment["name"]).read_bytes()
    assert attachment["bytes"] == len(data) and pickle.loads(data) == {"step": 2, "extras": {}}
    kinds = set()
    for name, (shape, values) in safetensors_entries(step_dir / files[world.rank % len(files)]).items():
        kind, tensor, lo, hi = entry_box(name)
        assert shape == [b - a for a, b in zip(lo, hi)], name
        want = oracle(m._ids[tensor], kind, box_indices(m.global_shape(tensor), lo, hi))
        assert torch.equal(values, want), name
        kinds.add(kind)
    assert kinds == set(index["kinds"])


def test_resumes_a_checkpoint_the_trainer_saved(world, shared_dir):
    """`dynatrain train --save` and Manager.save write one format: a trainer checkpoint (no
    grads, no Python state) resumes with every saved entry in place and grads zero."""
    if world.size > 1:
        pytest.skip("starts the trainer as a process of its own: one-process run only (python_np1)")
    if not cli_path().exists():
        pytest.skip(f"no dynatrain CLI at {cli_path()}")
    subprocess.run([str(cli_path()), "train", "--model", "tiny-dense", "--steps", "2", "--save", str(shared_dir)],
                   check=True, capture_output=True, timeout=300)
    m = dynatrain.Manager(world, "tiny-dense", "tp=1,zero=0", resume=shared_dir, elastic=False)
    assert m.step == 2 and m.resumed and m._pending_extra == {}
    assert all(not bool(b.any()) for b in m.buffers("grad"))
    entries = safetensors_entries(shared_dir / "step-00000002" / "rank-00000.safetensors")
    assert {name.split("/")[0] for name in entries} == {"param", "master", "exp_avg", "exp_avg_sq"}
    for name, (shape, values) in entries.items():
        kind, tensor, lo, hi = entry_box(name)
        got = m.gather(tensor, kind)[tuple(slice(a, b) for a, b in zip(lo, hi))].reshape(-1)
        assert torch.equal(got, values), name
    assert any(bool(v.any()) for _, v in entries.values())  # trained values, not zeros


@pytest.mark.parametrize("where", ["write", "commit"])
def test_a_save_that_dies_leaves_the_previous_checkpoint(world, shared_dir, where):
    """A job killed inside a save (after a rank file, or where the index and pointer switch
    come) leaves `latest` naming the previous checkpoint, which resumes whole."""
    if world.size > 1:
        pytest.skip("starts its own mpirun: one-process run only (python_np1)")
    cmd = [shutil.which("mpirun") or "mpirun", "-np", "2", sys.executable, str(pathlib.Path(__file__).parent / "crash_during_save.py"),
           str(shared_dir), where]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert run.returncode != 0, run.stdout + run.stderr
    assert latest_of(shared_dir) == "step-00000001"
    m = dynatrain.Manager(world, "tiny-dense", "tp=1", resume=shared_dir, elastic=False)
    assert m.step == 1 and oracle_mismatches(m) == []
    m.step = 2
    m.save(shared_dir)  # the next save of that step replaces what the dead one left
    assert latest_of(shared_dir) == "step-00000002"


def test_an_adopted_job_resumes_in_other_layouts(world, shared_dir):
    """job.save() and adopt(..., resume=) run on Manager.save / resume: an Adam job resumed on
    one process and in another layout of the whole job trains on with the losses of the job
    that went on without a checkpoint (its optimizer state and step came back as extras)."""
    from test_adopt import adopt, layouts as adopt_layouts, small_gpt, train_step
    cfgs = adopt_layouts(world.size)
    model = small_gpt()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    job = adopt(model, optimizer, cfgs[0])
    for step in range(2):
        train_step(job, model, optimizer, step)
    job.save(shared_dir)
    want = [train_step(job, model, optimizer, step) for step in (2, 3)]

    def check(comm, cfg):
        fresh = small_gpt()
        with torch.no_grad():
            for p in fresh.parameters():
                p.zero_()  # the resume, not these values, must be what trains
        opt = torch.optim.Adam(fresh.parameters(), lr=1e-2)
        resumed = adopt(fresh, opt, cfg, comm=comm, resume=shared_dir)
        assert resumed.step == 2 and resumed.manager.resumed and resumed.manager._pending_extra == {}
        got = [train_step(resumed, fresh, opt, step) for step in (2, 3)]
        assert got == pytest.approx(want, rel=1e-4), f"resumed {cfgs[0]} into {cfg} on {comm.size} processes"

    on_ranks(world, 1, lambda sub: check(sub, "tp=1"))
    check(world, cfgs[-1])
