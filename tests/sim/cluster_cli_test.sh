#!/usr/bin/env bash
# `plan --cluster`: presets and JSON files give the link-aware bound; bad descriptions are one
# line on stderr and exit 2. Usage: cluster_cli_test.sh DYNATRAIN
set -u
dt="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect <exit code> <text in stdout or stderr> -- args...
  local code="$1" want="$2"
  shift 3
  "$dt" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [[ $got != "$code" ]] || ! grep -qF -- "$want" "$tmp/out" "$tmp/err" ||
     { [[ $code == 2 ]] && [[ $(wc -l <"$tmp/err") != 1 ]]; }; then
    echo "FAIL: dynatrain $* -> exit $got (want $code, '$want')"; cat "$tmp/out" "$tmp/err"; fail=1
  else
    echo "ok: dynatrain $*"
  fi
}
# 4 NICs per node: two GPUs share a NIC, so the NIC is the busiest link.
expect 0 "busiest link node" -- plan --model tiny-dense --from tp=2,pp=2,dp=4 --to tp=2,dp=8 --cluster a800-16x8-4nic \
       --check --json "$tmp/p.json"
grep -q '"cluster_lower_bound_seconds"' "$tmp/p.json" || { echo "FAIL: --json lacks cluster_lower_bound_seconds"; fail=1; }
grep -q '"busiest_link": "node [0-9]* NIC' "$tmp/p.json" || { echo "FAIL: the shared NIC is not the busiest link"; cat "$tmp/p.json"; fail=1; }
expect 0 "cluster this-machine (measured)" -- plan --model tiny-dense --from tp=2 --to dp=2 --cluster this-machine
# A file in the documented format (docs/cluster.md).
cat >"$tmp/two.json" <<'JSON'
{"name": "two-nodes", "nodes": 2, "gpus_per_node": 2, "gpu_link_gb_per_s": 5, "nics_per_node": 1,
 "nic_gb_per_s": 1, "pcie_gb_per_s": 2, "intra_latency_us": 10, "inter_latency_us": 100, "copy_gb_per_s": 10}
JSON
expect 0 "cluster two-nodes ($tmp/two.json): 2 GPUs per node" -- plan --model tiny-dense --from tp=4 --to dp=4 \
       --cluster "$tmp/two.json" --placement auto --check
expect 2 "unknown cluster 'tpu-pod'; valid: a800-16x8" -- plan --model tiny-dense --from tp=2 --to dp=2 --cluster tpu-pod
sed 's/"nic_gb_per_s"/"nic_gbps"/' "$tmp/two.json" >"$tmp/typo.json"
expect 2 "unknown field \"nic_gbps\"" -- plan --model tiny-dense --from tp=2 --to dp=2 --cluster "$tmp/typo.json"
expect 2 "cannot open cluster file" -- plan --model tiny-dense --from tp=2 --to dp=2 --cluster /nonexistent.json
# `simulate`: the engine's schedule through the same cluster; the prediction is never below the
# busiest link's time, and bad flags are one line and exit 2.
expect 0 "predicted_seconds" -- simulate --cluster "$tmp/two.json" --model tiny-moe --from dp=4,ep=2 --to tp=2,dp=2,ep=4 \
       --placement auto --mem-budget 64KiB --json "$tmp/s.json"
python3 - "$tmp/s.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
assert j["predicted_seconds"] >= j["busiest_link_seconds"] > 0, j
assert j["lower_bound_seconds"] > 0 and j["messages"] > 0 and j["critical_link"], j
PY
expect 2 "--placement: best not in {fixed,auto}" -- simulate --cluster a800-16x8 --model tiny-dense \
       --from tp=2 --to dp=2 --placement best
expect 2 "--cpu-cores: -1 is not valid; give 0 (not modelled)" -- simulate --cluster a800-16x8 --model tiny-dense --from tp=2 --to dp=2 --cpu-cores -1
expect 2 "--run-us: -1 is not valid; give 0 (runs free)" -- simulate --cluster a800-16x8 --model tiny-dense --from tp=2 --to dp=2 --run-us -1
# A TP split moves scattered runs (rows of 2 KiB): a cost per run makes the switch slower.
for us in 0 100; do
  expect 0 "predicted_seconds" -- simulate --cluster a800-16x8 --model gpt3-1.3b --from tp=2 --to dp=2 \
         --run-us $us --json "$tmp/runs$us.json"
done
python3 - "$tmp/runs0.json" "$tmp/runs100.json" <<'PY' || fail=1
import json, sys
free, costly = (json.load(open(f)) for f in sys.argv[1:])
assert costly["run_us"] == 100 and costly["predicted_seconds"] > free["predicted_seconds"] + 0.01, (free, costly)
PY
# Fan-out's stages played by the simulator: dp=2 -> dp=4 over the two nodes without ZeRO, the
# new node's two processes need the same boxes: relayed, the NIC carries half, and auto keeps
# the faster (the staged switch here); off plays one stage.
for f in off auto; do
  expect 0 "predicted_seconds" -- simulate --cluster "$tmp/two.json" --model tiny-dense --from dp=2,zero=0 \
         --to dp=4,zero=0 --fanout $f --json "$tmp/fan-$f.json"
done
grep -qF "fan-out auto: 2 stages" "$tmp/out" || { echo "FAIL: simulate --fanout auto did not play 2 stages"; cat "$tmp/out"; fail=1; }
python3 - "$tmp/fan-off.json" "$tmp/fan-auto.json" <<'PY' || fail=1
import json, sys
off, auto = (json.load(open(f)) for f in sys.argv[1:])
assert not off["fanout_applied"] and off["fanout_stages"] == 1, off
assert auto["fanout_applied"] and auto["fanout_stages"] == 2, auto
assert 2 * auto["inter_node_bytes"] == auto["inter_node_bytes_without_fanout"], auto
assert auto["predicted_seconds"] == auto["predicted_with_fanout_seconds"] < auto["predicted_without_fanout_seconds"], auto
assert abs(auto["predicted_without_fanout_seconds"] - off["predicted_seconds"]) < 1e-9, (off, auto)
PY
expect 2 "--fanout" -- simulate --cluster a800-16x8 --model tiny-dense --from tp=2 --to dp=2 --fanout maybe
exit $fail
