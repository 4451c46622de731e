#!/usr/bin/env bash
# The CLI contract: bad input -> one line on stderr, exit 2; --check -> "check: ok", exit 0;
# --json writes the stats with plan_seconds.
set -u
dt="$1"
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
printf '{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 128, "vocab_size": 300, "tie_word_embeddings": true}' >"$tmp/config.json"
expect 0 "check: ok" -- plan --model "$tmp/config.json" --from tp=2,dp=2 --to tp=4,pp=2 --check
echo '{"hidden_size": 64' >"$tmp/bad.json"
expect 2 "is not valid JSON" -- plan --model "$tmp/bad.json" --from tp=1 --to tp=2
exit $fail
