#!/usr/bin/env bash
# The engine's measured path choice: `dynatrain run-transition` of the 2.1 GB-state GQA model
# (bench/models/gqa-2gb), tp=2 -> dp=2 on 2 processes, with
#   auto         the defaults (--keep-path auto: remap only runs past this machine's measured
#                break-even of a remap against a copy),
#   remap        --keep-path remap (every whole page of a kept run at a new offset remapped),
#   copy         --keep-path copy (every keep copied),
#   packed       --no-direct-runs (packed messages instead of cross-memory reads of runs),
# each REPS times, interleaved. Every run: --repeat 4 --verify --no-prefault (the cold switch
# builds its destination in fresh pages: what the first write costs here shows). Reports, beside
# the times and their same-run ratios (lower bound, plain exchange of the same bytes), the system
# time and page faults inside the pause and the machine's measured memory rates.
#
#   flock /tmp/dt-bench.lock bench/run_transition_paths.sh [BUILD_DIR] [REPS]
#
# BUILD_DIR defaults to ./build (dynatrain target), REPS to 3. Writes
# bench/results/transition-paths.md (medians over the repetitions, then every run; a section
# "## Reading the figures" after them is kept).
set -euo pipefail
build=${1:-build} reps=${2:-3} here=$(cd "$(dirname "$0")" && pwd)
exe="$build/dynatrain"
[[ -x "$exe" ]] || { echo "no $exe; build the dynatrain target first" >&2; exit 2; }
source "$here/../scripts/mpi-env.sh"
base=(run-transition --model "$here/models/gqa-2gb/config.json" --from tp=2 --to dp=2 --repeat 4 --verify
      --no-prefault)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out="$here/results/transition-paths.md"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
for ((r = 1; r <= reps; ++r)); do
  for variant in auto remap copy packed; do
    case $variant in
      auto) flags=() ;;
      remap | copy) flags=(--keep-path "$variant") ;;
      packed) flags=(--no-direct-runs) ;;
    esac
    echo "repetition $r: $variant" >&2
    timeout 600 mpirun -np 2 "$exe" "${base[@]}" "${flags[@]}" --json "$tmp/${variant}_$r.json" > /dev/null < /dev/null
  done
done
python3 - "$tmp" "$reps" "$out" "$started" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(uname -r)" \
  "$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import json, statistics, sys
tmp, reps, out, started, load0, load1, cores, cpu, kernel, commit = sys.argv[1:]
reps = int(reps)
variants = ["auto", "remap", "copy", "packed"]
runs = {v: [json.load(open(f"{tmp}/{v}_{r}.json")) for r in range(1, reps + 1)] for v in variants}
for v, rs in runs.items():
    assert all(j["verify"] == "ok" for j in rs), f"{v}: verification failed"
med = statistics.median
def row(j):
    lb, ex = j["lower_bound_seconds"], j["plain_exchange_seconds"]
    c, w = j["phases"], j["warm_phases"]
    return {"lb": lb, "ex": ex, "cold": j["cold_seconds"], "warm": j["warm_seconds"],
            "cold_lb": j["cold_seconds"] / lb, "warm_lb": j["warm_seconds"] / lb, "warm_ex": j["warm_seconds"] / ex,
            "sys_c": c["system_seconds"], "flt_c": c["page_faults"], "sys_w": w["system_seconds"],
            "flt_w": w["page_faults"], "keep_w": w["keep"], "wait_w": w["wait"], "alloc_c": c["alloc"],
            "peak_ok": j["peak_within_bound"], "path": j["keep_path"],
            "remapped": j["kept_remapped_bytes"] / j["bytes_kept"] if j["bytes_kept"] else 0}
L = []
w = L.append
w("# Transition engine: measured path choice, system time and page faults")
w("")
w(f"- Command: `flock /tmp/dt-bench.lock bench/run_transition_paths.sh build {reps}`: every run is "
  "`mpirun -np 2 dynatrain run-transition --model bench/models/gqa-2gb/config.json --from tp=2 --to dp=2 "
  "--repeat 4 --verify --no-prefault --json F [FLAGS]` (2.1 GB of fp32 state, budget 256 MiB).")
