#!/usr/bin/env bash
# python_netns_lost_node: a whole node lost from an adopted job on torch.distributed, two
# "nodes" in network namespaces (netns_lost_node.py). Skips (exit 77) where namespaces cannot be
# made (not root, no iproute2). Usage: netns_lost_node_test.sh DYNATRAIN PYTHON
set -u
dt="$1"
py="$2"
scripts="$(cd "$(dirname "$0")/../../scripts" && pwd)"
export DTC_STATE
DTC_STATE=$(mktemp -d)
source "$scripts/netns-env.sh"
dtc_test_nodes 8 2
"$py" "$(dirname "$0")/netns_lost_node.py" "$dt"
