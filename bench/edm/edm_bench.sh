#!/usr/bin/env bash
# Trainer switches at GB scale, through `dynatrain train --json`:
#   A. 4 processes, llama-style 133M model (2.1 GB of state), tp=2,dp=2 -> pp=2,dp=2 and back
#      and again: the job's first switch (cold: nothing warmed by an earlier switch), the way
#      back, and the same switch repeated (warm: communicators, worlds and pool pages reused);
#      with the defaults (placement auto, page-aligned tensors: kept tensors at a new offset are
#      remapped instead of copied), with --placement fixed and with --no-align-pages (packed);
#   B. the same model on 2 processes growing to 4 (dp=2 -> tp=2,dp=2: 2 processes spawned);
#   D. the same model on 2 processes, tp=2 -> pp=2 and back and again: one process a core on
#      this 2-core machine, where A's four processes share two;
#   C. run-transition on the same model and switch (same bucket size; its params are 2-byte,
#      the trainer's 4-byte, so it moves fewer bytes): the engine alone, cold and warm.
# Prints each switch's pause and three floors measured in the same run: the bare exchange of
# the switch's own bytes with the same peers and chunks right after its commit (exchange_s:
# the floor on these processes as loaded then), the bound from the all-pairs point-to-point
# rate at the run's start (run-transition's LB), and the bound from one link measured after
# the commit with the other processes idle; where the training thread's time in the commit went
# (on a core, runnable without one, asleep) and its CPU in the exchange; prepare, hidden share,
# peak and bound; where the pause went (commit phases).
# Run under `flock /tmp/dt-bench.lock` on a shared machine.
# Usage: bench/edm/edm_bench.sh [BUILD_DIR] [OUT_DIR]   (refreshes bench/results/edm-gb-scale.md)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench-out/edm}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN="$OUT/dynatrain"  # a copy: spawned processes run this file even if the build changes it
cp "$BUILD/dynatrain" "$BUILD/dynatrain-torch" "$OUT/"  # the front and the trainer it hands train to
source "$HERE/../../scripts/mpi-env.sh"
source "$HERE/../results.sh"
results_begin edm-gb-scale text "$0 $*"
MODEL="$HERE/llama-133m.json"
COMMON=(train --model "$MODEL" --global-batch 4 --seq 32 --threads 1)
BACK_AND_FORTH=(--steps 9 --lookahead 1 --schedule "0:tp=2,dp=2;3:pp=2,dp=2;5:tp=2,dp=2;7:pp=2,dp=2")
GROW=(--steps 6 --lookahead 3 --schedule "0:dp=2;4:tp=2,dp=2")
TWO=(--steps 9 --lookahead 1 --schedule "0:tp=2;3:pp=2;5:tp=2;7:pp=2")

run() {  # NAME NP ARGS...
  echo "== $1: mpirun -np $2 dynatrain ${COMMON[*]} ${*:3}"
  mpirun -np "$2" "$BIN" "${COMMON[@]}" "${@:3}" --json "$OUT/$1.json" > "$OUT/$1.log" 2>&1 ||
    { tail -20 "$OUT/$1.log"; exit 1; }
  grep '^switch' "$OUT/$1.log"
  # Two lines per switch from the JSON (no JSON tool needed: one field per line).
  awk -F': ' '/"[a-z_0-9]+": [-0-9."]/ {
      k = $1; gsub(/[" ]/, "", k); val = $2; gsub(/[",]/, "", val); sub(/ +$/, "", val); v[k] = val }
    /^    }/ { printf "   before step %d: placement %s\n", v["step"], v["placement"]
               printf "   pause %.3f s  lower bound %.3f s  ratio %.2f  transfer %.3f s  prepare %.2f s  hidden %.0f%%  peak/bound %.2f/%.2f GiB  %d MB in at busiest rank, link %.2f GB/s (%s; run-start p2p %.2f GB/s: bound %.3f s), new comms %d\n",
                 v["pause_s"], v["lower_bound_s"], (v["lower_bound_s"] > 0 ? v["pause_s"] / v["lower_bound_s"] : 0),
                 v["transfer_s"], v["prepare_s"], 100 * v["hidden_fraction"], v["peak_bytes"] / 2^30, v["bound_bytes"] / 2^30,
                 v["max_bytes_received"] / 1e6, v["link_bytes_per_s"] / 1e9, v["link_path"], v["p2p_bytes_per_s"] / 1e9,
                 v["lower_bound_run_start_s"], v["comm_creations"]
               printf "   bare exchange of the same bytes and pairs %.3f s: pause / exchange %.2f; commit starts spread %.4f s\n",
                 v["exchange_s"], (v["exchange_s"] > 0 ? v["pause_s"] / v["exchange_s"] : 0), v["start_spread_s"]
               printf "   training thread in the commit (max over ranks): on a core %.3f s, runnable without a core %.3f s, asleep %.3f s (%d involuntary, %d voluntary switches); in one bare exchange on a core %.3f s; other threads %.3f s\n",
                 v["commit_thread_s"], v["runqueue_s"], v["asleep_s"], v["involuntary_switches"], v["voluntary_switches"],
                 v["exchange_thread_s"], v["other_threads_s"]
               printf "   commit phases (max over ranks, s): carry %.3f  engine pack %.3f unpack %.3f keep %.3f wait %.3f alloc %.3f agree %.3f  free %.3f  grads %.3f  views %.3f  (rebuild %.3f)\n",
                 v["carry"], v["engine_pack"], v["engine_unpack"], v["engine_keep"], v["engine_wait"], v["engine_alloc"],
                 v["engine_agree"], v["free"], v["grads"], v["views"], v["rebuild_s"]
               printf "   kept %.0f MB, of which remapped %.0f MB and zero-copy %.0f MB (summed over ranks)\n",
                 v["bytes_kept"] / 1e6, v["kept_remapped_bytes"] / 1e6, v["kept_zero_copy_bytes"] / 1e6 }' "$OUT/$1.json"
}

uptime
run switch_4 4 "${BACK_AND_FORTH[@]}"
run switch_4_fixed 4 "${BACK_AND_FORTH[@]}" --placement fixed
run switch_4_packed 4 "${BACK_AND_FORTH[@]}" --no-align-pages
run grow_2_4 2 "${GROW[@]}"
run switch_2 2 "${TWO[@]}"
echo "== run_transition: mpirun -np 4 dynatrain run-transition (same model and switch, engine alone)"
mpirun -np 4 "$BIN" run-transition --model "$MODEL" --from tp=2,dp=2 --to pp=2,dp=2 --bucket-elems 32768 \
  --at-step-boundary --prefault --repeat 3 --json "$OUT/run_transition.json" > "$OUT/run_transition.log" 2>&1 ||
  { tail -20 "$OUT/run_transition.log"; exit 1; }
grep -E "^  (seconds|warm seconds|bytes_moved|p2p|lower_bound|plain|ratio|phases)" "$OUT/run_transition.log"
uptime
results_end
