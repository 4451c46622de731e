#!/usr/bin/env bash
# Starting a c10d world from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as
# torchrun or `dynatrain launch` set them) never waits without a deadline and a line:
#  1. a RANK that names no rank of WORLD_SIZE (5 of 2, "abc"): exit 2 at once, one line;
#  2. a peer that never starts: rank 0 alone, and rank 1 alone, give up after DT_RENDEZVOUS_S
#     with one line naming the rendezvous and the variable (exit 3); a bad DT_RENDEZVOUS_S: exit 2;
#  3. ranks running different commands (train and run-transition): exit 2, rank 0's line names both;
#  4. `dynatrain launch --np 2 -- dynatrain train --np 2` (a supervisor a rank): exit 2, one line.
# Usage: c10d_start_test.sh DYNATRAIN
source "$(dirname "$0")/script_prelude.sh"
port() { PYENV_VERSION=system python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
train=(train --model tiny-dense --data "$data" --steps 2 --global-batch 4 --seq 16 --threads 1)
# expect NAME CODE WANT SECONDS ENV... -- ARGS: exit CODE within SECONDS, a dynatrain line matching WANT
expect() {
  local name=$1 code=$2 want=$3 limit=$4 env=()
  shift 4
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  local t0=$SECONDS
  env "${env[@]}" timeout 120 "$dt" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local got=$? took=$((SECONDS - t0))
  ((got == code)) || { cat "$tmp/$name.err"; fail "$name: exit $got, want $code"; }
  ((took <= limit)) || fail "$name: took $took s, want <= $limit s"
  (($(grep -c "^dynatrain:" "$tmp/$name.err") == 1)) && grep -q -- "$want" "$tmp/$name.err" ||
    { cat "$tmp/$name.err"; fail "$name: no one line matching '$want'"; }
}
expect rank5 2 "RANK=5 is not an integer in \[0, 1\]" 10 RANK=5 WORLD_SIZE=2 MASTER_PORT="$(port)" -- "${train[@]}"
expect rankabc 2 "RANK=abc is not an integer" 10 RANK=abc WORLD_SIZE=2 MASTER_PORT="$(port)" -- "${train[@]}"
echo "ok 1: a bad RANK -> exit 2 at once, one line"
p=$(port)
expect alone0 3 "rank 0 of 2: the rendezvous at 127.0.0.1:$p did not see all 2 ranks .* within 3 s (DT_RENDEZVOUS_S)" 30 \
  RANK=0 WORLD_SIZE=2 MASTER_PORT="$p" DT_RENDEZVOUS_S=3 -- "${train[@]}"
p=$(port)
expect alone1 3 "rank 1 of 2: the rendezvous at 127.0.0.1:$p did not complete with all 2 ranks .* within 3 s (DT_RENDEZVOUS_S)" 30 \
  RANK=1 WORLD_SIZE=2 MASTER_PORT="$p" DT_RENDEZVOUS_S=3 -- "${train[@]}"
expect badwait 2 "DT_RENDEZVOUS_S=soon is not an integer in \[1, 86400\]" 10 \
  RANK=0 WORLD_SIZE=2 MASTER_PORT="$(port)" DT_RENDEZVOUS_S=soon -- "${train[@]}"
echo "ok 2: a peer that never starts -> one line after DT_RENDEZVOUS_S (3 s), on rank 0 and on rank 1"
p=$(port)
RANK=1 WORLD_SIZE=2 MASTER_PORT="$p" DT_RENDEZVOUS_S=60 timeout 120 "$dt" run-transition --model tiny-dense \
  --from dp=2 --to tp=2 >"$tmp/other.out" 2>&1 &
other=$!
expect mixed 2 "rank 0 runs \`train\`, rank 1 runs \`run-transition\`; start every rank with the same command" 60 \
  RANK=0 WORLD_SIZE=2 MASTER_PORT="$p" DT_RENDEZVOUS_S=60 -- "${train[@]}"
wait "$other"
(($? == 2)) || { cat "$tmp/other.out"; fail "mixed: rank 1 did not exit 2"; }
echo "ok 3: train and run-transition in one c10d world -> exit 2, one line naming both"
expect nested 2 "--np starts mpirun itself, but this process is rank 0 of 2 started by dynatrain launch" 30 PATH="$PATH" -- \
  launch --np 2 -- "$dt" "${train[@]}" --np 2
echo "ok 4: dynatrain launch --np 2 -- dynatrain train --np 2 -> exit 2, one line"
