#!/usr/bin/env bash
# mpirun across the two rehearsal "nodes" (scripts/netns-up.sh first): started inside node 0,
# remote daemons started in node 1 by netns-agent.sh, ranks filled node by node (slots from
# the hostfile), TCP between nodes, shared memory inside one. 4 MiB socket buffers: with the
# defaults Open MPI's TCP transport reached only ~100 MiB/s per rank over the veth here.
# Usage: scripts/netns-mpirun.sh -np N PROGRAM ARGS...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/netns-env.sh"
source "$here/mpi-env.sh"
[[ -f $DTC_STATE/hostfile ]] || { echo "netns-mpirun: run scripts/netns-up.sh first" >&2; exit 2; }
exec ip netns exec "$(dtc_ns 0)" unshare --uts /bin/sh -c "hostname $(dtc_ns 0) && exec \"\$@\"" sh \
  mpirun --hostfile "$DTC_STATE/hostfile" --mca plm_rsh_agent "$here/netns-agent.sh" \
  --mca btl self,vader,tcp --mca btl_tcp_if_include "$DTC_NET.0/24" --mca oob_tcp_if_include "$DTC_NET.0/24" \
  --mca btl_tcp_sndbuf 4194304 --mca btl_tcp_rcvbuf 4194304 "$@"
