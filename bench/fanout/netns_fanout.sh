#!/usr/bin/env bash
# Node-level fan-out in measured seconds: DP grows across the rehearsal's "nodes" (network
# namespaces, a tc-shaped veth per node: scripts/netns-up.sh), each run with --fanout off and
# --fanout auto, every destination element verified. Prints one row per run: bytes across nodes,
# cold and warm seconds, and the link's own time for those bytes.
#   NODES=2 (default): two nodes of 2 processes, relay groups inside nodes (dp=2 -> dp=4).
#   NODES=4: four nodes of 1 process joined by a bridge, one replica feeding three nodes
#            (dp=1 -> dp=4): a tree across nodes (the busiest sender's bytes over the link is
#            what the tree cuts).
# Usage: bench/fanout/netns_fanout.sh [BUILD=build] [RATE_GBIT=1] [NODES=2]
# Run it alone (flock /tmp/dt-bench.lock ...): the namespaces and $DTC_STATE are shared with
# scripts/netns-rehearsal.sh. Bounded: every command under `timeout`; namespaces removed on exit.
# Writes JSON per run under bench/out/fanout/. DT_ENGINE_FLAGS (e.g. "--overlap-links off
# --rounds-in-flight 2") goes to every run-transition. Refreshes bench/results/fanout-netns-NODES.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/netns-env.sh
build="${1:-build}"
rate="${2:-1}"
nodes="${3:-2}"
slots=$(( nodes == 2 ? 2 : 1 ))
source bench/results.sh
results_begin "fanout-netns-$nodes" markdown "$0 $*"
dt="$PWD/$build/dynatrain"
out="$PWD/bench/out/fanout"
mkdir -p "$out"
read -r -a engine_flags <<< "${DT_ENGINE_FLAGS:-}"
dtc_lock
trap 'scripts/netns-down.sh >/dev/null' EXIT
scripts/netns-up.sh "$rate" "$slots" "$nodes" >/dev/null

dtc_measure_link "$dt" "$out" "$rate"  # DTC_LINK, $DTC_STATE/cluster.json and model.json
link_bps=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['bytes_per_s'])" "$DTC_LINK")
echo "link: $(python3 -c "print(f'{$link_bps/1e9:.3f}')") GB/s TCP one stream (tc: ${rate} gbit/s)"
printf '| switch | fan-out | stages | inter-node | cold | warm | of which later stages (warm, after the last stage 1) | inter-node bytes / link | busiest sender / link | verify |\n|---|---|---|---|---|---|---|---|---|---|\n'
row() {  # from to fanout
  local name="${1}_${2}_${3}"
  name="${name//[=,]/}"
  timeout 300 scripts/netns-mpirun.sh -np $((nodes * slots)) "$dt" run-transition --model "$DTC_STATE/model.json" \
    --from "$1" --to "$2" --gpus-per-node "$slots" --fanout "$3" --fanout-cluster "$DTC_STATE/cluster.json" --verify --repeat 3 "${engine_flags[@]}" --json "$out/rt_$name.json" >"$out/rt_$name.txt" 2>&1 ||
    { echo "run-transition failed:"; cat "$out/rt_$name.txt"; return 1; }
  python3 - "$out/rt_$name.json" "$1" "$2" "$3" "$link_bps" <<'PY'
import json, sys
r, bps = json.load(open(sys.argv[1])), float(sys.argv[5])
applied = " (relayed)" if r["fanout_applied"] and not r["fanout_tree_groups"] else " (tree)" if r["fanout_applied"] else ""
warm1 = r["fanout_stage1_seconds"][1:]
stage2 = f"{r['warm_seconds'] - sum(warm1) / len(warm1):.3f} s" if r["fanout_applied"] else "-"
print(f"| `{sys.argv[2]} -> {sys.argv[3]}` | {sys.argv[4]}{applied} | {r['fanout_stages']} | {r['inter_node_bytes']/2**20:.0f} MiB "
      f"| {r['cold_seconds']:.3f} s | {r['warm_seconds']:.3f} s | {stage2} | {r['inter_node_bytes']/bps:.3f} s "
      f"| {r['inter_node_max_send_bytes']/bps:.3f} s | {r['verify']} |")
PY
}
switches=("dp=2 dp=4" "dp=2,zero=0 dp=4,zero=0")
if (( nodes > 2 )); then switches=("dp=1 dp=$nodes" "dp=1,zero=0 dp=$nodes,zero=0"); fi
for sw in "${switches[@]}"; do
  for mode in off auto off auto; do
    row $sw "$mode"
  done
done
results_end