w(f"- Machine: {cores} cores ({cpu}, a virtual machine), Linux {kernel}, Open MPI over shared memory, no GPU.")
w(f"- Date: {started}; code: {commit}; {reps} repetitions, the variants interleaved; load average {load0} "
  f"before, {load1} after (on {cores} cores any other load moves wall times from run to run; ratios are "
  "against the same run's bounds, and system time and faults are less disturbed by load).")
w("- Cold = the first switch, in fresh pages (`--no-prefault`); warm = mean of the next three. LB = bytes into "
  "the busiest rank / point-to-point bandwidth measured in the run; exchange = the same bytes between the same "
  "peers as plain messages from warm buffers, measured in the run (the fastest of five). System time and page "
  "faults: inside the pause, process-wide, max over ranks. Medians over the repetitions.")
w("")
w("| variant | keep path taken | cold s | cold / LB | warm s | warm / LB | warm / exchange | cold: system s, faults | warm: system s, faults | warm keep / wait s | kept remapped | peak within bound |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|")
for v in variants:
    fs = [row(j) for j in runs[v]]
    m = lambda k: med([f[k] for f in fs])
    w(f"| {v} | {fs[0]['path']} | {m('cold'):.3f} | {m('cold_lb'):.2f} | {m('warm'):.3f} | {m('warm_lb'):.2f} "
      f"| {m('warm_ex'):.2f} | {m('sys_c'):.3f}, {m('flt_c'):.0f} | {m('sys_w'):.3f}, {m('flt_w'):.0f} "
      f"| {m('keep_w'):.3f} / {m('wait_w'):.3f} | {100 * m('remapped'):.0f} % | {'yes' if all(f['peak_ok'] for f in fs) else 'NO'} |")
w("")
rates = [j for rs in runs.values() for j in rs]
g = lambda k: med([j[k] for j in rates])
w("This machine's memory rates as each run measured them at start (exec/machine_rates.h, 32 MiB each; median "
  f"over all {len(rates)} runs, GB/s): copy between warm buffers {g('machine_warm_copy_gb_per_s'):.2f}; first write "
  f"of fresh pages {g('machine_fresh_write_gb_per_s'):.2f}; after `MADV_POPULATE_WRITE` "
  f"{g('machine_populate_gb_per_s'):.2f}; after `MADV_HUGEPAGE` + `MADV_POPULATE_WRITE` "
  f"{g('machine_huge_populate_gb_per_s'):.2f}; one remap (mremap + its later munmap) "
  f"{g('machine_remap_call_us'):.1f} us a call; the break-even run {med([j['remap_min_bytes'] for j in runs['auto']]) / 1024:.0f} KiB "
  f"(the measurement took {g('machine_measure_seconds'):.2f} s); plain exchange of the switch's bytes "
  f"{med([j['plain_exchange_seconds'] for j in rates]):.3f} s, point-to-point probe "
  f"{med([j['p2p_bandwidth_bytes_per_s'] for j in rates]) / 1e9:.2f} GB/s.")
w("")
w("Every run (cold s, warm s, warm / LB, warm / exchange, warm system s, warm faults):")
w("")
w("| variant | rep | LB s | exchange s | cold s | warm s | warm / LB | warm / exchange | warm system s | warm faults |")
w("|---|---|---|---|---|---|---|---|---|---|")
for v in variants:
    for r, j in enumerate(runs[v], 1):
        f = row(j)
        w(f"| {v} | {r} | {f['lb']:.3f} | {f['ex']:.3f} | {f['cold']:.3f} | {f['warm']:.3f} | {f['warm_lb']:.2f} "
          f"| {f['warm_ex']:.2f} | {f['sys_w']:.3f} | {f['flt_w']:.0f} |")
# Notes written by hand after the tables ("## Reading the figures" on) are kept.
import os
kept = ""
if os.path.exists(out):
    text = open(out).read()
    at = text.find("\n## Reading the figures")
    kept = text[at:] if at >= 0 else ""
open(out, "w").write("\n".join(L) + "\n" + kept)
print("\n".join(L))
PY
