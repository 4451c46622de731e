#!/usr/bin/env bash
# A job's files (the memory copy, --save, the CSV, --job DIR with its lock and requests) belong
# to one live job (job/attempt_processes.h, job/supervisor_job_dir.h, job/job_status.h):
#  1. SIGKILL of the job's mpirun under `train --np 4 --max-restarts 2 --redundancy 1`: the
#     workers it leaves running are ended before the restart, which resumes the step it names;
#     every step once in the CSV, losses equal the uninterrupted run's;
#  2. the copy on a tmpfs with room for its two copies only: the restarted job does not count
#     the copy it restarts from against itself (needs a mount namespace: root);
#  3. a request accepted before a process is lost is carried into the restarted attempt and
#     committed there; `request --wait` answers exit 0;
#  4. a request to a job whose leader was SIGKILLed a moment ago is refused (exit 2), and a
#     request left queued by a dead job is refused by the next job in DIR, never run; a second
#     job is refused a directory whose job.lock was removed under a live job;
#  5. a rank file replaced by a FIFO is refused on resume (exit 2, one line), not waited on;
#  6. SIGKILL of the supervisor: its job ends, and the next supervisor removes the copy it left;
#  7. --redundancy under a plain mpirun with DT_MEMORY_COPY_DIR set by hand: refused;
#  8. the job directory's file system full: the job says so once on stderr and goes on;
#     `request` names the running process and the full file system, not a dead job;
#  9. a grow asked for by `request` under `train --np 2 --job DIR` beyond this machine's cores
#     (without the test environment's oversubscribe setting): committed, not refused for slots.
# Usage: job_files_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
common=(--model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1)
export DT_MEMORY_COPY_ROOT="$tmp/shm"
mkdir -p "$DT_MEMORY_COPY_ROOT"

timeout 300 "$mpiexec" -np 4 "$dt" train "${common[@]}" --steps 40 --schedule "0:tp=2,dp=2" --csv "$tmp/continuous.csv" \
  >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; fail "continuous run"; }

# check_csv NAME STEPS: every step once, every loss equal the continuous run's within 1e-4.
check_csv() {
  py - "$tmp/continuous.csv" "$tmp/$1.csv" "$2" <<'PY' || fail "$1: CSV"
import csv, sys
cont = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))}
rows = list(csv.DictReader(open(sys.argv[2])))
steps = [int(r["step"]) for r in rows]
assert steps == list(range(int(sys.argv[3]))), f"steps {steps}"
for r in rows:
    s, loss = int(r["step"]), float(r["loss"])
    assert abs(loss - cont[s]) / cont[s] < 1e-4, f"step {s}: loss {loss} vs continuous {cont[s]}"
