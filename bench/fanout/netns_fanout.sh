#!/usr/bin/env bash
# Node-level fan-out in measured seconds: DP grows across the two-node rehearsal (two network
# namespaces, 2 processes each, a tc-shaped veth between them: scripts/netns-up.sh), each run
# with --fanout off and --fanout auto, every destination element verified. Prints one row per
# run: bytes across nodes, cold and warm seconds, and the link's own time for those bytes.
# Usage: bench/fanout/netns_fanout.sh [BUILD=build] [RATE_GBIT=1]
# Run it alone (flock /tmp/dt-bench.lock ...): the namespaces and $DTC_STATE are shared with
# scripts/netns-rehearsal.sh. Bounded: every command under `timeout`; namespaces removed on exit.
# Writes JSON per run under bench/out/fanout/.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/netns-env.sh
build="${1:-build}"
rate="${2:-1}"
dt="$PWD/$build/dynatrain"
out="$PWD/bench/out/fanout"
mkdir -p "$out"
trap 'scripts/netns-down.sh >/dev/null' EXIT
scripts/netns-up.sh "$rate" 2 >/dev/null

# The link as MPI sees it: TCP throughput of one stream (scripts/netns-link.py).
timeout 60 ip netns exec "$(dtc_ns 1)" python3 scripts/netns-link.py server "$(dtc_addr 1)" 5801 &
link=$(timeout 60 ip netns exec "$(dtc_ns 0)" python3 scripts/netns-link.py client "$(dtc_addr 1)" 5801 $((rate * 100 << 20)))
wait
link_bps=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['bytes_per_s'])" "$link")
echo "link: $(python3 -c "print(f'{$link_bps/1e9:.3f}')") GB/s TCP one stream (tc: ${rate} gbit/s); shared, loaded 2-core machine"
# The cluster --fanout auto prices: 2 nodes x 2 processes sharing one "NIC" (the veth at the
# measured rate), this machine's intra-node link and copy rate (as netns-rehearsal.sh writes it).
"$dt" plan --model tiny-dense --from tp=1 --to tp=1 --cluster this-machine --json "$out/here.json" >/dev/null
python3 - "$link" "$out/here.json" >"$DTC_STATE/cluster.json" <<'PY'
import json, sys
link, here = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))["cluster"]
gbps = link["bytes_per_s"] / 1e9
print(json.dumps({"name": "netns-2x2", "nodes": 2, "gpus_per_node": 2,
                  "gpu_link_gb_per_s": here["gpu_link_gb_per_s"], "nics_per_node": 1,
                  "nic_gb_per_s": gbps, "pcie_gb_per_s": gbps, "intra_latency_us": here["intra_latency_us"],
                  "inter_latency_us": link["latency_s"] * 1e6, "copy_gb_per_s": here["copy_gb_per_s"]}))
PY

# ~400 MB of state (bf16 weights + grads, fp32 optimizer): 25M parameters (as netns-rehearsal.sh).
cat >"$DTC_STATE/model.json" <<'JSON'
{"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
 "intermediate_size": 2048, "vocab_size": 8000, "tie_word_embeddings": false}
JSON
printf '| switch | fan-out | inter-node | cold | warm | of which stage 2 (warm, after the last stage 1) | inter-node bytes / link | verify |\n|---|---|---|---|---|---|---|---|\n'
row() {  # from to fanout
  local name="${1}_${2}_${3}"
  name="${name//[=,]/}"
  timeout 300 scripts/netns-mpirun.sh -np 4 "$dt" run-transition --model "$DTC_STATE/model.json" --from "$1" --to "$2" \
    --gpus-per-node 2 --fanout "$3" --fanout-cluster "$DTC_STATE/cluster.json" --verify --repeat 3 --json "$out/rt_$name.json" >"$out/rt_$name.txt" 2>&1 ||
    { echo "run-transition failed:"; cat "$out/rt_$name.txt"; return 1; }
  python3 - "$out/rt_$name.json" "$1" "$2" "$3" "$link_bps" <<'PY'
import json, sys
r, bps = json.load(open(sys.argv[1])), float(sys.argv[5])
applied = " (relayed)" if r["fanout_applied"] else ""
warm1 = r["fanout_stage1_seconds"][1:]
stage2 = f"{r['warm_seconds'] - sum(warm1) / len(warm1):.3f} s" if r["fanout_applied"] else "-"
print(f"| `{sys.argv[2]} -> {sys.argv[3]}` | {sys.argv[4]}{applied} | {r['inter_node_bytes']/2**20:.0f} MiB "
      f"| {r['cold_seconds']:.3f} s | {r['warm_seconds']:.3f} s | {stage2} | {r['inter_node_bytes']/bps:.3f} s | {r['verify']} |")
PY
}
for sw in "dp=2 dp=4" "dp=2,zero=0 dp=4,zero=0"; do
  for mode in off auto off auto; do
    row $sw "$mode"
  done
done
