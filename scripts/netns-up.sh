#!/usr/bin/env bash
# Two "nodes" on this machine: two network namespaces joined by a veth pair shaped with tc.
# Usage: scripts/netns-up.sh [RATE_GBIT=8] [SLOTS=2]   (8 gbit = 1 GB/s each way)
# Writes $DTC_STATE/hostfile (one line per node, SLOTS slots) for netns-mpirun.sh. Undo with
# scripts/netns-down.sh. The kernel here has no netem, so no delay is added: the link's own
# latency is measured by netns-rehearsal.sh instead.
set -euo pipefail
source "$(dirname "$0")/netns-env.sh"
rate_gbit="${1:-8}"
slots="${2:-2}"
"$(dirname "$0")/netns-down.sh" >/dev/null 2>&1 || true
mkdir -p "$DTC_STATE"
: >"$DTC_STATE/hostfile"
ip link add dtc-veth0 type veth peer name dtc-veth1
for i in 0 1; do
  ns=$(dtc_ns $i)
  ip netns add "$ns"
  ip link set "dtc-veth$i" netns "$ns"
  ip -n "$ns" addr add "$(dtc_addr $i)/24" dev "dtc-veth$i"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "dtc-veth$i" up
  # Token bucket: RATE each way, a burst of 1 ms at that rate (at least 1 MB), queue up to 50 ms.
  burst_kb=$(( rate_gbit * 1000000 / 8 / 1000 ))
  (( burst_kb < 1024 )) && burst_kb=1024
  tc -n "$ns" qdisc add dev "dtc-veth$i" root tbf rate "${rate_gbit}gbit" burst "${burst_kb}kb" latency 50ms
  echo "$(dtc_addr $i) slots=$slots" >>"$DTC_STATE/hostfile"
done
echo "$rate_gbit" >"$DTC_STATE/rate_gbit"
echo "netns: $(dtc_ns 0) $(dtc_addr 0) <-> $(dtc_ns 1) $(dtc_addr 1), ${rate_gbit} gbit/s each way, $slots slots per node"
