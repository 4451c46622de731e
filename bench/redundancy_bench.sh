#!/usr/bin/env bash
# A lost process with the state's memory copy (job/memory_copy.h) against a checkpoint restart,
# and what the copy costs a step, through `dynatrain train --np 4 --max-restarts 1`:
# the llama-style bench/edm/llama-133m.json (1.6 GB of master + Adam state in rank
# files) in tp=2,dp=2 on 4 processes, global batch 4 x 32 tokens, --threads 1.
#  * cost: STEPS steps with no copy, --redundancy 1 and --redundancy 2 (no fault); a step's time
#    is the interval between two step lines (the step and the boundary after it, where the copy
#    is written), mean over the steps after the second; beside it a warm memcpy of the copy's
#    bytes measured in the same run (the copy's floor: it writes each byte once, twice with
#    buddies) and a fresh-memory copy (first touch: what a copy into new pages costs);
#  * loss: rank 1 dies 200 ms into step KILL_AT, (a) SIGKILL with --save-every SAVE_EVERY and no
#    copy (the checkpoint restart), (b) the same SIGKILL with --redundancy 1, (c) rank 1 lost with
#    its node's shared memory (`lose`: its files removed) with --redundancy 2. Per case: steps
#    lost (from the assembled CSV's steps_lost), the fault -> the restarted job's resume line
#    (state loaded: training resumed), -> its first step at the step the loss interrupted
#    (training back where it was), both from stamps of every line as it arrives.
# Usage: bench/redundancy_bench.sh [BUILD] [OUT]      STEPS (10), KILL_AT (6), SAVE_EVERY (4)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-/tmp/dt-redundancy-bench}
STEPS=${STEPS:-10} KILL_AT=${KILL_AT:-6} SAVE_EVERY=${SAVE_EVERY:-4}
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$OUT" && mkdir -p "$OUT"
BIN="$OUT/dynatrain"
cp "$BUILD/dynatrain" "$BUILD/dynatrain-torch" "$OUT/"  # the front and the trainer it hands train to
source "$HERE/../scripts/mpi-env.sh"
source "$HERE/results.sh"
py() { PYENV_VERSION=system python3 "$@"; }
common=(--model "$HERE/edm/llama-133m.json" --global-batch 4 --seq 32 --threads 1 --schedule "0:tp=2,dp=2")
stamp_lines() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done; }

job() {  # NAME FAULT ARGS...: a supervised job; every stdout line stamped into OUT/NAME.log
  local name=$1 fault=$2
  shift 2
  rm -rf "$OUT/$name.ck" "$OUT/$name.stamp"
  DT_FAULT=$fault DT_FAULT_STAMP="$OUT/$name.stamp" timeout 900 "$BIN" train --np 4 --max-restarts 1 \
    "${common[@]}" --steps "$STEPS" --save "$OUT/$name.ck" --csv "$OUT/$name.csv" "$@" 2>"$OUT/$name.err" |
    stamp_lines >"$OUT/$name.log" || { tail -n 20 "$OUT/$name.log" "$OUT/$name.err"; exit 1; }
  rm -rf "$OUT/$name.ck"  # GBs of disk
}

results_begin redundancy markdown "$0 $*"
job none "" --save-every 1000
job r1 "" --save-every 1000 --redundancy 1
job r2 "" --save-every 1000 --redundancy 2
job ckpt "kill:1:step:200:$KILL_AT" --save-every "$SAVE_EVERY"
job kill1 "kill:1:step:200:$KILL_AT" --save-every "$SAVE_EVERY" --redundancy 1
job lose2 "lose:1:step:200:$KILL_AT" --save-every "$SAVE_EVERY" --redundancy 2

py - "$OUT" "$KILL_AT" <<'PY'
import csv, re, sys, time
import numpy as np
out, kill_at = sys.argv[1], int(sys.argv[2])
step_re = re.compile(r"step +(\d+)  loss")

