#!/usr/bin/env bash
# Removes the two-node rehearsal's namespaces (the veth pair goes with them) and its state.
source "$(dirname "$0")/netns-env.sh"
for i in 0 1; do ip netns del "$(dtc_ns $i)" 2>/dev/null; done
ip link del dtc-veth0 2>/dev/null
rm -rf "$DTC_STATE"
echo "netns: removed"
