#!/usr/bin/env bash
# `dynatrain train` on torch.distributed recovering a lost process in place (job/lost_peer.h):
# 4 processes under `dynatrain launch --keep-going`, ZeRO 0; one SIGKILLs itself 30 ms into a
# step (DT_FAULT=kill). Per case, REPEAT runs; from the run itself:
#   kill -> met: the stamp the killed process wrote just before its SIGKILL to the first
#     survivor's meeting of the loss (a collective's error, or its step stopped by the loss's
#     mark, which the survivors' loss watches raise when a look at /proc sees a process of their
#     node killed, and the launcher through its pipe as the killed process's exit begins:
#     job/loss_watch.h, job/sibling_loss.h); the "no pipe" cases run the trainer without the
#     launcher's pipe (`env -u DYNATRAIN_LAUNCH_FD`, as under torchrun): the watch's look alone;
#   kill -> resumed: the stamp to the last survivor's state rebuilt (the JSON's wall-clock
#     stamps; the survivors then do the step again; the bound's probe, after it, left out);
#   pause: each survivor's error (the collective that met the loss) to its state rebuilt, the
#     largest; with its parts: agree (through the store; stopped mid-step: the survivors whose
#     compute the loss's mark stopped, job/loss_watch.h), groups (the survivors' world and the
#     new layout's groups), move (the planned switch from the replicas);
#   memory: making resident the memory the rebuild adds to a survivor (from a tp shard to a
#     whole replica: no prepare ran ahead); the machine's rate for fresh memory is measured at
#     the end of the same run;
#   bound: the groups plus the bare exchange of the rebuilt bytes over the survivors' world, as
#     `--json`'s probe measures it right after (the same run); pause / bound, the same without
#     the memory, and without the memory and the agreement (whose time is mostly the wait for
#     the slowest survivor to leave its interrupted compute).
# Cases: the demo's model (tiny-dense, the demo's batch), dp=4 (every survivor holds a whole
# replica: nothing moves) and tp=2,dp=2 (the lost rank's tp peer rebuilds from the other pair);
# and GB scale, the llama-style 133M model in tp=2,dp=2 (1.6 GB of fp32 master and moments a
# replica): the survivors in dp=3 each receive the half of the model they lacked; and the same
# with --recovery-reserve (the memory the rebuild adds kept resident from the start).
# Run under `flock /tmp/dt-bench.lock` on a shared machine.
# Usage: bench/edm/c10d_lost_bench.sh [BUILD_DIR] [OUT_DIR] [REPEAT]
#        (refreshes bench/results/c10d-lost-cli.md)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench-out/c10d-lost}
REPEAT=${3:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN="$BUILD/dynatrain"
source "$HERE/../results.sh"
results_begin c10d-lost-cli markdown "$0 $*"

run_case() {  # NAME RUN MODEL SCHEDULE KILL BATCH SEQ STEPS [TRAIN FLAG]: one run, one table row
  local name=$1 n=$2 model=$3 schedule=$4 kill=$5 batch=$6 seq=$7 steps=$8 base="$OUT/$1-$2" extra=("${@:9}")
  local pipe=()
  [[ $name == *-nopipe ]] && pipe=(env -u DYNATRAIN_LAUNCH_FD)
  rm -f "$base.stamp"
  DT_FAULT=$kill DT_FAULT_STAMP="$base.stamp" "$BIN" launch --np 4 --port 0 --keep-going -- "${pipe[@]}" "$BIN" train \
    --model "$model" --global-batch "$batch" --seq "$seq" --steps "$steps" --threads 1 --schedule "$schedule" \
    --json "$base.json" "${extra[@]}" 2>"$base.err" |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done >"$base.log"
  grep -q " recovery: " "$base.log" || { cat "$base.log" "$base.err"; echo "$name: no recovery"; exit 1; }
  python3 - "$name" "$base" <<'PY'
import json, sys
name, base = sys.argv[1], sys.argv[2]
killed = float(open(base + ".stamp").read())
rec = next(r for r in json.load(open(base + ".json"))["switches"] if "recovery" in r)
r = rec["recovery"]
net = r['pause_s'] - r['memory_s']
print(f"| {name} | {rec['from']} -> {rec['to']} | {r['met_unix_s'] - killed:.3f} | {r['resumed_unix_s'] - killed:.3f} | "
      f"{(r['resumed_unix_s'] - killed) / r['bound_s']:.1f}x | {r['pause_s']:.3f} | {r['agree_s']:.3f} | "
      f"{r.get('stopped_mid_step', 0)} | "
      f"{r['world_s'] + r['groups_s']:.3f} | {r['memory_s']:.3f} ({r['memory_bytes'] / 1e9:.2f} GB) | "
      f"{r['move_s']:.3f} | {rec['max_bytes_received'] / 1e6:.1f} | {rec['exchange_s']:.4f} | {r['bound_s']:.3f} | "
      f"{r['pause_over_bound']:.1f}x | {net / r['bound_s']:.1f}x | {(net - r['agree_s']) / r['bound_s']:.1f}x |")
PY
}

echo "Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| case | recovery | kill -> met s | kill -> resumed s | resumed / bound | pause s | agree s | stopped mid-step | groups s | memory s | move s | MB received (busiest) | bare exchange s | bound s | pause / bound | (pause - memory) / bound | (pause - memory - agree) / bound |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for n in $(seq "$REPEAT"); do
  run_case demo-dp "$n" tiny-dense "0:dp=4,zero=0" kill:2:step:30:5 24 64 8
  run_case demo-dp-nopipe "$n" tiny-dense "0:dp=4,zero=0" kill:2:step:30:5 24 64 8
  run_case demo-tp "$n" tiny-dense "0:tp=2,dp=2,zero=0" kill:3:step:30:5 24 64 8
done
for n in $(seq "$REPEAT"); do
  run_case 133M-dp "$n" "$HERE/llama-133m.json" "0:dp=4,zero=0" kill:3:step:30:2 12 32 4
  run_case 133M-dp-nopipe "$n" "$HERE/llama-133m.json" "0:dp=4,zero=0" kill:3:step:30:2 12 32 4
done
for n in $(seq "$REPEAT"); do
  run_case 133M-tp "$n" "$HERE/llama-133m.json" "0:tp=2,dp=2,zero=0" kill:3:step:30:2 12 32 4
done
for n in $(seq "$REPEAT"); do
  run_case 133M-tp-reserve "$n" "$HERE/llama-133m.json" "0:tp=2,dp=2,zero=0" kill:3:step:30:2 12 32 4 --recovery-reserve
done
echo
# The machine's floor for the memory a rebuild adds: 512 MiB never touched by this process made
# resident as the trainer's pool does (MADV_HUGEPAGE + MADV_POPULATE_WRITE), twice.
python3 - <<'PY'
import mmap, time
n = 512 << 20
rates = []
for _ in range(2):
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    t0 = time.perf_counter()
    m.madvise(14)  # MADV_HUGEPAGE
    m.madvise(23)  # MADV_POPULATE_WRITE
    rates.append(n / (time.perf_counter() - t0) / 1e9)
    m.close()
print(f"Fresh memory made resident (512 MiB, huge pages, same run): {rates[0]:.2f} GB/s the first time, "
      f"{rates[1]:.2f} GB/s again")
PY
echo
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
results_end
