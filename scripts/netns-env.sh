# Sourced by the netns-* scripts: the names and addresses of the two-node rehearsal, all inside
# network namespaces of our own (nothing outside them is touched or reachable).
#   node i = namespace dtc-node$i, address 10.231.0.$((i+1)) on one end of the veth pair
#   dtc-veth0 <-> dtc-veth1; the link is shaped with tc (tbf) on both ends.
DTC_NODES=2
DTC_NET=10.231.0
DTC_STATE=${DTC_STATE:-/tmp/dtc-netns}  # hostfile, cluster.json, link measurement
dtc_ns() { echo "dtc-node$1"; }
dtc_addr() { echo "$DTC_NET.$(($1 + 1))"; }
