#!/usr/bin/env bash
# `train --bf16` against fp32 on the llama-style 133M model (bench/edm/llama-133m.json,
# 2.1 GB of param + master + Adam state), in one run of this script:
#   A. step time on one process (dp=1, static): the bf16 matmuls against fp32 ones;
#   B. the same switch on 4 processes, tp=2,dp=2 -> pp=2,dp=2 before step 4 (prepared 3 steps
#      ahead, the job's first switch), in fp32 and in --bf16: bytes moved, pause, step time.
# The runs alternate fp32 / bf16 and each pair runs twice, so that a load change on a shared
# machine shows as a spread, not as a bf16 effect. Run under `flock /tmp/dt-bench.lock`.
# Usage: bench/bf16/bf16_bench.sh [BUILD_DIR] [OUT_DIR]   (refreshes bench/results/bf16.md)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench-out/bf16}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
BIN="$OUT/dynatrain"
cp "$BUILD/dynatrain" "$BUILD/dynatrain-torch" "$OUT/"  # the front and the trainer it hands train to
source "$HERE/../../scripts/mpi-env.sh"
source "$HERE/../results.sh"
results_begin bf16 text "$0 $*"
COMMON=(train --model "$HERE/../edm/llama-133m.json" --global-batch 4 --seq 32 --threads 1)

field() {  # JSON FIELD: the first number of "FIELD": in the file
  grep -o "\"$2\": [-0-9.e+]*" "$1" | head -1 | awk '{print $2}'
}

echo "== A. step time, one process, dp=1 (tokens/s over steps 1..5; step 0 warms up)"
for round in 1 2; do
  for prec in fp32 bf16; do
    flag=(); [[ $prec == bf16 ]] && flag=(--bf16)
    mpirun -np 1 "$BIN" "${COMMON[@]}" --steps 6 --schedule "0:dp=1" "${flag[@]}" > "$OUT/step_${prec}_$round.log" 2>&1 ||
      { tail -20 "$OUT/step_${prec}_$round.log"; exit 1; }
    printf '   %s round %d: %s; %s\n' "$prec" "$round" \
      "$(grep -o '[0-9]* tok/s over [0-9]* steps' "$OUT/step_${prec}_$round.log" | head -1)" \
      "$(grep '^state:' "$OUT/step_${prec}_$round.log" | cut -d' ' -f2-5)"
  done
done

echo "== B. switch tp=2,dp=2 -> pp=2,dp=2 on 4 processes"
for round in 1 2; do
  for prec in fp32 bf16; do
    flag=(); [[ $prec == bf16 ]] && flag=(--bf16)
    name="switch_${prec}_$round"
    mpirun -np 4 "$BIN" "${COMMON[@]}" --steps 6 --lookahead 3 --schedule "0:tp=2,dp=2;4:pp=2,dp=2" "${flag[@]}" \
      --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1 || { tail -20 "$OUT/$name.log"; exit 1; }
    j="$OUT/$name.json"
    awk -v p="$prec" -v r="$round" -v sent="$(field "$j" bytes_sent)" -v busiest="$(field "$j" max_bytes_received)" \
        -v pause="$(field "$j" pause_s)" -v lb="$(field "$j" lower_bound_s)" -v kept="$(field "$j" bytes_kept)" \
        -v peak="$(field "$j" peak_bytes)" -v bound="$(field "$j" bound_bytes)" \
        'BEGIN { printf "   %s round %d: sent %.0f MB (busiest rank in %.0f MB), kept %.0f MB, pause %.3f s, lower bound %.3f s, pool peak / bound %.2f / %.2f GiB\n",
                 p, r, sent / 1e6, busiest / 1e6, kept / 1e6, pause, lb, peak / 2^30, bound / 2^30 }'
    grep -E '^  (tp|pp)=.* tok/s' "$OUT/$name.log" | sed 's/^/      /'
  done
done
results_end
