#!/usr/bin/env bash
# The switch's pause against its floors, all measured in the same run: `dynatrain run-transition`
# of the 2.1 GB-state GQA model (bench/models/gqa-2gb), tp=2 -> dp=2 on 2 processes, with the
# defaults (page-aligned layouts, prefault, measured keep path), REPS times. Per run:
#   LB        bytes into the busiest rank / point-to-point bandwidth (all pairs at once)
#   exchange  the switch's bytes between the same peers as plain messages from warm buffers
#   floor     exchange + the busiest rank's copied keeps at this machine's measured copy rate:
#             with one core a rank, its CPU makes its cross-memory reads and its keeps in turn
# the cold switch (first; its destination memory prefaulted before it, as the trainer does while
# training runs) and the warm ones (mean of the rest), with the system time and page faults
# inside the pause (max over ranks) and the load average after each run.
#
#   flock /tmp/dt-bench.lock bench/run_transition_pause.sh [BUILD_DIR] [REPS]
#
# BUILD_DIR defaults to ./build (dynatrain target), REPS to 3. Refreshes the figures of
# bench/results/transition-pause.md (bench/results.sh: medians, then every run). About 15 s a
# run on 2 quiet cores; needs about 3 GB free.
set -euo pipefail
build=${1:-build} reps=${2:-3} here=$(cd "$(dirname "$0")" && pwd)
exe="$build/dynatrain"
[[ -x "$exe" ]] || { echo "no $exe; build the dynatrain target first" >&2; exit 2; }
source "$here/../scripts/mpi-env.sh"
source "$here/results.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= reps; ++r)); do
  echo "repetition $r" >&2
  timeout 600 mpirun -np 2 "$exe" run-transition --model "$here/models/gqa-2gb/config.json" --from tp=2 --to dp=2 \
    --repeat 5 --verify --json "$tmp/$r.json" > /dev/null < /dev/null
  cut -d' ' -f1 /proc/loadavg > "$tmp/$r.load"
done
results_begin transition-pause markdown "bench/run_transition_pause.sh $*"
python3 - "$tmp" "$reps" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
tmp, reps, load0, load1 = sys.argv[1:]
runs = [json.load(open(f"{tmp}/{r}.json")) for r in range(1, int(reps) + 1)]
loads = [open(f"{tmp}/{r}.load").read().strip() for r in range(1, int(reps) + 1)]
assert all(j["verify"] == "ok" for j in runs), "verification failed"
def row(j):
    lb, ex, fl = j["lower_bound_seconds"], j["plain_exchange_seconds"], j["exchange_plus_keep_copy_seconds"]
    c, w = j["phases"], j["warm_phases"]
    return {"lb": lb, "ex": ex, "fl": fl, "kc": j["keep_copy_seconds"], "cold": j["cold_seconds"],
            "warm": j["warm_seconds"], "wmin": j["warm_min_seconds"], "c_lb": j["cold_seconds"] / lb,
            "w_lb": j["warm_seconds"] / lb, "w_ex": j["warm_seconds"] / ex, "w_fl": j["warm_seconds"] / fl,
            "c_ex": j["cold_seconds"] / ex, "sys_c": c["system_seconds"], "flt_c": c["page_faults"],
            "sys_w": w["system_seconds"], "flt_w": w["page_faults"], "prep": j["prepare_seconds"]}
fs = [row(j) for j in runs]
m = lambda k: statistics.median(f[k] for f in fs)
L = []
w = L.append
w(f"- Each run: `mpirun -np 2 dynatrain run-transition --model bench/models/gqa-2gb/config.json --from tp=2 "
  f"--to dp=2 --repeat 5 --verify` (defaults: budget 256 MiB, page-aligned layouts, prefault, measured keep "
  f"path), {reps} runs; load average {load0} before, {load1} after (per run below); Linux, Open MPI over "
  "shared memory.")
w("- LB = bytes into the busiest rank / point-to-point bandwidth (all pairs at once); exchange = the same "
  "bytes and peers as plain messages (best of five); floor = exchange + the busiest rank's copied keeps at the "
  "machine's measured copy rate (one core a rank: a rank's reads and keeps take turns on its core). Cold = the "
  "first switch (prefaulted before it: `prepare`); warm = mean of the next four. System time and faults: inside "
  "the pause, max over ranks. Medians over the runs.")
w("")
w("| LB s | exchange s | floor s (keep copies s) | cold s | cold / LB | warm s | warm / LB | warm / exchange "
  "| warm / floor | cold: system s, faults | warm: system s, faults | prepare s |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|")
w(f"| {m('lb'):.3f} | {m('ex'):.3f} | {m('fl'):.3f} ({m('kc'):.3f}) | {m('cold'):.3f} | {m('c_lb'):.2f} "
  f"| {m('warm'):.3f} | {m('w_lb'):.2f} | {m('w_ex'):.2f} | {m('w_fl'):.2f} | {m('sys_c'):.3f}, {m('flt_c'):.0f} "
  f"| {m('sys_w'):.3f}, {m('flt_w'):.0f} | {m('prep'):.3f} |")
w("")
w("Every run:")
w("")
w("| run | load after | LB s | exchange s | floor s | cold s | cold / LB | warm s (min) | warm / LB | warm / exchange "
  "| warm / floor | warm system s | warm faults |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r, (f, ld) in enumerate(zip(fs, loads), 1):
    w(f"| {r} | {ld} | {f['lb']:.3f} | {f['ex']:.3f} | {f['fl']:.3f} | {f['cold']:.3f} | {f['c_lb']:.2f} "
      f"| {f['warm']:.3f} ({f['wmin']:.3f}) | {f['w_lb']:.2f} | {f['w_ex']:.2f} | {f['w_fl']:.2f} "
      f"| {f['sys_w']:.3f} | {f['flt_w']:.0f} |")
print("\n".join(L))
PY
results_end
