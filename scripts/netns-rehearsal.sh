#!/usr/bin/env bash
# The two-node rehearsal: run-transition across two network namespaces ("nodes", 2 processes
# each) joined by a tc-shaped veth link, every destination element verified, placement fixed vs
# auto; prints one row per run with the link-aware lower bound for the measured link and the
# simulator's prediction on the same cluster file (`dynatrain simulate`), with its error.
# Usage: scripts/netns-rehearsal.sh [BUILD=build] [RATE_GBIT=1]
# The default 1 gbit/s (125 MB/s) each way is below what Open MPI's TCP transport reaches over
# the veth on this machine (~270 MiB/s per rank), so tc, not the CPU, sets the link rate.
# Bounded: every command under `timeout`; the namespaces are removed on exit, whatever happens.
# Writes JSON per run under bench/out/netns/. DT_ENGINE_FLAGS (e.g. "--overlap-links off
# --rounds-in-flight 2": the engine's schedule before link classes) goes to run-transition and
# simulate alike. Refreshes bench/results/netns-rehearsal.md (bench/results.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/netns-env.sh
build="${1:-build}"
rate="${2:-1}"
dt="$PWD/$build/dynatrain"
out="$PWD/bench/out/netns"
mkdir -p "$out"
read -r -a engine_flags <<< "${DT_ENGINE_FLAGS:-}"
source bench/results.sh
results_begin netns-rehearsal markdown "$0 $*"
dtc_lock
trap 'scripts/netns-down.sh >/dev/null' EXIT
scripts/netns-up.sh "$rate" 2

dtc_measure_link "$dt" "$out" "$rate"  # DTC_LINK, $DTC_STATE/cluster.json and model.json
echo "link: $(python3 -c "import json,sys; l=json.loads(sys.argv[1]); print(f\"{l['bytes_per_s']/1e9:.2f} GB/s TCP one stream, {l['latency_s']*1e6:.0f} us one way\")" "$DTC_LINK") (tc: ${rate} gbit/s)"
printf '| switch | placement | inter-node | cold | warm (median) | link-aware bound | warm / bound | busiest link | simulated | error | verify |\n|---|---|---|---|---|---|---|---|---|---|---|\n'
row() {  # from to placement
  local name="${1}_${2}_${3}"
  name="${name//[=,]/}"
  "$dt" plan --model "$DTC_STATE/model.json" --from "$1" --to "$2" --cluster "$DTC_STATE/cluster.json" \
    --placement "$3" --json "$out/plan_$name.json" >/dev/null
  timeout 300 scripts/netns-mpirun.sh -np 4 "$dt" run-transition --model "$DTC_STATE/model.json" --from "$1" --to "$2" \
    --gpus-per-node 2 --placement "$3" --verify --repeat 4 "${engine_flags[@]}" --json "$out/rt_$name.json" >"$out/rt_$name.txt" 2>&1 ||
    { echo "run-transition failed:"; cat "$out/rt_$name.txt"; return 1; }
  # The simulator on the same cluster file (the measured link between the "nodes"; CPU sharing
  # not modelled: the 0.1 GB/s link, not the cores, is meant to be the limit).
  timeout 120 "$dt" simulate --cluster "$DTC_STATE/cluster.json" --model "$DTC_STATE/model.json" --from "$1" --to "$2" \
    --placement "$3" "${engine_flags[@]}" --json "$out/sim_$name.json" >"$out/sim_$name.txt"
  python3 - "$out/plan_$name.json" "$out/rt_$name.json" "$out/sim_$name.json" "$1" "$2" "$3" <<'PY'
import json, statistics, sys
p, r, s = (json.load(open(f)) for f in sys.argv[1:4])
lb = p["cluster_lower_bound_seconds"]
warm = statistics.median(r["forward_seconds"][1:])
same = "" if s["bytes_moved"] == r["bytes_moved"] else " (the simulated plan moves other bytes!)"
print(f"| `{sys.argv[4]} -> {sys.argv[5]}` | {sys.argv[6]} | {p['total']['inter_node_bytes']/2**20:.0f} MiB "
      f"| {r['cold_seconds']:.3f} s | {warm:.3f} s | {lb:.3f} s | {warm/lb:.2f} "
      f"| {p['busiest_link']} | {s['predicted_seconds']:.3f} s{same} | {100 * (s['predicted_seconds'] / warm - 1):+.0f} % | {r['verify']} |")
PY
}
for placement in fixed auto; do
  row tp=4 tp=2,dp=2 "$placement"
  row tp=4 pp=2,dp=2 "$placement"
done
row tp=2,dp=2 tp=4 fixed
cp "$DTC_STATE/cluster.json" "$out/cluster.json"
results_end