def lines(name):
    return [l.rstrip("\n").split(" ", 1) for l in open(f"{out}/{name}.log")]

def step_times(name):  # seconds between consecutive step lines, from the third on
    t = [float(s) for s, l in lines(name) if step_re.search(l)]
    d = [b - a for a, b in zip(t, t[1:])][2:]
    return sum(d) / len(d)

def copy_line(name):
    for s, l in lines(name):
        if "memory copy (--redundancy" in l:
            m = re.search(r"the last ([0-9.]+ [KMG]iB) of rank files.*?\(fresh pages\) ([0-9.]+) s, ([0-9.]+) s, "
                          r"then ([0-9.]+) s on average, at most ([0-9.]+) s", l)
            return m.group(1), float(m.group(4)), float(m.group(5)), float(m.group(2)), float(m.group(3))
    return None

def gib(text):
    v, u = text.split()
    return float(v) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[u]

def memcpy_rates(nbytes):  # warm (best of 3) and into fresh memory, GB/s
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    b[:] = 0
    warm = []
    for _ in range(3):
        t = time.perf_counter(); np.copyto(b, a); warm.append(time.perf_counter() - t)
    t = time.perf_counter(); c = a.copy(); fresh = time.perf_counter() - t
    return nbytes / min(warm) / 1e9, nbytes / fresh / 1e9

base = step_times("none")
size = copy_line("r1")[0]
state = gib(size)
warm, fresh = memcpy_rates(512 << 20)
print(f"memcpy measured in this run: warm {warm:.2f} GB/s, into fresh memory {fresh:.2f} GB/s (one process, 512 MiB)\n")
print("| run | step + boundary | vs no copy | first two copies (fresh pages) | later copies (mean, max) | copy's bytes | at one warm memcpy | later copies / that |")
print("|---|---|---|---|---|---|---|---|")
print(f"| no copy | {base:.3f} s | 1.00x | | | | | |")
for name, factor in (("r1", 1), ("r2", 2)):
    size, mean, most, first, second = copy_line(name)
    floor = factor * gib(size) / (warm * 1e9)
    print(f"| --redundancy {factor} | {step_times(name):.3f} s | {step_times(name) / base:.2f}x | {first:.2f} s, {second:.2f} s "
          f"| {mean:.3f} s, {most:.3f} s | {factor} x {size} | {floor:.3f} s | {mean / floor:.1f}x |")

print("\n| loss of rank 1, 200 ms into step %d | restarted from | steps lost | loss -> training resumed | loss -> step %d done again |" % (kill_at, kill_at))
print("|---|---|---|---|---|")
for name, what in (("ckpt", "SIGKILL, checkpoint restart (no copy)"), ("kill1", "SIGKILL, --redundancy 1"),
                   ("lose2", "SIGKILL + its shared memory gone, --redundancy 2")):
    fault = float(open(f"{out}/{name}.stamp").read())
    ls = lines(name)
    sup = next(l for s, l in ls if l.startswith("supervise:"))
    frm = int(re.search(r"from step (\d+)", sup).group(1))
    where = "memory copy" if "from the memory copy" in sup else "disk checkpoint"
    resumed = next(float(s) for s, l in ls if l.startswith("resumed from"))
    i = next(k for k, (s, l) in enumerate(ls) if l.startswith("supervise:"))
    back = next(float(s) for s, l in ls[i:] if (m := step_re.search(l)) and int(m.group(1)) == kill_at)
    rows = list(csv.DictReader(open(f"{out}/{name}.csv")))
    lost = sum(int(r["steps_lost"]) for r in rows if r["steps_lost"])
    steps = [int(r["step"]) for r in rows]
    assert steps == list(range(len(steps))), f"{name}: steps {steps}"
    print(f"| {what} | step {frm} ({where}) | {lost} | {resumed - fault:.2f} s | {back - fault:.2f} s |")
PY
results_end
