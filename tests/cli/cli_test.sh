#!/usr/bin/env bash
# The CLI contract: bad input -> one line on stderr, exit 2; checks print "check: ok" /
# "verify: ok" and exit 0; --json / --csv write their files; an output file that cannot be
# written fails on every rank of an mpirun job instead of leaving ranks waiting.
# Usage: cli_test.sh DYNATRAIN WITH_TRAIN(0|1) MPIEXEC
set -u
dt="$1"
with_train="${2:-0}"
mpiexec="${3:-mpirun}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect <exit code> <stderr substring> -- args...
  local code="$1" want="$2"
  shift 3
  "$dt" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [[ $got != "$code" ]] || ! grep -qF -- "$want" "$tmp/err" "$tmp/out" || { [[ $code == 2 ]] && [[ $lines != 1 ]]; }; then
    echo "FAIL: dynatrain $* -> exit $got (want $code), stderr:"; cat "$tmp/err"; fail=1
  else
    echo "ok: dynatrain $*"
  fi
}
expect 2 "unknown model 'gpt5'" -- plan --model gpt5
expect 2 "tp=3 does not divide 32 attention heads" -- plan --model llama2-7b --from tp=3 --to tp=2
expect 2 "zero=7 is out of range" -- plan --model tiny-dense --from tp=1,zero=7 --to tp=2
expect 2 "unknown state kind 'momentum'" -- plan --model tiny-dense --from tp=1 --to tp=2 --states momentum
expect 2 "--gpus-per-node" -- plan --model tiny-dense --from tp=1 --to tp=2 --gpus-per-node x
expect 2 "cannot open model config" -- plan --model /nonexistent/config.json --from tp=1 --to tp=2
expect 0 "check: ok" -- plan --model tiny-moe --from tp=2,pp=2,dp=2,ep=2 --to tp=1,pp=4,dp=4,ep=4,zero=0 --check --json "$tmp/p.json"
grep -q '"plan_seconds"' "$tmp/p.json" || { echo "FAIL: --json lacks plan_seconds"; fail=1; }
printf '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 128, "vocab_size": 300, "tie_word_embeddings": true}' >"$tmp/config.json"
expect 0 "check: ok" -- plan --model "$tmp/config.json" --from tp=2,dp=2 --to tp=4,pp=2 --check
echo '{"hidden_size": 64' >"$tmp/bad.json"
expect 2 "is not valid JSON" -- plan --model "$tmp/bad.json" --from tp=1 --to tp=2
# Model families: --describe lists tensors and splits; unmodelled fields are refused by name.
hf="$(dirname "$0")/../vps/hf_configs"
expect 0 "layers.3.attn.kv_up.weight" -- plan --model "$hf/deepseek-v3.json" --describe
grep -qF "671026419200 parameters" "$tmp/out" || { echo "FAIL: --describe lacks the parameter count"; fail=1; }
expect 0 "check: ok" -- plan --model "$hf/deepseek-v2-lite.json" --from tp=2,pp=3,dp=2,ep=4 --to tp=4,pp=1,dp=2,ep=8,zero=0 --states param --check
echo '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 300, "mlp_bias": true}' >"$tmp/mlp_bias.json"
expect 2 "mlp_bias" -- plan --model "$tmp/mlp_bias.json" --describe
# run-transition on one process (a world of one rank), and its errors.
expect 0 "verify: ok" -- run-transition --model tiny-moe --from tp=1,zero=1 --to tp=1,zero=0 --verify --repeat 2 --json "$tmp/rt.json"
grep -q '"lower_bound_seconds"' "$tmp/rt.json" || { echo "FAIL: run-transition --json lacks lower_bound_seconds"; fail=1; }
# One rank whose state is handed over whole (zero-copy keeps): nothing to copy or send, so the
# simulator's prediction is 0.
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["predicted_seconds"] == 0' "$tmp/rt.json" ||
  { echo "FAIL: run-transition --json lacks predicted_seconds (the simulator's), 0 here"; fail=1; }
# The model's inputs and variants are reported; one rank has no partner, so no handshake cost.
python3 - "$tmp/rt.json" <<'PY' || { echo "FAIL: run-transition --json lacks the model's inputs"; fail=1; }
import json, sys
j = json.load(open(sys.argv[1]))
assert j["predicted_busy_handoff_us"] == 0 and j["predicted_idle_latency_us"] == 0, j
assert j["predicted_idle_latency_seconds"] == 0 and j["predicted_probe_link_seconds"] == 0, j
assert j["predicted_probe_link_gb_per_s"] >= 0 and "dry" in j["warm_phases"], j
PY
expect 2 "needs 2 ranks but the job has 1" -- run-transition --model tiny-dense --from tp=1 --to tp=2
expect 2 "byte size 'lots'" -- run-transition --model tiny-dense --from tp=1 --to tp=1 --mem-budget lots

# Under mpirun: a bad output path is one error, not a hang (timeout exit 124 would mean a hang).
mpi_expect_error() {  # want -- args...
  local want="$1"
  shift 2
  timeout 120 "$mpiexec" -np 2 "$dt" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [[ $got == 0 || $got == 124 ]] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: mpirun -np 2 dynatrain $* -> exit $got, stderr:"; cat "$tmp/err"; fail=1
  else
    echo "ok: mpirun -np 2 dynatrain $*"
  fi
}
mpi_expect_error "cannot write --json file" -- run-transition --model tiny-dense --from dp=2 --to tp=2 --json /nonexistent/dir/x.json
expect 2 "holds no complete checkpoint" -- export --hf "$tmp/hf" --from "$tmp/no-such-checkpoint" --model tiny-dense

if [[ $with_train == 1 ]]; then
  expect 0 "static layout" -- train --model tiny-dense --steps 3 --global-batch 4 --seq 16 --data "$(dirname "$0")/../data/train_text.txt" --csv "$tmp/t.csv"
  head -1 "$tmp/t.csv" | grep -q '^step,loss,' || { echo "FAIL: train CSV header"; fail=1; }
  [[ $(wc -l <"$tmp/t.csv") == 4 ]] || { echo "FAIL: train CSV should have 3 steps"; fail=1; }
  expect 2 "tp=3 does not divide 8 attention heads" -- train --model tiny-dense --steps 3 --schedule "0:tp=3"
  expect 2 "schedule steps must increase" -- train --model tiny-dense --steps 3 --schedule "0:tp=1;5:dp=1;2:dp=1"
  expect 2 "cannot open data file" -- train --model tiny-dense --steps 3 --data /nonexistent/data.txt
  expect 2 "holds no complete checkpoint" -- train --model tiny-dense --steps 3 --resume "$tmp/no-such-checkpoint"
  mpi_expect_error "cannot write CSV file" -- train --model tiny-dense --steps 2 --schedule "0:dp=2" --csv /nonexistent/dir/x.csv
fi
exit $fail
