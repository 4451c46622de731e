# Sourced by the reliability scripts that run `dynatrain train` on torch.distributed under
# `dynatrain launch` (after script_prelude.sh): run a job in the background, wait for it, find
# its processes by rank, check a line of its output, and check its CSV against an
# uninterrupted run's (tracks_run.py).
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
common=(--model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1)
steps=16  # the next run()'s --steps

launch_flags=()  # flags of `dynatrain launch` for the next run() (e.g. --keep-going)
train_prefix=()  # a command the next run() starts `dynatrain train` through (e.g. one setting DYNATRAIN_NODE)
run() {  # NAME NP SCHEDULE [ENV... --] [TRAIN FLAGS...]: the job in the background, its pid in $job
  local name=$1 np=$2 schedule=$3 env=()
  shift 3
  if [[ " $* " == *" -- "* ]]; then
    while [[ $1 != -- ]]; do env+=("$1"); shift; done
    shift
  fi
  env DT_RENDEZVOUS_S=60 "${env[@]}" timeout 300 "$dt" launch --np "$np" --port 0 "${launch_flags[@]}" -- "${train_prefix[@]}" "$dt" train "${common[@]}" \
    --steps "$steps" --schedule "$schedule" --csv "$tmp/$name.csv" "$@" >"$tmp/$name.log" 2>"$tmp/$name.err" &
  job=$!
}
pids_by_rank() {  # CSV_NAME: "RANK PID" of each process started with a RANK for the job writing CSV_NAME
  local p r
  for p in $(pgrep -f -- "--csv $tmp/$1.csv"); do
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^RANK=//p')
    [[ -n $r && $(cat "/proc/$p/comm" 2>/dev/null) == dynatrain ]] && echo "$r $p"
  done
}
pid_of_rank() {  # CSV_NAME RANK: the pid of the process started with that RANK
  pids_by_rank "$1" | awk -v r="$2" '$1 == r { print $2 }'
}
# expect_line NAME PATTERN WHAT: NAME's stdout has a line matching PATTERN (grep's basic regular
# expression), else its output is shown and the test fails with "NAME: WHAT".
expect_line() {
  grep -q -- "$2" "$tmp/$1.log" || { cat "$tmp/$1.log" "$tmp/$1.err"; fail "$1: $3"; }
}
# check_csv NAME WORLD_SIZES [CONT]: NAME's CSV against CONT's (default: cont), $steps steps;
# WORLD_SIZES is "STEP:N,STEP:N": from STEP on the job has N processes.
check_csv() {
  py "$here/tracks_run.py" "$tmp/${3:-cont}.csv" "$tmp/$1.csv" "$steps" "$2" ||
    { grep -Ev "step +[0-9]+  loss" "$tmp/$1.log" "$tmp/$1.err"; fail "$1: CSV"; }
}
