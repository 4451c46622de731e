#!/usr/bin/env bash
# Removes the rehearsal's namespaces (the veth pairs and the bridge go with them) and its state.
source "$(dirname "$0")/netns-env.sh"
for (( i = 0; i < DTC_MAX_NODES; ++i )); do ip netns del "$(dtc_ns $i)" 2>/dev/null; done
ip netns del "$DTC_HUB" 2>/dev/null  # the bridge of 3-4 nodes, and its ports
ip link del dtc-veth0 2>/dev/null
rm -rf "$DTC_STATE"
echo "netns: removed"
