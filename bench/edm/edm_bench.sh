#!/usr/bin/env bash
# Trainer switches at GB scale, through `dynatrain train --json` (issue 7's figures):
#   A. 4 processes, llama-style 133M model (2.1 GB of state), tp=2,dp=2 -> pp=2,dp=2, the
#      job's first switch (nothing warmed by an earlier switch);
#      with the default placement (auto) and again with --placement fixed;
#   B. the same model on 2 processes growing to 4 (dp=2 -> tp=2,dp=2: 2 processes spawned);
#   C. A (auto placement) and B again with --align-pages: page-aligned tensors, so kept tensors
#      at a new offset are moved by remapping pages instead of copied (kept / remapped below).
# Prints each switch's pause, its lower bound (bytes that must arrive at the busiest rank /
# bandwidth of the link they took, measured right after the commit in the same run; the
# run-start figure beside it), their ratio, prepare time, hidden share, peak and bound, and
# where the pause went (commit phases). Run under `flock /tmp/dt-bench.lock` on a shared machine.
# Usage: bench/edm/edm_bench.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench-out/edm}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN="$OUT/dynatrain"  # a copy: spawned processes run this file even if the build changes it
cp "$BUILD/dynatrain" "$BIN"
source "$HERE/../../scripts/mpi-env.sh"
MODEL="$HERE/llama-133m.json"
COMMON=(train --model "$MODEL" --global-batch 4 --seq 32 --threads 1 --steps 6 --lookahead 3)

run() {  # NAME NP SCHEDULE [EXTRA ARGS]
  echo "== $1: mpirun -np $2 dynatrain ${COMMON[*]} --schedule \"$3\" ${*:4}"
  mpirun -np "$2" "$BIN" "${COMMON[@]}" --schedule "$3" "${@:4}" --json "$OUT/$1.json" > "$OUT/$1.log" 2>&1 ||
    { tail -20 "$OUT/$1.log"; exit 1; }
  grep '^switch' "$OUT/$1.log"
  # Two lines per switch from the JSON (no JSON tool needed: one field per line).
  awk -F': ' '/"[a-z_0-9]+": [-0-9."]/ {
      k = $1; gsub(/[" ]/, "", k); val = $2; gsub(/[",]/, "", val); sub(/ +$/, "", val); v[k] = val }
    /^    }/ { printf "   placement %s\n", v["placement"]
               printf "   pause %.3f s  lower bound %.3f s  ratio %.2f  transfer %.3f s  prepare %.2f s  hidden %.0f%%  peak/bound %.2f/%.2f GiB  %d MB in at busiest rank, link %.2f GB/s (%s; run-start p2p %.2f GB/s: bound %.3f s), new comms %d\n",
                 v["pause_s"], v["lower_bound_s"], (v["lower_bound_s"] > 0 ? v["pause_s"] / v["lower_bound_s"] : 0),
                 v["transfer_s"], v["prepare_s"], 100 * v["hidden_fraction"], v["peak_bytes"] / 2^30, v["bound_bytes"] / 2^30,
                 v["max_bytes_received"] / 1e6, v["link_bytes_per_s"] / 1e9, v["link_path"], v["p2p_bytes_per_s"] / 1e9,
                 v["lower_bound_run_start_s"], v["comm_creations"]
               printf "   commit phases (max over ranks, s): carry %.3f  engine pack %.3f unpack %.3f keep %.3f wait %.3f alloc %.3f agree %.3f  free %.3f  grads %.3f  views %.3f  (rebuild %.3f)\n",
                 v["carry"], v["engine_pack"], v["engine_unpack"], v["engine_keep"], v["engine_wait"], v["engine_alloc"],
                 v["engine_agree"], v["free"], v["grads"], v["views"], v["rebuild_s"]
               printf "   kept %.0f MB, of which remapped %.0f MB and zero-copy %.0f MB (summed over ranks)\n",
                 v["bytes_kept"] / 1e6, v["kept_remapped_bytes"] / 1e6, v["kept_zero_copy_bytes"] / 1e6 }' "$OUT/$1.json"
}

run switch_4 4 "0:tp=2,dp=2;4:pp=2,dp=2"
run switch_4_fixed 4 "0:tp=2,dp=2;4:pp=2,dp=2" --placement fixed
run grow_2_4 2 "0:dp=2;4:tp=2,dp=2"
run switch_4_aligned 4 "0:tp=2,dp=2;4:pp=2,dp=2" --align-pages
run grow_2_4_aligned 2 "0:dp=2;4:tp=2,dp=2" --align-pages
