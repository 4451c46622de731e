"""The dynatrain module on the user's torch.distributed, with no MPI: every rank of
`dynatrain launch --np N -- python3 c10d_job.py MODE` (2 or 4 processes) runs

  train     torch.distributed.init_process_group("gloo") (env://), then
            * a Manager(None, ...) switched through layouts of N ranks, every element of every
              state kind checked against the oracle after each switch; then saved and resumed
              into another layout (the oracle's state again);
            * the example GPT adopted (comm=None), trained two steps in each layout (tp <-> dp,
              zero 0 -> 1 -> 2) beside a plain single-process copy: every step's loss within
              1e-5 relative, and every state element (params, grads, moments) equal before and
              after each switch; the bound parameters are the Manager's views.
  refusals  what cannot run here raises ValueError on every rank before anything moves (a grow with
            a vacate list, and its prepare; a vacate of global rank 0, the store's host, or of a
            rank outside; the grows themselves are test_c10d_grow.py's),
            a disagreement raises on every rank, the state stays the oracle's, elastic=False
            leaves surplus ranks idle; the job then exits 0.
  shrink    (4 processes) tp=2,dp=2 -> vacate ranks 1, 2 into tp=2 -> shrink to tp=1 -> zero=0:
            after each switch every element of every state kind is the oracle's, the processes
            that left exited 0 (Leaving), the survivors' groups are the new layout's.
  crash     rank 1 raises before a collective its peers are in: the job ends (non-zero), no hang.
Prints `c10d_job MODE ok` on every rank that finished.
"""
import pathlib
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
sys.path.append(str(HERE.parents[1] / "examples"))
sys.path.append(str(HERE))
import dynatrain  # noqa: E402
from gpt_model import GPT, batch  # noqa: E402
from oracle import fill_oracle, oracle_mismatches  # noqa: E402

PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}
DIMS = dict(vocab=50, hidden=16, heads=4, ffn=32, layers=2, seq=8)
LAYOUTS = {2: ["tp=2,zero=0", "dp=2,zero=0", "dp=2", "tp=2", "dp=2,zero=2", "tp=2,zero=2"],
           4: ["tp=2,dp=2,zero=0", "dp=4", "tp=4", "tp=2,dp=2,zero=2", "dp=4,zero=0", "tp=4,zero=2"]}
MANAGER_LAYOUTS = {2: ["tp=2", "dp=2", "tp=2,zero=0", "dp=2,zero=2"],
                   4: ["tp=2,dp=2", "dp=4", "tp=4", "tp=2,dp=2,zero=2", "dp=4,zero=0"]}


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def oracle_survives_switches(size: int) -> None:
    cfgs = MANAGER_LAYOUTS[size]
    m = dynatrain.Manager(None, "tiny-dense", cfgs[0], bucket_elems=70_001)
    expect(type(m.comm).__name__ == "Comm" and m.comm.size == size, "the Manager runs on torch.distributed")
    fill_oracle(m)
    sent = 0
    for cfg in cfgs[1:] + cfgs[:1]:
        sent += m.switch(cfg)["bytes_sent"]
        bad = oracle_mismatches(m)
        expect(not bad, f"after the switch to {cfg}: {len(bad)} (tensor, kind) differ, first {bad[:1]}")
        expect(m.group("tp").size == m.config["tp"] and m.group("dp").size == m.config["dp"], f"{cfg}: group sizes")
    expect(sent > 0, "no switch sent anything")  # the oracle passing by keeping everything local proves little
    checkpoint_resumes_into_another_layout(m, cfgs[1])


