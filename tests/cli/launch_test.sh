#!/usr/bin/env bash
# `dynatrain launch`, end to end without mpirun: switches over the c10d world it starts (every
# element verified), a failing rank's exit code, and bad input (one line, exit 2).
#   launch_test.sh DYNATRAIN
set -u
exe=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset OMPI_COMM_WORLD_RANK RANK WORLD_SIZE MASTER_ADDR MASTER_PORT

check() {  # NAME WANT_RC CMD... : the exit code, and for rc 2 exactly one line on stderr
  local name=$1 want=$2
  shift 2
  timeout 300 "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, want $want"; cat "$tmp/out" "$tmp/err"; fail=1; return
  fi
  if [[ $want -eq 2 && $(wc -l < "$tmp/err") -ne 1 ]]; then
    echo "FAIL $name: want one line on stderr, got:"; cat "$tmp/err"; fail=1; return
  fi
  echo "ok   $name"
}

for np in 2 4; do
  check "launch np$np tp=2 -> dp=2" 0 "$exe" launch --np "$np" -- "$exe" run-transition --model tiny-dense \
    --from tp=2 --to dp=2 --verify --json "$tmp/np$np.json"
  grep -q '"backend": *"c10d"' "$tmp/np$np.json" || { echo "FAIL np$np: not the c10d transport"; fail=1; }
  grep -q '"verify": *"ok"' "$tmp/np$np.json" || { echo "FAIL np$np: not verified"; fail=1; }
  grep -q "direct runs          none on the c10d transport" "$tmp/out" || { echo "FAIL np$np: no packed-runs line"; cat "$tmp/out"; fail=1; }
done
check "launch np4 tp=2,dp=2 -> pp=2,dp=2" 0 "$exe" launch --np 4 -- "$exe" run-transition --model tiny-dense \
  --from tp=2,dp=2 --to pp=2,dp=2 --verify
check "launch np2 train tp=2 -> dp=2" 0 "$exe" launch --np 2 -- "$exe" train --model tiny-dense --steps 4 \
  --global-batch 4 --seq 32 --schedule "0:tp=2;2:dp=2"
grep -q "switch before step 2: tp=2,pp=1,dp=1,zero=1 -> tp=1,pp=1,dp=2,zero=1" "$tmp/out" || { echo "FAIL train: no switch"; cat "$tmp/out"; fail=1; }
# A rank that fails: the launcher ends the others and exits with that code.
check "first non-zero exit code" 3 "$exe" launch --np 2 -- sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 30'
# Ending a rank ends what it started (its process group): no sleep of that rank is left.
check "ended with its children" 143 "$exe" launch --np 2 -- sh -c 'if [ "$RANK" = 1 ]; then kill -TERM $$; fi; sleep 31; true'
sleep 0.5
if pgrep -f "^sleep 31$" > /dev/null; then echo "FAIL a rank's child outlived the launch"; fail=1; fi
check "variables set" 0 "$exe" launch --np 2 --port 29577 -- sh -c \
  'test "$WORLD_SIZE" = 2 -a "$LOCAL_WORLD_SIZE" = 2 -a "$RANK" = "$LOCAL_RANK" -a "$MASTER_ADDR" = 127.0.0.1 -a "$MASTER_PORT" = 29577'
check "variables of node 1 of 2" 0 "$exe" launch --nnodes 2 --node-rank 1 --master-addr 10.0.0.9 --np 2 -- sh -c \
  'test "$WORLD_SIZE" = 4 -a "$LOCAL_WORLD_SIZE" = 2 -a "$RANK" = $((LOCAL_RANK + 2)) -a "$GROUP_RANK" = 1 -a "$NODE_RANK" = 1 -a "$MASTER_ADDR" = 10.0.0.9 -a "$MASTER_PORT" = 29500'
check "every rank of a node killed" 137 "$exe" launch --keep-going --np 2 -- sh -c 'kill -KILL $$'
check "node rank out of range" 2 "$exe" launch --nnodes 2 --node-rank 2 --master-addr h0 --np 2 -- true
grep -q -- "--node-rank 2 is out of range for --nnodes 2; valid: 0..1" "$tmp/err" || { echo "FAIL node rank message"; cat "$tmp/err"; fail=1; }
check "nodes without a master address" 2 "$exe" launch --nnodes 2 --np 2 -- true
check "nodes with --port" 2 "$exe" launch --nnodes 2 --master-addr h0 --port 5 --np 2 -- true
check "nnodes 0" 2 "$exe" launch --nnodes 0 --np 2 -- true
check "master port 0" 2 "$exe" launch --master-port 0 --np 2 -- true
check "np 0" 2 "$exe" launch --np 0 -- true
check "no command" 2 "$exe" launch --np 2
python3 -c 'import socket,time,sys; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)' > "$tmp/port" &
holder=$!
for _ in $(seq 50); do [[ -s "$tmp/port" ]] && break; sleep 0.1; done
check "port in use" 2 "$exe" launch --np 2 --port "$(cat "$tmp/port")" -- true
kill "$holder"
exit $fail
