#!/usr/bin/env bash
# The supervisor's restart accounting comes from the job's progress records
# (job/progress_record.h), never from its human lines. Each supervised job runs under a wrapper
# mpirun (--mpirun) that edits the job's stdout on its way to the supervisor:
#  1. every human step line rewritten ("step N  loss ..." -> "done N: loss ... ranks", after
#     the progress bar Open MPI's pty gives rank 0), and the
#     notice line removed: a job whose rank 1 is SIGKILLed as step 6 starts (saved every 4
#     steps, tp=2,dp=2 on 4 processes) is still accounted as ended after step 5 on 4 processes,
#     restarted from step 4 with 2 steps lost on 3 processes; a job of one process that has
#     notice (SIGTERM) is still not restarted (the notice is acted on at the boundary of the
#     periodic save of step 4: that save holds the state, exit 143, not a refused second save);
#  2. the control: the records removed and the human lines left as they are: the supervisor
#     then knows only what the checkpoint of step 4 tells it ("after step 3", 0 steps lost), not
#     the step 5 the human lines show, so it reads the records and not the lines.
# No record reaches the supervisor's own stdout.
# Usage: supervisor_records_test.sh DYNATRAIN MPIEXEC
source "$(dirname "$0")/script_prelude.sh"
common=(--model tiny-dense --data "$data" --global-batch 12 --seq 16 --threads 1)
real_mpirun="$(command -v "$mpiexec")"

# wrapper NAME SED_SCRIPT: an mpirun that passes the job's stdout through `sed -u SED_SCRIPT`.
wrapper() {
  cat >"$tmp/$1" <<SH
#!/usr/bin/env bash
"$real_mpirun" "\$@" | sed -u -e '$2'
exit \${PIPESTATUS[0]}
SH
  chmod +x "$tmp/$1"
}
wrapper rewrite 's/step  *\([0-9]*\)  loss/done \1: loss/; s/ processes$/ ranks/; /^notice: every process/d'
wrapper no-records '/dynatrain-progress/d'

# supervised NAME MPIRUN NP SCHEDULE EXIT [ENV...]: a supervised job of 8 steps saved every 4.
supervised() {
  local name=$1 mpirun=$2 np=$3 schedule=$4 want=$5
  shift 5
  env DT_FAULT_STAMP="$tmp/$name.stamp" "$@" timeout 300 "$dt" train --max-restarts 2 --np "$np" --mpirun "$mpirun" \
    "${common[@]}" --steps 8 --schedule "$schedule" --save "$tmp/$name.ck" --save-every 4 >"$tmp/$name.log" \
    2>"$tmp/$name.err"
  local code=$?
  ((code == want)) || { cat "$tmp/$name.log" "$tmp/$name.err"; fail "$name: exit $code, want $want"; }
  [[ -s $tmp/$name.stamp ]] || fail "$name: the fault never fired"
  grep -q "dynatrain-progress" "$tmp/$name.log" && fail "$name: a progress record reached the supervisor's stdout"
  return 0
}

echo "1. human lines rewritten: the accounting is unchanged"
supervised lost "$tmp/rewrite" 4 "0:tp=2,dp=2" 0 DT_FAULT=kill:1:step:0:6
grep -q "step  *[0-9]*  loss" "$tmp/lost.log" && fail "lost: the wrapper left a human step line"
grep -q "done 5: loss .* 4 ranks$" "$tmp/lost.log" || { cat "$tmp/lost.log"; fail "lost: no rewritten step line"; }
grep -q "^supervise: the job ended with exit [0-9]* after step 5 on 4 processes; restart 1 of 2 from step 4 (2 steps lost) on 3 processes in tp=1,pp=1,dp=3,zero=1$" "$tmp/lost.log" ||
  { cat "$tmp/lost.log"; fail "lost: no supervisor line with the right accounting"; }

supervised noticed "$tmp/rewrite" 1 "0:dp=1" 143 DT_FAULT=notice:0:step:0:3
grep -q "^notice: every process" "$tmp/noticed.log" && fail "noticed: the wrapper left the notice line"
grep -q "^supervise: every process had notice; the job ends without a restart$" "$tmp/noticed.log" ||
  { cat "$tmp/noticed.log" "$tmp/noticed.err"; fail "noticed: no supervisor line"; }
grep -q "restart 1 of" "$tmp/noticed.log" && fail "noticed: the supervisor restarted the job"
grep -q "stopped by SIGTERM to every process: saved checkpoint of step 4" "$tmp/noticed.err" ||
  { cat "$tmp/noticed.err"; fail "noticed: no line naming the checkpoint of step 4"; }
[[ $(cat "$tmp/noticed.ck/latest") == step-00000004 ]] || fail "noticed: latest is $(cat "$tmp/noticed.ck/latest")"

echo "2. records removed, human lines kept: the supervisor knows only the checkpoint"
supervised blind "$tmp/no-records" 4 "0:tp=2,dp=2" 0 DT_FAULT=kill:1:step:0:6
grep -q "step  *5  loss .* 4 processes$" "$tmp/blind.log" || { cat "$tmp/blind.log"; fail "blind: no human step line"; }
grep -q "^supervise: the job ended with exit [0-9]* after step 3 on 4 processes; restart 1 of 2 from step 4 (0 steps lost) on 3 processes" "$tmp/blind.log" ||
  { cat "$tmp/blind.log"; fail "blind: the supervisor read the human lines"; }
echo "ok: the restart accounting and the notice to all come from the records alone"
