#!/usr/bin/env bash
# Checkpoint-restart against the online switch of the same job, restart included: the trainer
# with the 133M model of bench_ckpt (bench/edm/llama-133m.json, --bf16: 2.1 GB of param, grad,
# master and Adam state) on 4 processes, switching tp=2,dp=2 -> tp=4.
#   online    one job switches before step 3 (prepared ahead, as `train` does): its pause
#             (`pause_s` of `train --json`, the time training stops)
#   restart   the job saves at step 2 (the trainer's own "saved checkpoint ... in S s") and a new
#             `mpirun -np 4 dynatrain train --resume` starts in tp=4: seconds from launching
#             mpirun to the "resumed from" line (MPI start, libtorch, the trainer's groups and
#             state, the load; the weight init of loaded kinds is skipped), and to the end of
#             its first step in the new layout
# The whole script runs under flock /tmp/dt-bench.lock (it takes the lock itself).
#   bench/run_restart_bench.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
if [[ -z ${DT_BENCH_LOCKED:-} ]]; then DT_BENCH_LOCKED=1 exec flock /tmp/dt-bench.lock "$0" "$@"; fi
BUILD=${1:-build}
OUT=${2:-bench-out/restart}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../scripts/mpi-env.sh"
source "$HERE/results.sh"  # refreshes bench/results/restart.md
results_begin restart text "$0 $*"
mkdir -p "$OUT"
rm -f "$OUT/restart.log"
CK="${DT_CKPT_DIR:-/tmp}/dt-restart-bench-$$"
trap 'rm -rf "$CK"' EXIT
COMMON=(train --model "$HERE/edm/llama-133m.json" --bf16 --global-batch 4 --seq 32 --threads 1)
now() { date +%s.%N; }

# Online: the switch of a running job, prepared ahead, paused at the step boundary.
mpirun -np 4 "$BUILD/dynatrain" "${COMMON[@]}" --steps 4 --lookahead 1 --schedule "0:tp=2,dp=2;3:tp=4" \
  --json "$OUT/online.json" > "$OUT/online.log" 2>&1 || { tail -20 "$OUT/online.log"; exit 1; }
pause=$(grep -o '"pause_s": [0-9.e+-]*' "$OUT/online.json" | head -1 | awk '{print $2}')

# Checkpoint-restart: save at step 2, then a new job resumes in tp=4 and takes one step.
mpirun -np 4 "$BUILD/dynatrain" "${COMMON[@]}" --steps 2 --schedule "0:tp=2,dp=2" --save "$CK" --save-every 2 \
  > "$OUT/save.log" 2>&1 || { tail -20 "$OUT/save.log"; exit 1; }
save=$(grep -o 'saved checkpoint of step 2 .* in [0-9.]* s' "$OUT/save.log" | awk '{print $(NF-1)}')
t0=$(now)
ready="" first=""
while IFS= read -r line; do
  echo "$line" >> "$OUT/restart.log"
  [[ -z $ready && $line == resumed\ from* ]] && ready=$(echo "$(now) - $t0" | bc -l)
  [[ -z $first && $line =~ step\ +[0-9]+\ +loss ]] && first=$(echo "$(now) - $t0" | bc -l)
done < <(mpirun -np 4 "$BUILD/dynatrain" "${COMMON[@]}" --steps 3 --schedule "0:tp=4" --resume "$CK" 2>&1)
total=$(echo "$(now) - $t0" | bc -l)
[[ -n $ready && -n $first ]] || { echo "no resume or step line in $OUT/restart.log" >&2; tail -20 "$OUT/restart.log"; exit 1; }
load=$(grep -o 'resumed from .*: step 2, [0-9.]* s' "$OUT/restart.log" | awk '{print $(NF-1)}')
step=$(grep -oE 'step +[0-9]+ +loss .* [0-9.]+ ms' "$OUT/restart.log" | head -1 | awk '{print $(NF-1)}')
printf 'online switch tp=2,dp=2 -> tp=4 (train --json pause_s): %.3f s\n' "$pause"
printf 'save (trainer, step 2): %.3f s\n' "$save"
printf 'restart (mpirun -np 4 train --resume, tp=4): ready to step %.3f s (load %.3f s of it), first step done %.3f s (the step %.3f s), exit %.3f s\n' \
  "$ready" "$load" "$first" "$(echo "$step / 1000" | bc -l)" "$total"
printf 'checkpoint-restart / online: save + restart to ready %.3f s = %.1fx; to the end of the first step, minus the step %.3f s = %.1fx\n' \
  "$(echo "$save + $ready" | bc -l)" "$(echo "($save + $ready) / $pause" | bc -l)" \
  "$(echo "$save + $first - $step / 1000" | bc -l)" "$(echo "($save + $first - $step / 1000) / $pause" | bc -l)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
results_end
