#!/usr/bin/env bash
# The engine's fast paths as defaults: `dynatrain run-transition` of the 2.1 GB-state GQA model
# (bench/models/gqa-2gb: 2.1 GB of fp32 state per replica), tp=2 -> dp=2 on 2 processes, with
#   defaults     no flags (page-aligned layouts + prefault + state in huge pages where THP allows),
#   4 KiB pages  --no-huge-pages (the defaults before huge pages: remapped keeps, 4 KiB pages),
#   opted out    --no-align-pages --no-prefault --no-huge-pages (packed, cold in fresh pages),
# each REPS times, interleaved (one of each per repetition, so they share the machine's load).
# Every run: --repeat 4 --verify (1 cold + 3 warm switches, every destination element checked);
# its lower bound (bytes into the busiest rank / point-to-point bandwidth, all pairs at once) is
# measured in the same run, and each ratio is against its own run's bound.
#
#   flock /tmp/dt-bench.lock bench/run_transition_defaults.sh [BUILD_DIR] [REPS]
#
# BUILD_DIR defaults to ./build (needs the dynatrain target), REPS to 3. Writes
# bench/results/run_transition_defaults.md (min / median over the repetitions, then every run).
# Needs about 3 GB of free memory; takes 30-60 s a run on 2 cores.
set -euo pipefail
build=${1:-build} reps=${2:-3} here=$(cd "$(dirname "$0")" && pwd)
exe="$build/dynatrain"
[[ -x "$exe" ]] || { echo "no $exe; build the dynatrain target first" >&2; exit 2; }
source "$here/../scripts/mpi-env.sh"
model="$here/models/gqa-2gb/config.json"
base=(run-transition --model "$model" --from tp=2 --to dp=2 --repeat 4 --verify)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out="$here/results/run_transition_defaults.md"
mkdir -p "$here/results"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
for ((r = 1; r <= reps; ++r)); do
  for variant in defaults small_pages opted_out; do
    case $variant in
      defaults) flags=() ;;
      small_pages) flags=(--no-huge-pages) ;;
      opted_out) flags=(--no-align-pages --no-prefault --no-huge-pages) ;;
    esac
    echo "repetition $r: $variant ${flags[*]:-}" >&2
    timeout 600 mpirun -np 2 "$exe" "${base[@]}" "${flags[@]}" --json "$tmp/${variant}_$r.json" \
      > "$tmp/${variant}_$r.txt" < /dev/null
    echo "load $(cut -d' ' -f1 /proc/loadavg)" > "$tmp/${variant}_$r.load"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Why the cold switch needs the prefault: first touch of fresh pages, 256 MiB, by four ways of
# touching them, against a rewrite of warm pages (GB/s, median of 3).
python3 - > "$tmp/first_touch.txt" <<'PY'
import mmap, statistics, time
n = 256 << 20
zeros = bytes(n)
def a_page(m):
    for off in range(0, n, mmap.PAGESIZE): m[off] = 0
ways = {"a write a page": (0, a_page), "`MAP_POPULATE`": (mmap.MAP_POPULATE, None),
        "`MADV_POPULATE_WRITE`": (0, lambda m: m.madvise(23)), "`memset` (one write of zeros)": (0, lambda m: m.write(zeros))}
rates = {k: [] for k in ways}
warm = []
for _ in range(3):
    for k, (flag, touch) in ways.items():
        t0 = time.perf_counter()
        m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | flag)
        if touch: touch(m)
        rates[k].append(n / (time.perf_counter() - t0) / 1e9)
        m.seek(0)
        t0 = time.perf_counter()
        m.write(zeros)
        warm.append(n / (time.perf_counter() - t0) / 1e9)
        m.close()
print(" | ".join(f"{k} {statistics.median(v):.2f}" for k, v in rates.items()) + f" | warm rewrite {statistics.median(warm):.2f}")
PY

python3 - "$tmp" "$reps" "$out" "$started" "$load_before" "$load_after" "$(nproc)" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  "$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)" "$(uname -r)" \
  "$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import json, statistics, sys
tmp, reps, out, started, load0, load1, cores, cpu, mem, kernel, commit = sys.argv[1:]
reps = int(reps)
variants = [("defaults", "defaults (no flags: huge pages)"),
            ("small_pages", "`--no-huge-pages` (4 KiB pages)"),
            ("opted_out", "opted out `--no-align-pages --no-prefault --no-huge-pages`")]
