# Sourced by a benchmark script so that running it refreshes its results file,
# bench/results/NAME.md: a header (command, machine, date, commit) and the figures the run
# printed, written between the file's two markers; everything outside them (the title, how to
# read the figures) is kept. The file is written only when the script reaches results_end, so
# a failed or interrupted run leaves the last good figures in place.
#   source "$(dirname "$0")/results.sh"       (the path of this file from the script)
#   results_begin NAME FORMAT "$0 $*"         from here on stdout is also captured;
#                                             FORMAT: markdown (printed verbatim) or text (fenced)
#   ... the benchmark prints its figures ...
#   results_end                               writes bench/results/NAME.md
# DT_RESULTS=0 runs the benchmark without touching its results file (a quick or partial run).

_results_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/results"

results_begin() {  # NAME FORMAT COMMAND...
  _results_name=$1 _results_format=$2
  shift 2
  _results_command=$(echo "$*" | sed 's/ *$//')
  [[ ${DT_RESULTS:-1} == 0 ]] && return 0
  _results_load=$(cut -d' ' -f1-3 /proc/loadavg)
  _results_out=$(mktemp)
  exec {_results_stdout}>&1
  exec > >(tee "$_results_out")
  _results_tee=$!
}

_results_machine() {  # one line: cores, memory, CPU model, GPUs
  local cpu mem gpu
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 2^20}' /proc/meminfo)
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd, - || true)
  echo "$(nproc) cores (${cpu:-unknown CPU}), $mem, ${gpu:-no GPU}; load average at start $_results_load"
}

results_end() {
  [[ ${DT_RESULTS:-1} == 0 ]] && return 0
  exec 1>&"$_results_stdout" {_results_stdout}>&-
  wait "$_results_tee" 2>/dev/null || true
  mkdir -p "$_results_dir"
  local commit
  commit=$(git -C "$_results_dir" describe --always --dirty 2>/dev/null || echo unknown)
  python3 - "$_results_dir/$_results_name.md" "$_results_out" "$_results_format" "$_results_command" \
    "$(_results_machine)" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$commit" <<'PY'
import os, sys
path, out, fmt, command, machine, date, commit = sys.argv[1:]
begin, end = "<!-- results: begin (bench/results.sh writes from here; re-run the command to refresh) -->", "<!-- results: end -->"
figures = open(out).read().rstrip("\n")
if fmt == "text":
    figures = "```text\n" + figures + "\n```"
block = (f"{begin}\n- Command: `{command}`\n- Machine: {machine}\n- Date: {date}\n- Code: commit {commit}\n\n"
         f"{figures}\n{end}")
old = open(path).read() if os.path.exists(path) else f"# {os.path.basename(path)[:-3]}\n\n{begin}\n{end}\n"
if begin not in old or end not in old:
    old = old.rstrip("\n") + f"\n\n{begin}\n{end}\n"
head, rest = old.split(begin, 1)
tail = rest.split(end, 1)[1]
open(path, "w").write(head + block + tail)
PY
  rm -f "$_results_out"
  echo "results: bench/results/$_results_name.md" >&2
}
