#!/usr/bin/env bash
# The same layout switch over the c10d (Gloo) transport and over MPI, same run, 2 and 4 processes:
#   bench/c10d_vs_mpi.sh [BUILD_DIR] [REPEAT] [ROUNDS]   writes bench/results/c10d_vs_mpi.md
# Each row runs `dynatrain run-transition ... --repeat REPEAT --verify` under mpirun and under
# `dynatrain launch` (RANK, WORLD_SIZE, ...: the c10d world), alternately, ROUNDS times (default
# 3), and compares the medians over rounds of the warm switch time (the mean over repeats after
# the first, as run-transition reports it). Gloo has no direct runs,
# so the c10d run packs every scattered message; its share of unpacked bytes is 0 %.
# Run it under `flock /tmp/dt-bench.lock` on a shared machine.
set -euo pipefail
build=${1:-build}
repeat=${2:-3}
rounds=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
exe="$build/dynatrain"
[[ -x "$exe" ]] || { echo "no $exe; build the dynatrain target first" >&2; exit 2; }
source "$here/../scripts/mpi-env.sh"
out="$here/results/c10d_vs_mpi.md"
mkdir -p "$here/results"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

rows() {  # NP|model dir|from|to
  cat <<ROWS
2|gqa-2gb|tp=2,dp=1|tp=1,dp=2
4|bench-dense|tp=2,dp=2|tp=4
ROWS
}

{
  echo "# The same switch over c10d (Gloo) and over MPI"
  echo
  echo "Command: \`bench/c10d_vs_mpi.sh $build $repeat $rounds\` (under \`flock /tmp/dt-bench.lock\`)  "
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem/{print $2}') GiB; shared (load average at start: $(cut -d' ' -f1-3 /proc/loadavg))  "
  echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Each switch: \`run-transition --mem-budget 256MiB --bucket-elems 4000000 --repeat $repeat --verify\`, every element verified, MPI and c10d alternately, $rounds rounds; warm = the median over rounds of the warm switch time run-transition reports (per round: the rounds' values in brackets)."
  echo
  echo "| ranks | model | switch | GB into one rank (max) | MPI warm s | c10d warm s | c10d / MPI | unpacked sent MPI / c10d |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$out"
while IFS='|' read -r np model from to; do
  args=(run-transition --model "$here/models/$model/config.json" --from "$from" --to "$to"
        --mem-budget 256MiB --bucket-elems 4000000 --repeat "$repeat" --verify)
  for round in $(seq "$rounds"); do
    timeout 900 mpirun -np "$np" "$exe" "${args[@]}" --json "$tmp/mpi.$round.json" > "$tmp/mpi.txt" < /dev/null
    timeout 900 "$exe" launch --np "$np" -- "$exe" "${args[@]}" --json "$tmp/c10d.$round.json" > "$tmp/c10d.txt" < /dev/null
  done
  python3 - "$np" "$model" "$from -> $to" "$tmp" "$rounds" >> "$out" <<'PY'
import json, statistics, sys
np_, model, switch, tmp, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
load = lambda kind: [json.load(open(f"{tmp}/{kind}.{r}.json")) for r in range(1, rounds + 1)]
m, c = load("mpi"), load("c10d")
for j in m + c: assert j["verify"] == "ok", "verification failed"
assert all(j["backend"] == "mpi" for j in m) and all(j["backend"] == "c10d" for j in c)
warm = lambda js: statistics.median(j["warm_seconds"] for j in js)
each = lambda js: ", ".join(f'{j["warm_seconds"]:.2f}' for j in js)
share = lambda j: f'{100 * j["bytes_sent_direct"] / j["bytes_moved"]:.0f} %' if j["bytes_moved"] else "-"
print(f'| {np_} | {model} | {switch} | {m[0]["max_rank_bytes_received"] / 1e9:.2f} | {warm(m):.3f} ({each(m)}) '
      f'| {warm(c):.3f} ({each(c)}) | {warm(c) / warm(m):.2f} | {share(m[0])} / {share(c[0])} |')
PY
done < <(rows)
cat >> "$out" <<'TXT'

How to read: c10d / MPI below 1 means the c10d run was faster. "unpacked sent" is the share of
moved bytes sent without packing: under MPI every scattered chunk goes by cross-memory attach
(direct runs); Gloo has none, so c10d sends unpacked only chunks of one contiguous piece and
packs the rest. Both transports move the bytes through one host's memory here (MPI: shared
memory and process_vm_readv/writev; c10d: loopback TCP), and the machine is shared with other
jobs, so single rounds vary by up to 4x; compare the medians, and rerun for a quiet machine.
TXT
cat "$out"
