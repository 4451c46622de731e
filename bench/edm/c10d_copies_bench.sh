#!/usr/bin/env bash
# `dynatrain train --redundancy 2` on torch.distributed: each process's state also kept in the
# memory of a process on another node (train/trainer_copies.cc), at GB scale. 4 processes under
# `dynatrain launch --keep-going`, two nodes named by DYNATRAIN_NODE (ranks 0-1: node0, 2-3:
# node1; one machine, Gloo over TCP loopback), the llama-style 133M model at dp=4, zero=1 (each
# rank holds a quarter of the fp32 master and moments, which no other rank holds). Per run:
#   step: the wall time between two step lines on the leader's stdout (the boundary's copy
#     refresh included), median over the steady steps; with and without --redundancy 2,
#     alternating, REPEAT runs each;
#   refresh: the summary's mean and largest time of a refresh, and the bytes a process keeps;
#   floor: those bytes at the point-to-point rate `--json` measures over the job's world at the
#     start (64 MiB messages, the same run): the refresh sends and receives that much;
#   lost node: node 1's two processes SIGKILLed in step 3 with --redundancy 2: the recovery's
#     pause, its bound (the group build plus the bare exchange of the rebuilt bytes, `--json`'s
#     probe), kill -> resumed.
# Run under `flock /tmp/dt-bench.lock` on a shared machine.
# Usage: bench/edm/c10d_copies_bench.sh [BUILD_DIR] [OUT_DIR] [REPEAT]
#        (refreshes bench/results/c10d-copies-cli.md)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench-out/c10d-copies}
REPEAT=${3:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN="$BUILD/dynatrain"
source "$HERE/../results.sh"
results_begin c10d-copies-cli markdown "$0 $*"
STEPS=8
SCHEDULE="0:dp=4,zero=1"

run_job() {  # BASE [ENV...] -- [TRAIN FLAGS...]: one job, its stdout time-stamped line by line
  local base=$1 env=()
  shift
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" "$BIN" launch --np 4 --port 0 --keep-going -- sh -c 'DYNATRAIN_NODE=node$((RANK / 2)) exec "$0" "$@"' \
    "$BIN" train --model "$HERE/llama-133m.json" --global-batch 12 --seq 32 --steps "$STEPS" --threads 1 \
    --schedule "$SCHEDULE" --json "$base.json" "$@" 2>"$base.err" |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done >"$base.log"
}

steady_row() {  # NAME BASE: the table row of a run without a loss
  python3 - "$1" "$2" <<'PY'
import re, statistics, sys
name, base = sys.argv[1], sys.argv[2]
stamps = [float(l.split()[0]) for l in open(base + ".log") if re.match(r"\S+ step +\d+ ", l)]
steps = [b - a for a, b in zip(stamps, stamps[1:])][1:]  # the first interval holds the first refresh's fresh pages
m = next((re.search(r"copies on another node \(--redundancy 2\): (\S+) (\S+) kept on rank 0, refreshed (\d+) times, "
                    r"(\S+) s on average, at most (\S+) s", l) for l in open(base + ".log") if "copies on another" in l), None)
units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
kept = float(m.group(1)) * units[m.group(2)] if m else 0
print(f"| {name} | {statistics.median(steps):.3f} | " +
      (f"{kept / 1e6:.0f} | {float(m.group(4)):.3f} | {float(m.group(5)):.3f} |" if m else "- | - | - |"))
PY
}

echo "Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| run | step s (median, steady) | copy MB kept a process | refresh s (mean) | refresh s (max) |"
echo "|---|---|---|---|---|"
for n in $(seq "$REPEAT"); do
  run_job "$OUT/plain-$n" --
  steady_row "without copies $n" "$OUT/plain-$n"
  run_job "$OUT/copies-$n" -- --redundancy 2
  steady_row "--redundancy 2 $n" "$OUT/copies-$n"
done
echo
echo "| lost node | recovery | kill -> resumed s | pause s | agree s | groups s | move s | MB received (busiest) | bare exchange s | bound s | pause / bound |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for n in $(seq "$REPEAT"); do
  base="$OUT/lost-$n"
  rm -f "$base.stamp"
  run_job "$base" DT_FAULT=kill:2:step:30:3,kill:3:step:30:3 DT_FAULT_STAMP="$base.stamp" -- --redundancy 2
  grep -q " recovery: " "$base.log" || { cat "$base.log" "$base.err"; echo "lost-$n: no recovery"; exit 1; }
  python3 - "$n" "$base" <<'PY'
import json, sys
n, base = sys.argv[1], sys.argv[2]
killed = float(open(base + ".stamp").read())
resumed = next(float(l.split()[0]) for l in open(base + ".log") if " recovery: " in l)
rec = next(r for r in json.load(open(base + ".json"))["switches"] if "recovery" in r)
r = rec["recovery"]
print(f"| {n} | {rec['from']} -> {rec['to']} | {resumed - killed:.3f} | {r['pause_s']:.3f} | {r['agree_s']:.3f} | "
      f"{r['world_s'] + r['groups_s']:.3f} | {r['move_s']:.3f} | {rec['max_bytes_received'] / 1e6:.1f} | "
      f"{rec['exchange_s']:.4f} | {r['bound_s']:.3f} | {r['pause_over_bound']:.1f}x |")
PY
done
echo
python3 - "$OUT" "$REPEAT" <<'PY'
import json, re, statistics, sys
out, repeat = sys.argv[1], int(sys.argv[2])
def step(base):
    stamps = [float(l.split()[0]) for l in open(base + ".log") if re.match(r"\S+ step +\d+ ", l)]
    return statistics.median([b - a for a, b in zip(stamps, stamps[1:])][1:])
plain = statistics.median(step(f"{out}/plain-{n}") for n in range(1, repeat + 1))
copies = statistics.median(step(f"{out}/copies-{n}") for n in range(1, repeat + 1))
rates = []
for n in range(1, repeat + 1):
    rec = next(r for r in json.load(open(f"{out}/lost-{n}.json"))["switches"] if "recovery" in r)
    rates.append(rec["max_bytes_received"] / rec["exchange_s"])
kept = []
for n in range(1, repeat + 1):
    for l in open(f"{out}/copies-{n}.log"):
        m = re.search(r"copies on another node \(--redundancy 2\): (\S+) (\S+) kept", l)
        if m:
            kept.append(float(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)])
rate = statistics.median(rates)
floor = statistics.median(kept) / rate
print(f"Step with the copies {copies:.3f} s against {plain:.3f} s without: {copies / plain:.2f}x (medians). The "
      f"refresh moves {statistics.median(kept) / 1e6:.0f} MB into and out of each process; at the link's rate here "
      f"({rate / 1e9:.2f} GB/s, the recoveries' bare exchange over the survivors' Gloo world, same runs) that is "
      f"{floor:.3f} s a step: a floor of {(plain + floor) / plain:.2f}x for a refresh that is not hidden behind compute.")
PY
echo
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
results_end
