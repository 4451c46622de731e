#!/usr/bin/env bash
# Why the trainer's switches at GB scale run several times their bare exchange: two effects,
# measured on the engine alone (run-transition of bench/edm/llama-133m.json, tp=2,dp=2 ->
# pp=2,dp=2 at zero=1, 4 processes, grads zero at the step boundary as in the trainer):
#   1. bucket size: the trainer's default ZeRO bucket (32768 elements) makes the zero=1 state
#      thousands of flat buffers of 128 KiB (the pool carves them out of slabs of 2 MiB pages;
#      before, each was a mapping of its own in 4 KiB pages); Megatron's 40M elements makes
#      large buffers in 2 MiB pages of their own;
#   2. decay over repeated switches: each switch's commit moves spare pages into the new
#      buffers with mremap, which splits 2 MiB pages whose runs are not moved whole, so the
#      state's share in huge pages falls and its mappings multiply switch after switch.
# For each bucket size: every switch's time (forward and back), the plain exchange of the same
# bytes, and rank 0's mappings and AnonHugePages sampled while it runs; then the trainer itself
# (train --bucket-elems) at both sizes, pause against its bare exchange.
# Usage: bench/edm/huge_page_decay.sh [BUILD_DIR] [OUT_DIR] [REPEAT]   (refreshes bench/results/huge-page-decay.md)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench-out/huge-page-decay}
REPEAT=${3:-6}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
source "$HERE/../../scripts/mpi-env.sh"
source "$HERE/../results.sh"
results_begin huge-page-decay text "$0 $*"
for bucket in 32768 40000000; do
  json="$OUT/rt-$bucket.json"
  mpirun -np 4 "$BUILD/dynatrain" run-transition --model "$HERE/llama-133m.json" --from tp=2,dp=2,zero=1 \
    --to pp=2,dp=2,zero=1 --bucket-elems "$bucket" --at-step-boundary --repeat "$REPEAT" --verify \
    --json "$json" > "$OUT/rt-$bucket.log" 2>&1 &
  job=$!
  : > "$OUT/samples-$bucket.txt"
  while kill -0 "$job" 2>/dev/null; do  # rank 0: the oldest dynatrain process under mpirun
    p=$(pgrep -o -P "$job" -x dynatrain || true)
    if [[ -n $p ]] && maps=$(wc -l < "/proc/$p/maps" 2>/dev/null) &&
       huge=$(awk '/AnonHugePages/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null); then
      echo "$maps $huge" >> "$OUT/samples-$bucket.txt"
    fi
    sleep 0.5
  done
  wait "$job" || { tail -20 "$OUT/rt-$bucket.log"; exit 1; }
  grep -q "^verify: ok" "$OUT/rt-$bucket.log" || { tail -20 "$OUT/rt-$bucket.log"; exit 1; }
  python3 - "$json" "$OUT/samples-$bucket.txt" "$bucket" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
samples = [tuple(map(int, line.split())) for line in open(sys.argv[2]) if line.strip()]
exch = j["plain_exchange_seconds"]
fw, back = j["forward_seconds"], j["back_seconds"]
print(f"bucket {int(sys.argv[3]):,} elements: plain exchange {exch:.3f} s, lower bound {j['lower_bound_seconds']:.3f} s, "
      f"state in huge pages at the end {100 * j['huge_page_share']:.0f} %")
print("  switch  forward s  / exchange   back s")
for k, s in enumerate(fw):
    b = f"{back[k - 1]:.3f}" if k >= 1 and k - 1 < len(back) else "-"
    print(f"  {k + 1:6d}  {s:9.3f}  {s / exch:10.1f}   {b}")
if samples:
    peak = max(samples, key=lambda m: m[1])
    print(f"  rank 0 while it ran: mappings {samples[0][0]} -> {samples[-1][0]}; AnonHugePages peak {peak[1] / 1024:.0f} MiB"
          f" -> {samples[-1][1] / 1024:.0f} MiB at the end")
PY
done
# The trainer on the same model and switch, back and forth (tp=2,dp=2 -> pp=2,dp=2 before step 3,
# back before 5, again before 7), at both bucket sizes: its pause against the bare exchange of
# the commit's own bytes measured right after it.
for bucket in 32768 40000000; do
  mpirun -np 4 "$BUILD/dynatrain" train --model "$HERE/llama-133m.json" --global-batch 4 --seq 32 --threads 1 \
    --bucket-elems "$bucket" --steps 9 --lookahead 1 --schedule "0:tp=2,dp=2;3:pp=2,dp=2;5:tp=2,dp=2;7:pp=2,dp=2" \
    --json "$OUT/train-$bucket.json" > "$OUT/train-$bucket.log" 2>&1 || { tail -20 "$OUT/train-$bucket.log"; exit 1; }
  python3 - "$OUT/train-$bucket.json" "$bucket" <<'PY'
import json, sys
print(f"trainer, bucket {int(sys.argv[2]):,} elements: switch before step / pause s / bare exchange s / ratio / "
      "run-start lower bound s / ratio / keep, wait s")
for s in json.load(open(sys.argv[1]))["switches"]:
    ph = s["commit_phases_s"]
    lb = s["lower_bound_run_start_s"]
    print(f"  {s['step']:2d}  {s['pause_s']:.3f}  {s['exchange_s']:.3f}  {s['pause_s'] / s['exchange_s']:5.1f}x"
          f"  {lb:.3f}  {s['pause_s'] / lb:5.2f}x  {ph['engine_keep']:.3f}, {ph['engine_wait']:.3f}")
PY
done
uptime
results_end