PY
}
# wait_for PATTERN FILE: until FILE has a line matching PATTERN (at most 120 s).
wait_for() {
  for _ in $(seq 1 6000); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.02; done
  fail "no line matching '$1' in $2"
}
lock_pid() { sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$1/job.lock"; }

# supervise NAME [TRAIN ARGS...]: a supervised 40-step job in the background ($job: its pid).
supervise() {
  local name=$1
  shift
  "$dt" train --max-restarts 2 --np 4 --mpirun "$mpiexec" "${common[@]}" --steps 40 --schedule "0:tp=2,dp=2" \
    --save "$tmp/$name.ck" --save-every 4 --csv "$tmp/$name.csv" "$@" >"$tmp/$name.log" 2>"$tmp/$name.err" &
  job=$!
}
# finished NAME: the supervised job exits 0 within 300 s.
finished() {
  local code
  for _ in $(seq 1 3000); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  wait "$job"
  code=$?
  ((code == 0)) || { cat "$tmp/$1.log" "$tmp/$1.err"; fail "$1: exit $code"; }
}

# 1. mpirun SIGKILLed after step 5: its workers are ended before the restart.
supervise orphans --redundancy 1
wait_for "step  *5  loss" "$tmp/orphans.log"
kill -KILL "$(pgrep -P "$job" | head -1)"
finished orphans
grep -q "^supervise: mpirun ended with exit 137 leaving [1-9][0-9]* processes of the job running (pids [0-9 ]*); ended them$" \
  "$tmp/orphans.log" || { cat "$tmp/orphans.log"; fail "orphans: no line for the workers mpirun left"; }
for pid in $(sed -n 's/.*(pids \([0-9 ]*\)); ended them$/\1/p' "$tmp/orphans.log"); do
  ! kill -0 "$pid" 2>/dev/null || fail "orphans: worker $pid of the killed mpirun still runs"
done
from=$(sed -n 's/^supervise: the job ended .* restart 1 of 2 from step \([0-9]*\) .*/\1/p' "$tmp/orphans.log")
[[ -n $from ]] && grep -q "^resumed from .*: step $from," "$tmp/orphans.log" ||
  { cat "$tmp/orphans.log"; fail "orphans: the restart did not resume the step it named ($from)"; }
check_csv orphans 40
echo "ok 1: mpirun SIGKILLed -> its workers ended, restart resumed step $from as announced, every step once"

# 2. The copy on a tmpfs with room for its two copies (2 x 2.1 MiB) and less than four.
if unshare -m true 2>/dev/null; then
  rm -rf "$tmp/small" && mkdir -p "$tmp/small"
  DT_FAULT=kill:1:step:0:6 DT_FAULT_STAMP="$tmp/room.stamp" unshare -m bash -c '
    mount -t tmpfs -o size=6m tmpfs "$0" && DT_MEMORY_COPY_ROOT="$0" exec "$@"' "$tmp/small" \
    "$dt" train --max-restarts 1 --np 4 --mpirun "$mpiexec" "${common[@]}" --steps 14 --schedule "0:tp=2,dp=2" \
    --save "$tmp/room.ck" --save-every 4 --redundancy 1 >"$tmp/room.log" 2>&1
  code=$?
  ((code == 0)) || { cat "$tmp/room.log"; fail "room: exit $code"; }
  grep -q "^supervise: .*restart 1 of 1 from step 6 (0 steps lost) on 3 processes .*, from the memory copy$" "$tmp/room.log" ||
    { cat "$tmp/room.log"; fail "room: no restart from the memory copy"; }
  echo "ok 2: a tmpfs with room for two copies -> the restarted job reuses the copy's room"
else
  echo "skip 2: no mount namespace here (unshare -m needs root)"
fi

# 3. A request accepted before the loss is committed by the restarted attempt.
mkdir -p "$tmp/job3"
supervise carried --redundancy 1 --job "$tmp/job3"
wait_for '"health"' "$tmp/job3/status.json"
"$dt" request --job "$tmp/job3" --to tp=1,pp=1,dp=2 --at-step 36 --wait --timeout 300 >"$tmp/carried.out" 2>&1 &
req=$!
wait_for "accepted, switch to tp=1,pp=1,dp=2,zero=1 before step 36" "$tmp/carried.out"
leader=$(lock_pid "$tmp/job3")
worker=$(pgrep -P "$(ps -o ppid= -p "$leader" | tr -d ' ')" | grep -vx "$leader" | head -1)  # not the leader
[[ -n $worker ]] || fail "carried: no worker found beside the leader $leader"
kill -KILL "$worker"
finished carried
wait "$req"
code=$?
((code == 0)) || { cat "$tmp/carried.out" "$tmp/carried.log"; fail "carried: request --wait exit $code"; }
grep -q "committed before step 36 (tp=1,pp=1,dp=2,zero=1" "$tmp/carried.out" || { cat "$tmp/carried.out"; fail "carried: answer"; }
grep -q "^supervise: the job ended .* restart 1 of 2" "$tmp/carried.log" || { cat "$tmp/carried.log"; fail "carried: no restart"; }
awk -F, 'NR > 1 && $1 >= 36 && $6 != 2 { bad = 1 } END { exit bad }' "$tmp/carried.csv" ||
  { cat "$tmp/carried.csv"; fail "carried: steps from 36 not on 2 processes"; }
[[ ! -e $tmp/job3/job.lock ]] || fail "carried: job.lock left after the job ended"
echo "ok 3: a request accepted before a lost process -> carried over the restart, committed before step 36"

# 4. A job killed a moment ago takes no request; its queue is not the next job's.
mkdir -p "$tmp/job4"
"$mpiexec" -np 2 "$dt" train "${common[@]}" --steps 4000 --schedule "0:dp=2" --job "$tmp/job4" >"$tmp/killed.log" 2>&1 &
wait_for '"health": "running"' "$tmp/job4/status.json"
leader=$(lock_pid "$tmp/job4")
kill -KILL "$leader"
# SIGKILL takes a moment on a large process: the request comes once it is dead (a zombie or gone)
for _ in $(seq 500); do [[ $(awk '{print $3}' "/proc/$leader/stat" 2>/dev/null) =~ ^(Z|X|)$ ]] && break; sleep 0.01; done
timeout 60 "$dt" request --job "$tmp/job4" --to tp=2 >"$tmp/late.out" 2>&1
code=$?
((code == 2)) && grep -q "no live job holds '$tmp/job4': .*gone" "$tmp/late.out" ||
  { cat "$tmp/late.out"; fail "a request to a job killed a moment ago: exit $code"; }
wait
printf '{"version":1,"to":"tp=2","at_step":1}\n' >"$tmp/job4/requests/0000000000000000001-left-1.json"
timeout 120 "$mpiexec" -np 2 "$dt" train "${common[@]}" --steps 4 --schedule "0:dp=2" --job "$tmp/job4" \
  --csv "$tmp/next.csv" >"$tmp/next.log" 2>&1 || { cat "$tmp/next.log"; fail "the next job in the directory"; }
answer="$tmp/job4/answers/0000000000000000001-left-1.json"
grep -q '"state": *"refused"' "$answer" && grep -q "ended before running it" "$answer" ||
  { cat "$tmp/job4/answers/"*; fail "a request left by a dead job was not refused by the next one"; }
awk -F, 'NR > 1 && $5 != "tp=1 pp=1 dp=2 zero=1" { bad = 1 } END { exit bad }' "$tmp/next.csv" ||
  fail "the next job ran a request left by a dead job"
mkdir -p "$tmp/job4b"
"$mpiexec" -np 1 "$dt" train "${common[@]}" --steps 4000 --job "$tmp/job4b" >"$tmp/first.log" 2>&1 &
first=$!
wait_for '"health": "running"' "$tmp/job4b/status.json"
rm "$tmp/job4b/job.lock"
timeout 60 "$mpiexec" -np 1 "$dt" train "${common[@]}" --steps 2 --job "$tmp/job4b" >"$tmp/second.log" 2>&1
code=$?
kill -TERM "$first"  # mpirun: a notice to every process, the job ends
((code == 2)) && grep -q "is held by another live job" "$tmp/second.log" ||
  { cat "$tmp/second.log"; fail "a second job took a directory whose job.lock was removed: exit $code"; }
wait "$first" 2>/dev/null
echo "ok 4: request to a job killed a moment ago refused; its left request refused by the next job; a removed lock does not free the directory"

# 5. A rank file that is a FIFO on resume.
timeout 120 "$mpiexec" -np 2 "$dt" train "${common[@]}" --steps 2 --schedule "0:dp=2" --save "$tmp/fifo.ck" \
  >"$tmp/fifo0.log" 2>&1 || { cat "$tmp/fifo0.log"; fail "fifo: save"; }
rank1="$tmp/fifo.ck/$(cat "$tmp/fifo.ck/latest")/rank-00001.safetensors"
rm "$rank1" && mkfifo "$rank1"
timeout 60 "$mpiexec" -np 2 "$dt" train "${common[@]}" --steps 4 --schedule "0:dp=2" --resume "$tmp/fifo.ck" \
  >"$tmp/fifo.out" 2>"$tmp/fifo.err"
code=$?
((code == 2)) && (($(wc -l <"$tmp/fifo.err") == 1)) && grep -q "checkpoint file '$rank1' is a FIFO" "$tmp/fifo.err" ||
  { cat "$tmp/fifo.err"; fail "fifo: exit $code"; }
echo "ok 5: a FIFO as a rank file on resume -> exit 2, one line naming it"

# 6. SIGKILL of the supervisor: the job ends; the next supervisor removes the copy left behind.
supervise killed --redundancy 1
wait_for "step  *3  loss" "$tmp/killed.log"
mpirun_pid=$(pgrep -P "$job" | head -1)
left=$(ls "$DT_MEMORY_COPY_ROOT")
kill -KILL "$job"
wait "$job" 2>/dev/null
for _ in $(seq 1 300); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$mpirun_pid" 2>/dev/null || fail "supervisor killed: its mpirun $mpirun_pid still runs after 30 s"
[[ -d $DT_MEMORY_COPY_ROOT/$left ]] || fail "supervisor killed: no copy left to remove ($left)"
timeout 120 "$dt" train --max-restarts 1 --np 2 --mpirun "$mpiexec" "${common[@]}" --steps 2 --save "$tmp/next.ck" \
  --redundancy 1 >"$tmp/sweep.log" 2>&1 || { cat "$tmp/sweep.log"; fail "the next supervised job"; }
grep -q "^supervise: removed '$DT_MEMORY_COPY_ROOT/$left', the memory copy of a job whose supervisor (pid [0-9]*) is gone$" \
  "$tmp/sweep.log" || { cat "$tmp/sweep.log"; fail "the copy of a killed supervisor was not removed"; }
[[ -z $(ls -A "$DT_MEMORY_COPY_ROOT") ]] || fail "copies left: $(ls "$DT_MEMORY_COPY_ROOT")"
echo "ok 6: supervisor SIGKILLed -> its mpirun ended; its copy removed by the next supervisor"

# 7. --redundancy under a plain mpirun, even with the copy's variable set by hand: refused (the
#    copy would have no supervisor to remove it).
mkdir -p "$tmp/byhand"
DT_MEMORY_COPY_DIR="$tmp/byhand" timeout 60 "$mpiexec" -np 2 "$dt" train "${common[@]}" --steps 2 --redundancy 1 \
  >"$tmp/byhand.out" 2>"$tmp/byhand.err"
code=$?
((code == 2)) && (($(wc -l <"$tmp/byhand.err") == 1)) && grep -q "start the job as \`dynatrain train --np N --max-restarts K" "$tmp/byhand.err" ||
  { cat "$tmp/byhand.err"; fail "--redundancy under a plain mpirun with DT_MEMORY_COPY_DIR: exit $code"; }
[[ -z $(ls -A "$tmp/byhand") ]] || fail "a copy was written under a plain mpirun"
echo "ok 7: --redundancy under a plain mpirun with DT_MEMORY_COPY_DIR set by hand -> refused, nothing written"

# 8. The job directory on a full file system (a 1 MiB tmpfs filled up while the job runs).
if unshare -m true 2>/dev/null; then
  mkdir -p "$tmp/full"
  cat >"$tmp/full.sh" <<'SH'
dir=$1 dt=$2 mpiexec=$3
shift 3
mount -t tmpfs -o size=1m tmpfs "$dir" && mkdir "$dir/job" || exit 9
DT_JOB_STALE_S=2 "$mpiexec" -np 1 "$dt" train "$@" --steps 400000 --job "$dir/job" >"$dir.log" 2>"$dir.err" &
job=$!
for _ in $(seq 1 3000); do grep -q '"health": "running"' "$dir/job/status.json" 2>/dev/null && break; sleep 0.02; done
dd if=/dev/zero of="$dir/fill" bs=64k 2>/dev/null
sleep 4
DT_JOB_STALE_S=2 timeout 60 "$dt" request --job "$dir/job" --to tp=2 >"$dir.request" 2>&1
echo $? >"$dir.code"
kill -TERM "$job"
wait "$job"
SH
  unshare -m bash "$tmp/full.sh" "$tmp/full" "$dt" "$mpiexec" "${common[@]}"
  [[ $(cat "$tmp/full.code") == 2 ]] && grep -q "its heartbeat is [0-9]* s old (process [0-9]* on .* runs: hung, or it cannot write $tmp/full/job/status.json (is its file system full?))" "$tmp/full.request" ||
    { cat "$tmp/full.request" "$tmp/full.err"; fail "full: request on a job whose file system is full"; }
  (($(grep -c "^dynatrain: warning: cannot write '$tmp/full/job/status.json' (No space left on device); the job goes on" "$tmp/full.err") == 1)) ||
    { cat "$tmp/full.err"; fail "full: the job did not say once that it cannot write its status"; }
  echo "ok 8: the job directory's file system full -> one warning from the job; request names the running process and the full disk"
else
  echo "skip 8: no mount namespace here (unshare -m needs root)"
fi

# 9. A request that grows a `train --np N --job DIR` job beyond the machine's cores.
mkdir -p "$tmp/job9"
cores=$(nproc)
env -u OMPI_MCA_rmaps_base_oversubscribe "$dt" train --np "$cores" --mpirun "$mpiexec" "${common[@]}" --steps 4000 \
  --schedule "0:dp=$cores" --job "$tmp/job9" >"$tmp/grow.log" 2>&1 &
grower=$!
wait_for '"health": "running"' "$tmp/job9/status.json"
timeout 300 "$dt" request --job "$tmp/job9" --to "dp=$((cores * 2))" --wait >"$tmp/grow.out" 2>&1
code=$?
kill -TERM "$grower"
wait "$grower"
((code == 0)) && grep -q "committed before step" "$tmp/grow.out" ||
  { cat "$tmp/grow.out"; grep -v "step  *[0-9]*  loss" "$tmp/grow.log"; fail "a grow by request under train --np $cores: exit $code"; }
echo "ok 9: a grow to $((cores * 2)) processes asked for by request under train --np $cores -> committed"
