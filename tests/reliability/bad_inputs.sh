#!/usr/bin/env bash
# The bad-input table: every case must end with exit 2, exactly one line on stderr of at most
# 300 characters that names the bad value (the expected substring), nothing on stdout, no hang
# (timeout) and no crash (signal, core dump), under mpirun too (the line printed once, not once
# per rank). Per case, set before `bad`: CODE=N another exit code (3: out of memory), LIMIT_KB=N
# run under `ulimit -v N`, LOUD=1 the command may print on stdout first (a run that fails
# after it started), FAULT=SPEC run with DT_FAULT=SPEC (job/fault_injection.h).
# Usage: bad_inputs.sh DYNATRAIN WITH_TRAIN(0|1) MPIEXEC
# Prints one line per case and a summary: tried / clear errors / hangs / crashes / accepted.
set -u
dt="$1"
with_train="${2:-0}"
mpiexec="${3:-mpirun}"
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ulimit -c 0  # a crash must show as a signal exit, not leave cores behind

# bad NP WANT -- ARGS...: records a case (run below): dynatrain ARGS, under mpirun -np NP when
# NP > 1. Single-process cases run two at a time, mpirun cases (two cores each) one at a time.
bad() {
  local np="$1" want="$2"
  shift 3
  local file="$tmp/single"
  ((np > 1)) && file="$tmp/mpi"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$np" "${CODE:-2}" "${LIMIT_KB:-0}" "${LOUD:-0}" "${FAULT:--}" "$want" \
    "$(printf '%q ' "$@")" >>"$file"
}

# run_case NP CODE LIMIT_KB LOUD FAULT WANT QUOTED_ARGS: prints "VERDICT<TAB>description" (and
# the output on failure).
run_case() {
  local np="$1" code="$2" limit="$3" loud="$4" fault="$5" want="$6" quoted="$7"
  local -a args
  eval "args=($quoted)"
  local cmd=("$dt" "${args[@]}")
  ((np > 1)) && cmd=("$mpiexec" -np "$np" "$dt" "${args[@]}")
  local err out
  err=$(mktemp -p "$tmp") out=$(mktemp -p "$tmp")
  (
    ((limit > 0)) && ulimit -v "$limit"
    [[ $fault != - ]] && export DT_FAULT="$fault"
    exec timeout -k 5 60 "${cmd[@]}" >"$out" 2>"$err" </dev/null
  )
  local got=$? lines longest verdict
  lines=$(wc -l <"$err")
  longest=$(awk '{ if (length($0) > n) n = length($0) } END { print n + 0 }' "$err")
  if ((got == 124 || got == 137)); then verdict=hang
  elif ((got > 128)) || grep -qiE 'core dumped|segmentation|terminate called' "$err"; then verdict=crash
  elif ((got == 0)); then verdict=accepted
  elif ((got == code)) && ((lines == 1)) && ((longest <= 300)) && grep -qF -- "$want" "$err" &&
       { ((loud)) || [[ ! -s $out ]]; }; then verdict=ok
  else verdict=unclear
  fi
  printf '%s\tnp=%s%s dynatrain %s\n' "$verdict" "$np" "${fault/#-/}" "${args[*]}"
  if [[ $verdict != ok ]]; then
    printf '    exit %s (want %s), %s lines on stderr, longest %s characters, %s bytes on stdout, want: %s\n' \
      "$got" "$code" "$lines" "$longest" "$(wc -c <"$out")" "$want"
    sed 's/^/    | /' "$err" | head -5
    ((loud)) || sed 's/^/    > /' "$out" | head -3
  fi
  rm -f "$err" "$out"
}
export -f run_case
export dt mpiexec tmp

source "$here/bad_input_cases.sh"

run_all() {  # run_all CASEFILE PARALLEL
  [[ -f $1 ]] || return 0
  while IFS=$'\t' read -r np code limit loud fault want quoted; do
    printf '%s\0' "$np" "$code" "$limit" "$loud" "$fault" "$want" "$quoted"
  done <"$1" | xargs -0 -n 7 -P "$2" bash -c 'run_case "$@"' _
}
{ run_all "$tmp/single" 2; run_all "$tmp/mpi" 1; } | tee "$tmp/results"
count() { grep -c "^$1"$'\t' "$tmp/results"; }
tried=$(grep -c $'^[a-z]*\t' "$tmp/results")
echo "bad inputs: $tried tried, $(count ok) clear errors, $(count hang) hangs, $(count crash) crashes," \
     "$(count accepted) silently accepted, $(count unclear) unclear"
((tried > 0 && tried == $(count ok)))
