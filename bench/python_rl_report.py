"""bench/results/rl-phase-shift.md from one run of bench/python_rl_bench.py: the whole file,
rewritten each run (the figures, the machine and its load, the verdicts against the targets)."""
import os
import statistics
import subprocess
import time

TARGET = 1.3  # pause / bound; and refit vs broadcast within the byte ratio over this


def _machine(load) -> str:
    cores = os.cpu_count() or 1
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    loaded = max(load) > 0.5 * cores
    state = (f"**loaded**: load average {load[0]:.1f} at the start, {load[1]:.1f} at the end on {cores} cores "
             f"(the benchmark's own processes and whatever else ran), so the seconds are noisy; the ratios to the same-run bounds are "
             f"the figures to read" if loaded else f"quiet: load average {load[0]:.1f} -> {load[1]:.1f}")
    return f"Machine: {cores} cores, {mem:.0f} GiB, Open MPI over shared memory, no GPU; {state}."


def commit() -> str:
    """The code measured: the commit, marked when the tree had changes (read at the run's start)."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
    return git("rev-parse", "--short", "HEAD") + ("+ (uncommitted changes)" if git("status", "--porcelain") else "")


_LABELS = {"lend": "lend", "refit": "refit", "refit bf16": "refit, bf16 copy of the fp32 job (senders cast)",
           "bcast": "full-weights broadcast from rank 0 (baseline)", "reclaim": "reclaim"}
_SPLIT = (("args_seconds", "Python agreement"), ("plan_seconds", "plan"), ("agree_seconds", "engine agreement"),
          ("dry_seconds", "dry run"), ("alloc_seconds", "allocation"), ("pack_seconds", "pack"),
          ("unpack_seconds", "unpack"), ("keep_seconds", "keeps"), ("wait_seconds", "wait on the link"),
          ("rebind_seconds", "rebind"), ("system_seconds", "system time"))


def _first_and_steady(rows) -> list:
    """(label, parts) for the first round and the median of the others, part by part."""
    steady = {k: statistics.median(r[k] for r in rows[1:]) for k in rows[0]}
    return [("first", rows[0]), ("steady", steady)]


def _direction(key) -> str:
    """The way a phase's bytes go: a lend moves from the lent processes to the others ("down"),
    every other phase the other way ("up")."""
    return "down" if key == "lend" else "up"


def _rate(s, key) -> float:
    """The link rate a phase's bound uses: its direction's."""
    return s["rates"][_direction(key)]


def _zeroed(p) -> float:
    """The grad bytes the busiest process zeroed (0 where nothing is zeroed, or not measured)."""
    z = p.get("max_rank_bytes_zeroed", 0.0)
    return 0.0 if z != z else z


def _floor_seconds(s, key, p, bound) -> float:
    """The bound plus the zeroing of the grads at the same run's zeroing rate: a receiver's copy
    and its memset take turns on its core (no more cores than processes here)."""
    return bound + _zeroed(p) / s["rates"]["zero " + _direction(key)]


def _phases(s) -> list:
    out = ["| phase | round | call (s) | pause (s) | max bytes into a process (MB) | lower bound (s) | pause / bound | "
           f"target <= {TARGET}x | grads zeroed (MB) | floor (s) | pause / floor |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in ("lend", "refit", "refit bf16", "bcast", "reclaim"):
        for which, p in _first_and_steady(s["rows"][key]):
            if key == "bcast" and which == "first":
                continue
            received = s["received"][key] if key == "bcast" else p["max_rank_bytes_received"]
            bound = received / _rate(s, key)
            floor = _floor_seconds(s, key, p, bound)
            got = p["pause_seconds"]
            verdict = "-" if key == "bcast" or which == "first" else ("met" if got / bound <= TARGET else "not met")
            out.append(f"| {_LABELS[key]} | {which} | {p['call_seconds']:.4f} | {got:.4f} | {received / 1e6:.1f} | "
                       f"{bound:.4f} | {got / bound:.2f}x | {verdict} | {_zeroed(p) / 1e6:.1f} | {floor:.4f} | "
                       f"{got / floor:.2f}x |")
    return out


def _split(s) -> list:
    """Where each phase's pause went, in ms (each part the slowest process's, so they need not add up)."""
    out = ["| phase | round | " + " | ".join(name for _, name in _SPLIT) + " | page faults | plan cached |",
           "|---|---|" + "---|" * (len(_SPLIT) + 2)]
    for key in ("lend", "refit", "refit bf16", "reclaim"):
        for which, p in _first_and_steady(s["rows"][key]):
            cells = ["-" if p[k] != p[k] else f"{p[k] * 1e3:.1f}" for k, _ in _SPLIT]  # nan: not measured there
            out.append(f"| {key} | {which} | " + " | ".join(cells) +
                       f" | {p['page_faults']:.0f} | {'yes' if p['plan_cached'] >= 0.5 else 'no'} |")
    return out


def _restarts(s, resizes) -> list:
    out = ["| resize | pause (s) | save (s) | processes end and start (s) | adopt and load (s) | checkpoint (MB) | "
           "in-memory pause (s) | in-memory faster |", "|---|---|---|---|---|---|---|---|"]
    for r in resizes:
        mine = s["pause"]["lend" if r["kind"].startswith("shrink") else "reclaim"]
        out.append(f"| {r['kind']} | {r['pause']:.2f} | {r['save']:.2f} | {r['restart']:.2f} | {r['load']:.2f} | "
                   f"{r['bytes'] / 1e6:.1f} | {mine:.4f} | {r['pause'] / mine:.0f}x |")
    return out


def _memory(s):
    """Per process: the pool's peak live and peak held bytes against max(training, copy) + budget;
    (rows, live within on every process, held within on every process, the most held over it)."""
    rows = ["| process | peak RSS (MB) | job state (MB) | while lent (MB) | copy (MB) | pool peak live (MB) "
            "| pool peak held (MB) | max(training, copy) + budget (MB) |", "|---|---|---|---|---|---|---|---|"]
    live_ok, held_ok, over = True, True, 0.0
    for rank, (rss, h) in enumerate(s["peak"]):
        bound = max(h["job"], h["job while lent"], h["copy"]) + h["budget"]
        live_ok = live_ok and h["peak_live"] <= bound
        held_ok = held_ok and h["peak_reserved"] <= bound
        over = max(over, h["peak_reserved"] - bound)
        rows.append(f"| {rank} | {rss / 1e6:.0f} | {h['job'] / 1e6:.1f} | {h['job while lent'] / 1e6:.1f} | "
                    f"{h['copy'] / 1e6:.1f} | {h['peak_live'] / 1e6:.1f} | {h['peak_reserved'] / 1e6:.1f} | "
                    f"{bound / 1e6:.1f} |")
    return rows, (live_ok, held_ok, over)


def _floor(s) -> list:
    """Per phase (steady): the engine's wait on the link over the bound, and the share of the pause
    spent outside that wait (agreement, planning, allocation, rebinding: what is not the link)."""
    parts = []
    for key in ("lend", "refit", "refit bf16", "reclaim"):
        p = _first_and_steady(s["rows"][key])[1][1]
        bound = p["max_rank_bytes_received"] / _rate(s, key)
        floor = _floor_seconds(s, key, p, bound)
        parts.append(f"{key} {p['wait_seconds'] / bound:.2f}x the bound waiting on the link, "
                     f"{1 - p['wait_seconds'] / p['pause_seconds']:.0%} of its pause elsewhere, "
                     f"{p['pause_seconds'] / floor:.2f}x the floor")
    return ["- **Floor:** steady rounds: " + "; ".join(parts) + ". The wait is the engine's messages through "
            "Open MPI's shared memory into destination buffers, against the same run's best plain 64 MiB messages "
            "between the same pairs; the rest is the per-call agreement, allocation, keeps and rebinding."]


def _summary(s, resizes, memory_ok) -> list:
    speed = s["pause"]["bcast"] / s["pause"]["refit"]
    ratio = s["received"]["bcast"] / s["received"]["refit"]
    half = s["bf16"]["received"] / s["received"]["refit"]
    return [
        f"- **Refit vs broadcast:** {speed:.2f}x faster; bytes into a receiver {ratio:.2f}x fewer. Target: faster "
        f"by the byte ratio within {TARGET}x (>= {ratio / TARGET:.2f}x): "
        f"{'met' if speed >= ratio / TARGET else 'not met'}.",
        f"- **Groups and processes:** new process groups per round {s['groups']}, new processes per round "
        f"{s['processes']} (round 0 builds the lent layout's groups, the copy's communicator and its groups; "
        f"target: 0 and 0 from the second round on: "
        f"{'met' if not any(s['groups'][1:]) and not any(s['processes']) else 'not met'}).",
        _restart_summary(s, resizes),
        f"- **bf16 refit of this fp32 job:** {s['bf16']['received'] / 1e6:.1f} MB into a receiver, {half:.2f}x the "
        f"fp32 refit's: each sender casts its shard to bf16 before sending (counted in its pack time), so the "
        f"link carries 2-byte weights and the receivers hold the bf16 copy itself (docs/python.md).",
        *_floor(s),
        f"- **Memory:** the pool's peak live bytes within max(training, copy) + budget on every process: "
        f"{'met' if memory_ok[0] else 'not met'}; its peak held bytes (live plus each block's rounding to whole "
        f"2 MiB pages and spare pages kept for later switches) "
        + ("within it too." if memory_ok[1] else f"over it by at most {memory_ok[2] / 1e6:.1f} MB.")
        + " The peak RSS includes Python, torch and the baseline's full copy of the weights, so it bounds rather "
        "than measures the state.",
    ]


def _restart_summary(s, resizes) -> str:
    if not resizes:
        return "- **Checkpoint and restart:** not run (`--restart-rounds 0`)."
    shrink = statistics.median(r["pause"] for r in resizes if r["kind"].startswith("shrink"))
    grow = statistics.median(r["pause"] for r in resizes if r["kind"].startswith("grow"))
    return (f"- **Checkpoint and restart:** the same resizes by save, restart and load took {shrink:.2f} s (shrink) "
            f"and {grow:.2f} s (grow) median, against lend {s['pause']['lend']:.4f} s and reclaim "
            f"{s['pause']['reclaim']:.4f} s in memory ({shrink / s['pause']['lend']:.0f}x and "
            f"{grow / s['pause']['reclaim']:.0f}x).")


def write(a, s, resizes, load, code) -> str:
    """The whole results file for shifts `s` (the worker's RESULT) and the checkpoint `resizes`."""
    memory, memory_ok = _memory(s)
    lines = [
        "# RL phase shifts: lend, refit, reclaim against their lower bounds, the full-weights broadcast and "
        "checkpoint-restart", "",
        "Written whole by `PYTHONPATH=build/python python3 bench/python_rl_bench.py` "
        f"(`--hidden {a.hidden} --layers {a.layers} --vocab {a.vocab} --rounds {a.rounds} --restart-rounds "
        f"{a.restart_rounds}`) at code {code}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        _machine(load), "",
        f"The job: `examples/gpt_model.py`'s GPT ({s['weight_bytes'] / 1e6:.1f} MB of fp32 weights), AdamW, adopted "
        "at `tp=2,dp=2` (zero=1) on 4 processes. Each round: `job.lend(2)` (the state onto processes 0, 1 at "
        "`tp=2,dp=1`), `job.refit(\"tp=2\", GPT(...))` onto the lent processes 2 and 3, the baseline (every full "
        "weight broadcast from rank 0 to processes 2 and 3 with `MPI_Bcast`, as OpenRLHF and verl do after "
        "gathering; the gather not counted), `weights.release()`, `job.reclaim()`. First: the round that builds "
        f"the groups and the copy; steady: the median of the next {a.rounds}. Call: the whole Python call from a "
        "barrier; pause: the switch's own figure (Manager.switch from its agreement to the rebound views). "
        "Lower bound: the most bytes any process receives in the phase over the link rate measured in the same "
        "job, in the phase's direction: 64 MiB plain messages between both pairs at once (2 -> 0 and 3 -> 1 for "
        "a lend, 0 -> 2 and 1 -> 3 for the others), one way, the senders waiting in a sleeping poll as the "
        "engine's senders sleep between polls, best of 5, probed before and after the rounds and the faster "
        f"kept: {s['rates']['down'] / 1e9:.2f} GB/s (lend) and {s['rates']['up'] / 1e9:.2f} GB/s (the others). "
        "Floor: the bound plus the busiest process's zeroing of grads inside the pause, at the rate each "
        "receiver of the phase zeroes a warm 64 MiB buffer, all at once, in the same run: "
        f"{s['rates']['zero down'] / 1e9:.1f} GB/s (lend), {s['rates']['zero up'] / 1e9:.1f} GB/s (the others). "
        "The job's lend and reclaim zero no grads in the pause (they leave them unset, p.grad None, and the job "
        "zeroes them at the next zero_grad(), forward or step), so there the floor is the bound.", "",
        *_phases(s), "",
        "Where the pause goes, in ms: each part is the slowest process's (so the parts need not add up to the "
        "pause); Python agreement is Manager.switch's agreement and checks before the native switch, rebind its "
        "carried step, extras and new views; the engine's agreement covers its checks, keep planning and the "
        "collective wave agreement (in a bf16 refit it includes the receivers' wait for the senders' cast, which "
        "is counted in pack); a refit's Python part is outside these columns (call - pause).", "",
        *_split(s), "",
        "Checkpoint-restart baseline, in the same run: a chain of jobs on 4, 2, 4, ... processes "
        "(`tp=2,dp=2` / `tp=2,dp=1`), each loading the previous job's checkpoint (`Manager.save`: safetensors "
        "files, every state kind, fsync of files and directories, under build/) and saving its own before it "
        "ends (bench/python_rl_restart.py). A resize's pause runs from the old job's save to the new job "
        "holding its state; wall-clock times after a barrier (the slowest process).", "",
        *_restarts(s, resizes), "",
        *_summary(s, resizes, memory_ok), "",
        *memory, "",
        "Grads stay where they are: lend and reclaim run at a step boundary and neither move nor zero the "
        "grads (zeroed by the next step), so the reclaim brings processes 2 and 3 the param and the zero=1 "
        "shards of both moments; the refit moves the param kind alone.", "",
    ]
    return "\n".join(lines)