runs = {v: [json.load(open(f"{tmp}/{v}_{r}.json")) for r in range(1, reps + 1)] for v, _ in variants}
loads = {v: [open(f"{tmp}/{v}_{r}.load").read().split()[1] for r in range(1, reps + 1)] for v, _ in variants}
for v, rs in runs.items():
    for j in rs:
        assert j["verify"] == "ok", f"{v}: verification failed"
gib = 1024 ** 3
def bound(j): return max(j["max_src_bytes"], j["max_dst_bytes"]) + j["budget_bytes"]
def fig(j):
    lb = j["lower_bound_seconds"]
    return {"lb": lb, "cold": j["cold_seconds"], "warm": j["warm_seconds"], "prep": j["prepare_seconds"],
            "cold_r": j["cold_seconds"] / lb, "warm_r": j["warm_seconds"] / lb,
            "coldprep_r": (j["cold_seconds"] + j["prepare_seconds"]) / lb,
            "exch": j["plain_exchange_seconds"], "warm_x": j["warm_seconds"] / j["plain_exchange_seconds"],
            "warm_f": j["warm_seconds"] / j["exchange_plus_keep_copy_seconds"], "keep_copy": j["keep_copy_seconds"],
            "wsys": j["warm_phases"]["system_seconds"], "wpf": j["warm_phases"]["page_faults"],
            "csys": j["phases"]["system_seconds"], "cpf": j["phases"]["page_faults"],
            "huge": j.get("huge_page_share", 0.0)}
def mm(xs, f="{:.3f}"):
    return f"{f.format(min(xs))} / {f.format(statistics.median(xs))}"
loaded = max(float(x) for x in load0.split() + load1.split())
shared = loaded > int(cores)
lines = []
w = lines.append
w("# run-transition: the fast paths as defaults")
w("")
w(f"- Command: `flock /tmp/dt-bench.lock bench/run_transition_defaults.sh build {reps}`: every run is")
w("  `mpirun -np 2 dynatrain run-transition --model bench/models/gqa-2gb/config.json --from tp=2 --to dp=2 "
  "--repeat 4 --verify --json F [FLAGS]` (default budget 256 MiB, Megatron's 40M-element buckets).")
w(f"- Machine: {cores} cores ({cpu}), {mem}, Linux {kernel}, Open MPI over shared memory, no GPU.")
w(f"- Date: {started}; code: {commit}; {reps} repetitions, the three variants interleaved in each.")
if shared:
    w(f"- **Load above the core count** (load average {load0} before, {load1} after, on {cores} cores; the "
      "benchmark's own processes count in it, and whatever else ran), so absolute times and each run's "
      "bandwidth probe move from run to run; every ratio is against the lower bound measured in its own run.")
else:
    w(f"- Load average {load0} before, {load1} after, on {cores} cores.")
w("- Cold = the first switch; warm = mean of the next three (each after switching back). LB = the lower bound "
  "the run measured (`lower_bound_seconds`: bytes into the busiest rank / point-to-point bandwidth, all pairs "
  "exchanging at once). Prepare = the prefault before the cold switch (`prepare_seconds`, not part of cold; "
  "the elastic device manager does it while training runs). Figures are min / median over the repetitions.")
w("")
w("| variant | LB s | cold s | cold / LB | warm s | warm / LB | prepare s | (cold + prepare) / LB | plain exchange s | warm / exchange | peak / bound GiB | pool held / bound GiB |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|")
for v, label in variants:
    fs = [fig(j) for j in runs[v]]
    j0 = runs[v][0]
    peak_ok = all(j["peak_within_bound"] for j in runs[v])
    held = max(j["pool_peak_reserved_max"] for j in runs[v])
    w(f"| {label} | {mm([f['lb'] for f in fs])} | {mm([f['cold'] for f in fs])} | {mm([f['cold_r'] for f in fs], '{:.2f}')} "
      f"| {mm([f['warm'] for f in fs])} | {mm([f['warm_r'] for f in fs], '{:.2f}')} | {mm([f['prep'] for f in fs])} "
      f"| {mm([f['coldprep_r'] for f in fs], '{:.2f}')} | {mm([f['exch'] for f in fs])} | {mm([f['warm_x'] for f in fs], '{:.2f}')} "
      f"| {max(j['peak_bytes'] for j in runs[v]) / gib:.3f} / {bound(j0) / gib:.3f} ({'yes' if peak_ok else 'NO'}) "
      f"| {held / gib:.3f} / {bound(j0) / gib:.3f} ({'yes' if held <= bound(j0) else 'NO'}) |")
