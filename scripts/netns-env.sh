# Sourced by the netns-* scripts: the names and addresses of the two-node rehearsal, all inside
# network namespaces of our own (nothing outside them is touched or reachable).
#   node i = namespace dtc-node$i, address 10.231.0.$((i+1)) on one end of the veth pair
#   dtc-veth0 <-> dtc-veth1; the link is shaped with tc (tbf) on both ends.
DTC_NODES=2
DTC_MAX_NODES=4   # netns-up.sh NODES 3-4: the nodes' veths meet in a bridge in namespace DTC_HUB
DTC_HUB=dtc-hub
DTC_NET=10.231.0
DTC_STATE=${DTC_STATE:-/tmp/dtc-netns}  # hostfile, cluster.json, link measurement
# The namespaces and their addresses are one per machine: every user (the rehearsal, the
# fan-out bench, the ctest sim_netns_two_nodes) holds this lock from before netns-up.sh until it
# exits, so two of them never tear down each other's nodes. Order: take /tmp/dt-bench.lock first
# (benchmarks), this one second.
dtc_lock() { exec 9>/tmp/dt-netns.lock && flock 9; }
dtc_ns() { echo "dtc-node$1"; }
# Whether a namespace, a veth pair and a tc qdisc can be made here (root, iproute2, veth, tbf):
# the tests skip (exit 77) where they cannot. Leaves nothing behind.
dtc_can_make_nodes() {
  local ok=1
  [[ $(id -u) == 0 ]] && command -v ip >/dev/null && command -v tc >/dev/null && command -v unshare >/dev/null &&
    ip netns add dtc-probe 2>/dev/null && ip link add dtc-probe0 type veth peer name dtc-probe1 2>/dev/null &&
    tc qdisc add dev dtc-probe0 root tbf rate 1gbit burst 1mb latency 50ms 2>/dev/null && ok=0
  ip link del dtc-probe0 2>/dev/null
  ip netns del dtc-probe 2>/dev/null
  return $ok
}
dtc_addr() { echo "$DTC_NET.$(($1 + 1))"; }
# For a test: takes the lock, skips the test (exit 77, one line) where nodes cannot be made,
# brings the nodes up (dtc_test_nodes GBIT NODES, netns-up.sh's arguments) and takes them down
# when the test's shell exits.
dtc_test_nodes() {
  local dir
  dir="$(dirname "${BASH_SOURCE[0]}")"
  dtc_lock  # a rehearsal or bench using the namespaces finishes first
  if ! dtc_can_make_nodes; then
    echo "skip: cannot create network namespaces, veth pairs or tc qdiscs here"; exit 77
  fi
  trap "\"$dir/netns-down.sh\" >/dev/null" EXIT  # $dir expanded now: it is local
  "$dir/netns-up.sh" "$@" || exit 1
}

# The link as MPI sees it and the files both rehearsals run on (call after netns-up.sh):
# measures TCP throughput of one stream and one-way latency across the veth into DTC_LINK (the
# JSON of scripts/netns-link.py), then writes $DTC_STATE/cluster.json (2 nodes x 2 processes
# sharing one "NIC": the veth at the measured rate; this machine's intra-node link and copy rate,
# sim/cluster.h this-machine) and $DTC_STATE/model.json (~400 MB of state: bf16 weights + grads,
# fp32 optimizer, 25M parameters). Usage: dtc_measure_link DYNATRAIN SCRATCH_DIR RATE_GBIT
dtc_measure_link() {
  local dt="$1" scratch="$2" rate="$3"
  timeout 60 ip netns exec "$(dtc_ns 1)" python3 scripts/netns-link.py server "$(dtc_addr 1)" 5801 &
  DTC_LINK=$(timeout 60 ip netns exec "$(dtc_ns 0)" python3 scripts/netns-link.py client "$(dtc_addr 1)" 5801 $((rate * 100 << 20)))
  wait
  "$dt" plan --model tiny-dense --from tp=1 --to tp=1 --cluster this-machine --json "$scratch/here.json" >/dev/null
  python3 - "$DTC_LINK" "$scratch/here.json" >"$DTC_STATE/cluster.json" <<'PY'
import json, sys
link, here = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))["cluster"]
gbps = link["bytes_per_s"] / 1e9
print(json.dumps({"name": "netns-2x2", "nodes": 2, "gpus_per_node": 2,
                  "gpu_link_gb_per_s": here["gpu_link_gb_per_s"], "nics_per_node": 1,
                  "nic_gb_per_s": gbps, "pcie_gb_per_s": gbps, "intra_latency_us": here["intra_latency_us"],
                  "inter_latency_us": link["latency_s"] * 1e6, "copy_gb_per_s": here["copy_gb_per_s"]}))
PY
  cat >"$DTC_STATE/model.json" <<'JSON'
{"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
 "intermediate_size": 2048, "vocab_size": 8000, "tie_word_embeddings": false}
JSON
}
