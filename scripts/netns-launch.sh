#!/usr/bin/env bash
# `dynatrain launch` as node R of the rehearsal (scripts/netns-up.sh first): inside namespace
# dtc-nodeR with the hostname dtc-nodeR (a UTS namespace of its own, as netns-mpirun.sh), Gloo
# on the node's veth (GLOO_SOCKET_IFNAME: the hostname resolves to no address), node 0's
# address as MASTER_ADDR and the hostfile's node count as --nnodes. Run it once per node with
# the same flags; each node's launch starts its --np processes (torchrun's variables).
# Usage: scripts/netns-launch.sh R DYNATRAIN LAUNCH_FLAGS... -- CMD ARGS...
#   e.g. scripts/netns-launch.sh 1 build/dynatrain --np 2 --master-port 29511 --keep-going -- python3 job.py
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/netns-env.sh"
[[ -f $DTC_STATE/hostfile ]] || { echo "netns-launch: run scripts/netns-up.sh first" >&2; exit 2; }
nodes=$(wc -l <"$DTC_STATE/hostfile")
node=${1:?usage: netns-launch.sh R DYNATRAIN LAUNCH_FLAGS... -- CMD ARGS...}
dt=${2:?usage: netns-launch.sh R DYNATRAIN LAUNCH_FLAGS... -- CMD ARGS...}
shift 2
[[ $node =~ ^[0-9]+$ ]] && (( node < nodes )) || { echo "netns-launch: node '$node' is not 0..$((nodes - 1))" >&2; exit 2; }
exec ip netns exec "$(dtc_ns "$node")" unshare --uts /bin/sh -c "hostname $(dtc_ns "$node") && exec \"\$@\"" sh \
  env GLOO_SOCKET_IFNAME="dtc-veth$node" "$dt" launch --nnodes "$nodes" --node-rank "$node" \
  --master-addr "$(dtc_addr 0)" "$@"
