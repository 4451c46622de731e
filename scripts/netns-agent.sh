#!/usr/bin/env bash
# Open MPI's launch agent for the two-node rehearsal (plm_rsh_agent, in place of ssh): called as
# `netns-agent.sh HOST COMMAND...`, runs COMMAND in the namespace of HOST with its own hostname
# (dtc-nodeN), so that shared-memory segment names, which contain the hostname, do not collide
# between the "nodes" (they share /dev/shm).
source "$(dirname "$0")/netns-env.sh"
host="$1"
shift
for (( i = 0; i < DTC_MAX_NODES; ++i )); do
  if [[ $host == "$(dtc_addr $i)" ]]; then
    exec ip netns exec "$(dtc_ns $i)" unshare --uts /bin/sh -c "hostname $(dtc_ns $i) && $*"
  fi
done
echo "netns-agent: unknown host '$host' (known: $(dtc_addr 0) .. $(dtc_addr $((DTC_MAX_NODES - 1))))" >&2
exit 1