w("")
d = [fig(j) for j in runs["defaults"]]
o = [fig(j) for j in runs["opted_out"]]
med = lambda xs: statistics.median(xs)
def goal(rs, key, limit):
    xs = [f[key] for f in rs]
    return (f"median {med(xs):.2f}, best {min(xs):.2f}, worst {max(xs):.2f}: "
            f"{'met' if max(xs) <= limit else 'missed'} ({sum(x <= limit for x in xs)} of {len(xs)} runs within)")
s4 = [fig(j) for j in runs["small_pages"]]
w(f"Goals for the defaults: cold <= 2.5x LB, {goal(d, 'cold_r', 2.5)}; warm <= 1.3x LB, {goal(d, 'warm_r', 1.3)}; "
  f"warm <= 1.2x the plain exchange of the same run, {goal(d, 'warm_x', 1.2)}. "
  f"4 KiB pages: cold {med([f['cold_r'] for f in s4]):.2f}x, warm {med([f['warm_r'] for f in s4]):.2f}x LB, "
  f"{med([f['warm_x'] for f in s4]):.2f}x the exchange; opted out: cold {med([f['cold_r'] for f in o]):.2f}x, "
  f"warm {med([f['warm_r'] for f in o]):.2f}x LB (medians).")
w("")
rng = lambda xs: f"{min(xs):.3f}-{max(xs):.3f} s ({max(xs) / min(xs):.2f}x apart)"
w(f"Spread of the defaults over the runs: the warm switch {rng([f['warm'] for f in d])}, the lower bound "
  f"{rng([f['lb'] for f in d])}, the plain exchange {rng([f['exch'] for f in d])}: where the link's own rate moves "
  "more than the switch, the ratios follow the link probe.")
w("")
w(f"The floor with kept bytes copied (one core a rank: the plain exchange, then the kept bytes at the "
  f"machine's measured warm copy rate, `exchange_plus_keep_copy_seconds`; keeps in huge pages are copied, "
  f"since remapping 4 KiB runs splits 2 MiB pages): keep copy {mm([f['keep_copy'] for f in d])} s, "
  f"warm / floor {goal(d, 'warm_f', 1.2)} (against 1.2x).")
w("")
w("First touch of fresh pages on this machine, 256 MiB (GB/s, median of 3, same run): "
  + open(f"{tmp}/first_touch.txt").read().strip() + ". How the pages are touched does not matter; the "
  "kernel's zeroing of fresh pages is the cost, hence the prefault (it runs before the switch, as the "
  "elastic device manager's prepare runs while training goes on).")
w("")
w("Every run (LB s, cold s, warm s, prepare s; the keep path the engine chose and the kept bytes it remapped; "
  "the pool's blocks in 2 MiB pages after the last switch; system seconds and page faults of the cold and the "
  "last warm switch, most over ranks; load average after):")
w("")
w("| variant | rep | LB s | cold s | cold / LB | warm s | warm / LB | warm / exchange | prepare s | keep path | remapped / kept | in huge pages | cold sys s / faults | warm sys s / faults | load |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for v, label in variants:
    for r, j in enumerate(runs[v], 1):
        f = fig(j)
        w(f"| {v} | {r} | {f['lb']:.3f} | {f['cold']:.3f} | {f['cold_r']:.2f} | {f['warm']:.3f} | {f['warm_r']:.2f} "
          f"| {f['warm_x']:.2f} | {f['prep']:.3f} | {j['keep_path']} "
          f"| {j['kept_remapped_bytes'] / gib:.2f} / {j['bytes_kept'] / gib:.2f} GiB | {100 * f['huge']:.0f} % "
          f"| {f['csys']:.3f} / {f['cpf']:.0f} | {f['wsys']:.3f} / {f['wpf']:.0f} | {loads[v][r - 1]} |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