def checkpoint_resumes_into_another_layout(m, cfg: str) -> None:
    """m.save() over torch.distributed, then a Manager resumed from it in `cfg`: the oracle's state."""
    where = [tempfile.mkdtemp(prefix="dynatrain-c10d-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(where, src=0)
    try:
        m.step = 7
        m.save(where[0])
        resumed = dynatrain.Manager(None, "tiny-dense", cfg, bucket_elems=70_001, resume=where[0])
        expect(resumed.resumed and resumed.step == 7, "resume: step")
        bad = oracle_mismatches(resumed)
        expect(not bad, f"resumed into {cfg}: {len(bad)} (tensor, kind) differ, first {bad[:1]}")
    finally:
        dist.barrier()
        if dist.get_rank() == 0:
            shutil.rmtree(where[0], ignore_errors=True)


def run_step(model, optimizer, data):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    return loss


def whole_state(job):
    """Every element of every state kind, whole (collective)."""
    m = job.manager
    return {(name, kind): m.gather(name, kind) for kind in m._kinds for name in m.names}


def check_bound(job, model) -> None:
    params = job.manager.tensors("param")
    for name, p in model.named_parameters():
        expect(p.data_ptr() == params[name].data_ptr() and p.shape == params[name].shape, f"{name} is not bound")


def adopted_training_equals_plain(size: int) -> None:
    torch.manual_seed(0)
    model = GPT(**DIMS)
    plain = GPT(**DIMS)
    plain.load_state_dict(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    plain_opt = torch.optim.AdamW(plain.parameters(), lr=3e-3, weight_decay=0.05)
    cfgs = LAYOUTS[size]
    job = dynatrain.adopt(model, optimizer, PLAN, cfgs[0], pipeline="blocks", vocab_divisible_by=8, bucket_elems=3000)
    worst = 0.0
    for step in range(2 * len(cfgs)):
        if step % 2 == 0 and step > 0:
            before = whole_state(job)
            job.switch(cfgs[step // 2])
            after = whole_state(job)
            differ = [key for key in before if not torch.equal(before[key], after[key])]
            expect(not differ, f"switch to {cfgs[step // 2]}: {len(differ)} state tensors changed, first {differ[:1]}")
            check_bound(job, model)
        data = batch(step, 8, DIMS["vocab"], DIMS["seq"])
        want = run_step(plain, plain_opt, data).item()
        got = job.average(run_step(model, optimizer, job.local_batch(data))).item()
        worst = max(worst, abs(got - want) / abs(want))
        expect(worst <= 1e-5, f"step {step} in {job.config['config']}: loss {got}, plain torch {want}")
    for name, q in plain.named_parameters():
        if not name.endswith("attn.k.bias"):  # softmax ignores it: its grad is rounding noise
            expect(torch.allclose(job.full(name), q.detach(), rtol=1e-3, atol=1e-4), f"{name} differs from plain")
    if dist.get_rank() == 0:
        print(f"c10d_job: {len(cfgs)} layouts, largest relative loss difference {worst:.2e}", flush=True)


def raises_everywhere(what: str, call, needle: str) -> None:
    try:
        call()
    except ValueError as e:
        expect(needle in str(e), f"{what}: message {e}")
        return
    raise AssertionError(f"rank {dist.get_rank()}: {what} was not refused")


def refusals(size: int) -> None:
    cfg = MANAGER_LAYOUTS[size][0]
    m = dynatrain.Manager(None, "tiny-dense", cfg, bucket_elems=70_001)
    fill_oracle(m)
    first = m.config["config"]
    both = "either grows (joins processes) or vacates"
    raises_everywhere("grow with a vacate list", lambda: m.switch(f"dp={2 * size}", vacate=[1]), both)
    raises_everywhere("prepare of a grow with a vacate list", lambda: m.prepare(f"dp={2 * size}", vacate=[1]), both)
    raises_everywhere("vacate of the store's host", lambda: m.switch(cfg, vacate=[0]), "hosts the store and cannot leave")
    raises_everywhere("vacate of a rank outside", lambda: m.switch(cfg, vacate=[size]), f"cannot vacate rank {size}")
    mine = "tp=2" if dist.get_rank() == 0 else "dp=2"
    raises_everywhere("different configs", lambda: m.switch(mine), "not equal on every rank")
    expect(not oracle_mismatches(m) and m.config["config"] == first, "the refusals moved state")
    fixed = dynatrain.Manager(None, "tiny-dense", cfg, bucket_elems=70_001, elastic=False)
    fill_oracle(fixed)
    fixed.switch("tp=2")  # fewer ranks than the world: the others hold nothing, and stay
    expect(fixed.active == (dist.get_rank() < 2), "idle ranks of a smaller config")
    expect(not oracle_mismatches(fixed), "state after the switch to fewer ranks")
    fixed.switch(cfg)
    expect(not oracle_mismatches(fixed), "state back on every rank")


def shrink(size: int) -> None:
    expect(size == 4, "shrink runs on 4 processes")
    m = dynatrain.Manager(None, "tiny-dense", "tp=2,dp=2", bucket_elems=70_001)
    fill_oracle(m)
    me = dist.get_rank()
    try:
        for cfg, vacate, stay in (("tp=2", [1, 2], [0, 3]), ("tp=1", None, [0]), ("tp=1,zero=0", None, [0])):
            m.switch(cfg, vacate=vacate)
            expect(me in stay and m.comm.ranks == stay and m.comm.rank == stay.index(me), f"{cfg}: the world {stay}")
            bad = oracle_mismatches(m)
            expect(not bad, f"after the switch to {cfg}: {len(bad)} (tensor, kind) differ, first {bad[:1]}")
            expect(m.group("tp").size == m.config["tp"], f"{cfg}: the tp group's size")
    except dynatrain.Leaving:
        print(f"c10d_job shrink rank {me} left", flush=True)
        raise


def crash(size: int) -> None:
    m = dynatrain.Manager(None, "tiny-dense", MANAGER_LAYOUTS[size][0], bucket_elems=70_001)
    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 stops before the switch")
    m.switch(MANAGER_LAYOUTS[size][1])


def main() -> None:
    mode = sys.argv[1]
    dist.init_process_group("gloo")
    size = dist.get_world_size()
    if mode == "train":
        oracle_survives_switches(size)
        adopted_training_equals_plain(size)
    elif mode == "refusals":
        refusals(size)
    elif mode == "shrink":
        shrink(size)
    else:
        crash(size)
    expect("mpi4py.MPI" not in sys.modules, "MPI was imported")
    print(f"c10d_job {mode} ok", flush=True)


if __name__ == "__main__":
    main()
