# Sourced by the reliability scripts that run `dynatrain train` on torch.distributed across the
# two rehearsal nodes (after script_prelude.sh and c10d_job.sh): brings the nodes up (8 gbit/s,
# 2 slots each; skips with exit 77 where namespaces cannot be made) with their state in $tmp,
# and takes them down at exit. $scripts: the repository's scripts/.
scripts="$(cd "$here/../../scripts" && pwd)"
export DTC_STATE="$tmp/dtc"
mkdir -p "$DTC_STATE"
source "$scripts/netns-env.sh"
dtc_test_nodes 8 2
trap '"$scripts/netns-down.sh" >/dev/null; rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
