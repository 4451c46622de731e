#!/usr/bin/env bash
# Two "nodes" on this machine: two network namespaces joined by a veth pair shaped with tc.
# Usage: scripts/netns-up.sh [RATE_GBIT=8] [SLOTS=2] [NODES=2]   (8 gbit = 1 GB/s each way)
# NODES 3-4: each node's veth ends in a bridge inside a namespace of its own (dtc-hub), shaped
# on both ends, so every node has RATE in and RATE out (its "NIC"), as across a switch.
# Writes $DTC_STATE/hostfile (one line per node, SLOTS slots) for netns-mpirun.sh. Undo with
# scripts/netns-down.sh. The kernel here has no netem, so no delay is added: the link's own
# latency is measured by netns-rehearsal.sh instead.
set -euo pipefail
source "$(dirname "$0")/netns-env.sh"
rate_gbit="${1:-8}"
slots="${2:-2}"
nodes="${3:-2}"
(( nodes >= 2 && nodes <= DTC_MAX_NODES )) || { echo "netns-up: NODES $nodes is not 2..$DTC_MAX_NODES" >&2; exit 2; }
"$(dirname "$0")/netns-down.sh" >/dev/null 2>&1 || true
mkdir -p "$DTC_STATE"
: >"$DTC_STATE/hostfile"
# Token bucket: RATE each way, a burst of 1 ms at that rate (at least 1 MB), queue up to 50 ms.
burst_kb=$(( rate_gbit * 1000000 / 8 / 1000 ))
(( burst_kb < 1024 )) && burst_kb=1024
shape() { tc -n "$1" qdisc add dev "$2" root tbf rate "${rate_gbit}gbit" burst "${burst_kb}kb" latency 50ms; }
if (( nodes == 2 )); then
  ip link add dtc-veth0 type veth peer name dtc-veth1
else
  ip netns add "$DTC_HUB"
  ip -n "$DTC_HUB" link add dtc-br type bridge
  ip -n "$DTC_HUB" link set dtc-br up
fi
for (( i = 0; i < nodes; ++i )); do
  ns=$(dtc_ns $i)
  ip netns add "$ns"
  if (( nodes > 2 )); then
    ip link add "dtc-veth$i" type veth peer name "dtc-port$i"
    ip link set "dtc-port$i" netns "$DTC_HUB"
    ip -n "$DTC_HUB" link set "dtc-port$i" master dtc-br
    ip -n "$DTC_HUB" link set "dtc-port$i" up
    shape "$DTC_HUB" "dtc-port$i"  # into node i
  fi
  ip link set "dtc-veth$i" netns "$ns"
  ip -n "$ns" addr add "$(dtc_addr $i)/24" dev "dtc-veth$i"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "dtc-veth$i" up
  shape "$ns" "dtc-veth$i"  # out of node i
  echo "$(dtc_addr $i) slots=$slots" >>"$DTC_STATE/hostfile"
done
echo "$rate_gbit" >"$DTC_STATE/rate_gbit"
echo "netns: $nodes nodes $(dtc_ns 0) $(dtc_addr 0) .. $(dtc_ns $((nodes - 1))) $(dtc_addr $((nodes - 1))), ${rate_gbit} gbit/s each way, $slots slots per node"
