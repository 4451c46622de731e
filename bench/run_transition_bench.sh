#!/usr/bin/env bash
# Runs the transition benchmarks and prints Markdown tables.
#   bench/run_transition_bench.sh [BUILD_DIR] [--quick]   bench_transition at 4 and 8 ranks:
#       DynaTrain vs naive in-memory vs checkpoint-restart (needs the bench_transition target)
#   bench/run_transition_bench.sh [BUILD_DIR] --engine    the engine table of the README: every
#       row one `dynatrain run-transition` (needs the dynatrain target), see engine_table below
# BUILD_DIR defaults to ./build. Needs a few GB of free memory per run (8 ranks: ~10 GB peak).
# Run it under `flock /tmp/dt-bench.lock` on a shared machine. Refreshes bench/results/
# transition-engine.md (--engine) or transition-baselines.md (bench/results.sh; not with --quick).
set -euo pipefail
build=${1:-build}
shift || true
here=$(cd "$(dirname "$0")" && pwd)
source "$here/results.sh"
[[ " $* " == *" --quick "* ]] && export DT_RESULTS=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# One row per switch: NP|label|model dir|from|to. Each row runs twice, both with --align-pages
# (tensors start on page boundaries, so kept tensors at new offsets are remapped, not copied):
#   1. --mem-budget 256MiB --bucket-elems 4M (as bench_transition) --prefault --repeat 4 --verify:
#      cold (after prefault) and warm times against the lower bound measured in the same run,
#      the warm phase split (max over ranks), the share of moved bytes sent unpacked / received
#      unpacked (direct runs), the plain exchange of the same bytes (the link alone, same run)
#      and the warm time against it, and the share of kept bytes not copied (buffers handed over
#      + pages remapped; the remapped part in parentheses);
#   2. --mem-budget 8MiB with Megatron's 40M-element buckets --verify: peak vs its bound.
engine_rows() {
  cat <<ROWS
4|TP tp=2,dp=2 -> tp=4|bench-dense|tp=2,dp=2|tp=4
4|PP pp=2,dp=2 -> pp=4|bench-dense|pp=2,dp=2|pp=4
4|DP dp=4 -> dp=2 (shrink)|bench-dense|dp=4|dp=2
4|DP dp=4,zero=0 -> dp=2,zero=0|bench-dense|dp=4,zero=0|dp=2,zero=0
4|EP dp=4,ep=2 -> ep=4 (MoE)|bench-moe|dp=4,ep=2|dp=4,ep=4
4|ZeRO tp=2,dp=2,zero=1 -> zero=3|bench-dense|tp=2,dp=2,zero=1|tp=2,dp=2,zero=3
4|hybrid tp=2,dp=2 -> tp=2,pp=2|bench-dense|tp=2,dp=2|tp=2,pp=2
2|GQA tp=2,dp=1 -> tp=1,dp=2 (2.1 GB)|gqa-2gb|tp=2,dp=1|tp=1,dp=2
ROWS
}

engine_table() {
  local exe="$build/dynatrain" tmp
  [[ -x "$exe" ]] || { echo "no $exe; build the dynatrain target first" >&2; exit 2; }
  tmp=$(mktemp -d)
  echo "| ranks | switch | max in per rank | LB s | cold s (prefaulted) | cold / LB | prepare s | warm s | warm / LB | plain exchange s | warm / exchange | warm phases keep / pack / wait / unpack / alloc s | moved unpacked: sent / received | kept not copied (remapped) | peak / bound at 8 MiB, 40M buckets |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  while IFS='|' read -r np label model from to; do
    mpirun -np "$np" "$exe" run-transition --model "$here/models/$model/config.json" --from "$from" --to "$to" \
      --mem-budget 256MiB --bucket-elems 4000000 --align-pages --prefault --repeat 4 --verify --json "$tmp/a.json" > "$tmp/a.txt" < /dev/null
    mpirun -np "$np" "$exe" run-transition --model "$here/models/$model/config.json" --from "$from" --to "$to" \
      --mem-budget 8MiB --align-pages --verify --json "$tmp/b.json" > "$tmp/b.txt" < /dev/null
    python3 - "$np" "$label" "$tmp/a.json" "$tmp/b.json" <<'PY'
import json, sys
np_, label, a, b = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
assert a["verify"] == "ok" and b["verify"] == "ok", "verification failed"
lb = a["lower_bound_seconds"]
ratio = lambda s: f"{s / lb:.2f}" if lb > 0 else "-"
ph = a["warm_phases"]
kept = a["bytes_kept"]
not_copied = f'{100 * a["kept_not_copied_share"]:.0f} % ({100 * a["kept_remapped_bytes"] / kept:.0f} %)' if kept else "-"
gib = 1024 ** 3
ex = a["plain_exchange_seconds"]
moved = a["bytes_moved"]
per_ex = f'{a["warm_seconds"] / ex:.2f}' if moved and ex > 0 else "-"
unpacked = f'{100 * a["bytes_sent_direct"] / moved:.0f} % / {100 * a["bytes_received_direct"] / moved:.0f} %' if moved else "-"
peak = f'{b["peak_bytes"] / gib:.3f} / {(max(b["max_src_bytes"], b["max_dst_bytes"]) + b["budget_bytes"]) / gib:.3f} GiB'
print(f'| {np_} | {label} | {a["max_rank_bytes_received"] / 1e9:.2f} GB | {lb:.3f} | {a["cold_seconds"]:.3f} | {ratio(a["cold_seconds"])} '
      f'| {a["prepare_seconds"]:.2f} | {a["warm_seconds"]:.3f} | {ratio(a["warm_seconds"])} '
      f'| {ex:.3f} | {per_ex} '
      f'| {ph["keep"]:.3f} / {ph["pack"]:.3f} / {ph["wait"]:.3f} / {ph["unpack"]:.3f} / {ph["alloc"]:.3f} '
      f'| {unpacked} | {not_copied} | {peak} ({"yes" if b["peak_within_bound"] else "NO"}) |')
PY
  done < <(engine_rows)
  rm -rf "$tmp"
}

if [[ "${1:-}" == "--engine" ]]; then
  results_begin transition-engine markdown "$0 $build $*"
  engine_table
  results_end
  exit 0
fi
exe="$build/bench_transition"
[[ -x "$exe" ]] || { echo "no $exe; build the bench_transition target first" >&2; exit 2; }
results_begin transition-baselines markdown "$0 $build $*"
for np in 4 8; do
  mpirun -np "$np" "$exe" "$@"
done
results_end
