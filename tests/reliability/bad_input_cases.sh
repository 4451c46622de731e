# The cases of tests/reliability/bad_inputs.sh, sourced by it: `bad NP WANT -- ARGS...`.
# WANT is a substring of the one expected line: it names the bad value. $tmp is a scratch dir.

P=(plan --model llama2-7b)
M=(plan --model tiny-moe)

# ---- config grammar (vps/parallel_config) ----
for cfg in "" "tp" "tp=" "tp=x" "tp=1.5" "tp=2x" "tp=0x10" "tp=0" "tp=-1" "tp=99999999999999999999" \
           "tp=1048577" "foo=2" "TP=2" " tp=2" "tp=2;dp=2" "tp=2:dp=2"; do
  want="$cfg"; [[ -z $cfg ]] && want="empty config"
  bad 1 "$want" -- "${P[@]}" --from "$cfg" --to tp=2
done
bad 1 "stray comma" -- "${P[@]}" --from tp=2, --to tp=1
bad 1 "stray comma" -- "${P[@]}" --from ,tp=2 --to tp=1
bad 1 "stray comma" -- "${P[@]}" --from tp=2,,dp=2 --to tp=1
bad 1 "stray comma" -- "${P[@]}" --from tp=1 --to dp=2,
bad 1 "tp is given twice" -- "${P[@]}" --from tp=2,tp=4 --to tp=1
bad 1 "zero=4 is out of range" -- "${P[@]}" --from zero=4 --to tp=1
bad 1 "zero=-1 is out of range" -- "${P[@]}" --from zero=-1 --to tp=1
bad 1 "pp_layers lists 2 stages but pp=1" -- "${P[@]}" --from pp_layers=16/16 --to tp=1
bad 1 "pp_layers=a/b" -- "${P[@]}" --from pp=2,pp_layers=a/b --to tp=1
bad 1 "pp_layers=" -- "${P[@]}" --from pp=2,pp_layers= --to tp=1
bad 1 "pp_layers=16/" -- "${P[@]}" --from pp=2,pp_layers=16/ --to tp=1
bad 1 "pp_layers entry 0" -- "${P[@]}" --from pp=2,pp_layers=0/32 --to tp=1
bad 1 "pp_layers entry -4" -- "${P[@]}" --from pp=2,pp_layers=36/-4 --to tp=1
bad 1 "pp_layers sum to 33" -- "${P[@]}" --from pp=2,pp_layers=16/17 --to tp=1
bad 1 "pp_layers entry 99999999999" -- "${P[@]}" --from pp=2,pp_layers=99999999999/1 --to tp=1
bad 1 "1048576 ranks" -- "${P[@]}" --from dp=1048576 --to tp=1
bad 1 "1048576 ranks" -- "${P[@]}" --from tp=1024,dp=1024 --to tp=1
bad 1 "1099511627776 ranks" -- "${P[@]}" --from tp=1024,dp=1024,pp=1024,cp=1024 --to tp=1
bad 1 "has 131072 ranks; this command plans every rank in one process" -- "${P[@]}" --from dp=131072 --to tp=1
bad 1 "has 32768 ranks; this command plans every rank" -- "${P[@]}" --from tp=1 --to tp=8,dp=4096
bad 1 "dp=2097152 is out of range" -- "${P[@]}" --from dp=2097152 --to tp=1
# ---- configs that cannot shard the model ----
bad 1 "tp=3 does not divide 32 attention heads" -- "${P[@]}" --from tp=3 --to tp=2
bad 1 "tp=64 does not divide 32 attention heads" -- "${P[@]}" --from tp=64 --to tp=2
bad 1 "tp=5 does not divide 64 attention heads" -- plan --model llama2-70b --from tp=5 --to tp=8
bad 1 "pp=33 exceeds the model's 32 layers" -- "${P[@]}" --from pp=33 --to tp=1
bad 1 "pp=3 does not divide 32 layers" -- "${P[@]}" --from pp=3 --to tp=1
bad 1 "ep=2, etp=1: model 'llama2-7b' has no experts" -- "${P[@]}" --from ep=2,dp=2 --to tp=1
bad 1 "ep=3 does not divide" -- "${M[@]}" --from ep=3,dp=3 --to tp=1
bad 1 "ep*etp=4" -- "${M[@]}" --from ep=4,dp=2 --to tp=1
bad 1 "etp=3 does not divide" -- "${M[@]}" --from etp=3,dp=3 --to tp=1
bad 1 "tp=3 does not divide" -- "${P[@]}" --from tp=1 --to tp=3,pp=2
bad 1 "pp=64 exceeds" -- "${P[@]}" --from tp=1 --to pp=64
# ---- plan flags ----
T=(plan --model tiny-dense --from tp=1 --to tp=2)
bad 1 "unknown model 'gpt5'" -- plan --model gpt5 --from tp=1 --to tp=2
bad 1 "unknown model ''" -- plan --model "" --from tp=1 --to tp=2
bad 1 "unknown model 'llama2-7B'" -- plan --model llama2-7B --from tp=1 --to tp=2
bad 1 "--gpus-per-node: 0" -- "${T[@]}" --gpus-per-node 0
bad 1 "--gpus-per-node: -8" -- "${T[@]}" --gpus-per-node -8
bad 1 "--gpus-per-node" -- "${T[@]}" --gpus-per-node x
bad 1 "--gpus-per-node" -- "${T[@]}" --gpus-per-node 99999999999
bad 1 "--bucket-elems: 0" -- "${T[@]}" --bucket-elems 0
bad 1 "--bucket-elems: -5" -- "${T[@]}" --bucket-elems -5
bad 1 "--bucket-elems" -- "${T[@]}" --bucket-elems 1e6
# numbers (docs/cli.md): decimal only; "0100000" is 100000 (as octal, 32768, it would fit)
bad 1 "--gpus-per-node: 0100000 is out of range; valid: 1..65536" -- "${T[@]}" --gpus-per-node 0100000
bad 1 "--gpus-per-node: '0x10' is not a whole number in 1..65536" -- "${T[@]}" --gpus-per-node 0x10
bad 1 "--gpus-per-node: '1e3' is not a whole number in 1..65536" -- "${T[@]}" --gpus-per-node 1e3
bad 1 "--gpus-per-node: ' 5' is not a whole number in 1..65536" -- "${T[@]}" --gpus-per-node " 5"
bad 1 "--gpus-per-node: '+5' is not a whole number in 1..65536" -- "${T[@]}" --gpus-per-node +5
bad 1 "--gpus-per-node: '4.0' is not a whole number in 1..65536" -- "${T[@]}" --gpus-per-node 4.0
bad 1 "--bucket-elems: '1e6' is not a whole number in 1..1099511627776" -- "${T[@]}" --bucket-elems 1e6
bad 1 "--intra-bw: '0x10' is not a number; give a positive finite number up to 1e+06" -- "${T[@]}" --intra-bw 0x10
bad 1 "--intra-bw: ' 5' is not a number" -- "${T[@]}" --intra-bw " 5"
bad 1 "--intra-bw: 0" -- "${T[@]}" --intra-bw 0
bad 1 "--intra-bw: -1" -- "${T[@]}" --intra-bw -1
bad 1 "--intra-bw: nan" -- "${T[@]}" --intra-bw nan
bad 1 "--intra-bw: inf" -- "${T[@]}" --intra-bw inf
bad 1 "--inter-bw: 0" -- "${T[@]}" --inter-bw 0
bad 1 "--inter-bw" -- "${T[@]}" --inter-bw fast
bad 1 "--transfers 99" -- "${T[@]}" --transfers 99
bad 1 "--transfers: -2 is out of range; valid: -1..1073741824 (-1: none)" -- "${T[@]}" --transfers -2
bad 1 "unknown state kind 'momentum'" -- "${T[@]}" --states momentum
bad 1 "empty state kind list" -- "${T[@]}" --states ""
bad 1 "cannot write --json file '/nonexistent/dir/p.json'" -- "${T[@]}" --json /nonexistent/dir/p.json
bad 1 "cannot write --json file '/'" -- "${T[@]}" --json /
bad 1 "cannot write --json file '/nonexistent/x.json': no directory '/nonexistent'" -- "${T[@]}" --json /nonexistent/x.json
bad 1 "cannot write --json file '/proc/x.json'" -- "${T[@]}" --json /proc/x.json  # root's access() passes there
LOUD=1 bad 1 "cannot write --json file '/dev/full': No space left on device" -- "${T[@]}" --json /dev/full
bad 1 "--frm" -- "${T[@]}" --frm tp=1
bad 1 "--from" -- plan --model tiny-dense --from
bad 1 "extra-word" -- plan --model tiny-dense extra-word
bad 1 "dynatrain" -- plann --model tiny-dense
bad 1 "A subcommand is required" --

# ---- Hugging Face config.json (vps/hf_config.cc; more hostile-JSON cases in tests/vps/hf_config_test.cc) ----
j() { printf '%s' "$2" >"$tmp/$1.json"; echo "$tmp/$1.json"; }
base='"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300'
bad 1 "cannot open model config '/nonexistent/config.json'" -- plan --model /nonexistent/config.json --from tp=1 --to tp=2
bad 1 "is empty; expected a JSON object" -- plan --model "$(j empty '')" --from tp=1 --to tp=2
bad 1 "is not valid JSON" -- plan --model "$(j trunc '{"hidden_size": 64')" --from tp=1 --to tp=2
bad 1 "is not valid JSON" -- plan --model "$(j binary $'\x01\x02\xff\xfe')" --from tp=1 --to tp=2
bad 1 "is not valid JSON" -- plan --model "$(j trailing "{$base,}")" --from tp=1 --to tp=2
python3 -c "print('[' * 100000 + ']' * 100000)" >"$tmp/deep.json" 2>/dev/null || printf '[[[]]]' >"$tmp/deep.json"
bad 1 "nests deeper than 32 levels" -- plan --model "$tmp/deep.json" --from tp=1 --to tp=2
bad 1 "must be a JSON object, got array" -- plan --model "$(j array '[]')" --from tp=1 --to tp=2
bad 1 "must be a JSON object, got null" -- plan --model "$(j null 'null')" --from tp=1 --to tp=2
bad 1 "must be a JSON object, got string" -- plan --model "$(j string '"config"')" --from tp=1 --to tp=2
bad 1 "hidden_size is required" -- plan --model "$(j nohidden '{"model_type": "llama", "num_hidden_layers": 2}')" --from tp=1 --to tp=2
bad 1 "vocab_size is required" -- plan --model "$(j novocab '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}')" --from tp=1 --to tp=2
bad 1 "hidden_size must be an integer, got \"64\"" -- plan --model "$(j strhidden "{$base, \"hidden_size\": \"64\"}")" --from tp=1 --to tp=2
bad 1 "num_attention_heads must be an integer, got 4.5" -- plan --model "$(j floatheads "{$base, \"num_attention_heads\": 4.5}")" --from tp=1 --to tp=2
bad 1 "vocab_size must be an integer, got [300]" -- plan --model "$(j arrvocab "{$base, \"vocab_size\": [300]}")" --from tp=1 --to tp=2
bad 1 "hidden_size=0 is out of range" -- plan --model "$(j zerohidden "{$base, \"hidden_size\": 0}")" --from tp=1 --to tp=2
bad 1 "hidden_size=-64 is out of range" -- plan --model "$(j neghidden "{$base, \"hidden_size\": -64}")" --from tp=1 --to tp=2
bad 1 "num_hidden_layers=0 is out of range" -- plan --model "$(j zerolayers "{$base, \"num_hidden_layers\": 0}")" --from tp=1 --to tp=2
bad 1 "vocab_size=-1 is out of range" -- plan --model "$(j negvocab "{$base, \"vocab_size\": -1}")" --from tp=1 --to tp=2
bad 1 "num_key_value_heads=3 must divide num_attention_heads=4" -- plan --model "$(j kv3 "{$base, \"num_key_value_heads\": 3}")" --from tp=1 --to tp=2
bad 1 "num_experts_per_tok=9 exceeds num_experts=8" -- plan --model "$(j topk "{${base/llama/qwen3_moe}, \"moe_intermediate_size\": 32, \"num_experts\": 8, \"num_experts_per_tok\": 9}")" --from tp=1 --to tp=2
bad 1 "tp=3 does not divide 4 attention heads" -- plan --model "$(j ok "{$base}")" --from tp=3 --to tp=2
bad 1 "tp=6 exceeds the 4 key/value heads" -- plan --model "$(j gqa "{$base, \"hidden_size\": 96, \"num_attention_heads\": 12, \"num_key_value_heads\": 4, \"intermediate_size\": 192}")" --from tp=6 --to tp=2
bad 1 "hidden_size=4611686018427387904 is out of range" -- plan --model "$(j hugehidden "{$base, \"hidden_size\": 4611686018427387904, \"intermediate_size\": 4611686018427387904}")" --from tp=1 --to tp=2
bad 1 "vocab_size=9223372036854775807 is out of range" -- plan --model "$(j hugevocab "{$base, \"vocab_size\": 9223372036854775807}")" --from tp=1 --to tp=2
bad 1 "num_hidden_layers=1000000000000" -- plan --model "$(j hugelayers "{$base, \"num_hidden_layers\": 1000000000000}")" --from tp=1 --to tp=2
bad 1 "num_attention_heads=1000000000000 is out of range" -- plan --model "$(j hugeheads "{$base, \"num_attention_heads\": 1000000000000, \"num_key_value_heads\": 1000000000000, \"head_dim\": 16}")" --from tp=3 --to tp=2

# ---- simulate ----
S=(simulate --cluster a800-16x8 --model tiny-dense --from tp=1 --to tp=2)
bad 1 "cannot write --json file '/nonexistent/s.json'" -- "${S[@]}" --json /nonexistent/s.json
LOUD=1 bad 1 "cannot write --json file '/dev/full'" -- "${S[@]}" --json /dev/full
cl='"name": "c", "nodes": 2, "gpus_per_node": 4, "nics_per_node": 1, "nic_gb_per_s": 25, "pcie_gb_per_s": 25, "intra_latency_us": 5, "inter_latency_us": 10, "copy_gb_per_s": 100'
bad 1 "gpu_link_gb_per_s must be positive, from 0.001 to 1e+06 GB/s; got 1e-300" -- "${S[@]/a800-16x8/$(j tinylink "{$cl, \"gpu_link_gb_per_s\": 1e-300}")}"
bad 1 "gpu_link_gb_per_s must be positive, from 0.001 to 1e+06 GB/s; got inf" -- "${S[@]/a800-16x8/$(j hugelink "{$cl, \"gpu_link_gb_per_s\": 1e300}")}"
bad 1 "latencies must be from 0 to 1e+06 us; got 1e+20" -- "${S[@]/a800-16x8/$(j slowlat "{${cl/\"inter_latency_us\": 10/\"inter_latency_us\": 1e20}, \"gpu_link_gb_per_s\": 100}")}"
# 1,024 processes traced as threads in a process limited to 2 GiB of address space: one line
CODE=3 LIMIT_KB=2097152 bad 1 "out of memory" -- simulate --cluster a800-16x8 --model llama2-7b --from dp=1024 --to tp=8,dp=128

# ---- run-transition flags (checked before MPI starts) ----
R=(run-transition --model tiny-dense --from tp=1 --to tp=1)
bad 1 "byte size 'lots'" -- "${R[@]}" --mem-budget lots
bad 1 "byte size '-1'" -- "${R[@]}" --mem-budget -1
bad 1 "byte size ''" -- "${R[@]}" --mem-budget ""
bad 1 "byte size '1XB' has unknown unit 'XB'" -- "${R[@]}" --mem-budget 1XB
bad 1 "byte size '1.5GiB'" -- "${R[@]}" --mem-budget 1.5GiB
bad 1 "byte size '99999999999999999999999' is too large" -- "${R[@]}" --mem-budget 99999999999999999999999
bad 1 "byte size '99999999999TiB' is too large" -- "${R[@]}" --mem-budget 99999999999TiB
bad 1 "byte size '2000000TiB' is too large" -- "${R[@]}" --mem-budget 2000000TiB
bad 1 "--repeat: 0" -- "${R[@]}" --repeat 0
bad 1 "--repeat: -3" -- "${R[@]}" --repeat -3
bad 1 "--bucket-elems: -5" -- "${R[@]}" --bucket-elems -5
bad 1 "--gpus-per-node: 0" -- "${R[@]}" --gpus-per-node 0
bad 1 "unknown state kind 'weights'" -- "${R[@]}" --states weights
bad 1 "needs 2 ranks but the job has 1; start it on 2 or more processes: \`mpirun -np 2 dynatrain run-transition ...\`" -- run-transition --model tiny-dense --from tp=1 --to tp=2
bad 1 "tp=3 does not divide 8 attention heads" -- run-transition --model tiny-dense --from tp=3 --to tp=1
bad 1 "stray comma" -- run-transition --model tiny-dense --from tp=1, --to tp=1
bad 1 "--to is required" -- run-transition --model tiny-dense --from tp=1
bad 1 "per rank" -- run-transition --model gpt3-175b --from tp=1 --to tp=1
bad 1 "per rank" -- run-transition --model llama2-70b --from tp=1 --to tp=1 --states param

# ---- under mpirun: printed once, whichever ranks raise it ----
bad 2 "tp=3 does not divide 8 attention heads" -- run-transition --model tiny-dense --from tp=3 --to tp=1
bad 4 "tp=3 does not divide 8 attention heads" -- run-transition --model tiny-dense --from tp=3 --to tp=1
bad 2 "stray comma" -- run-transition --model tiny-dense --from dp=2, --to tp=2
bad 2 "byte size 'lots'" -- run-transition --model tiny-dense --from dp=2 --to tp=2 --mem-budget lots
bad 4 "--repeat: 0" -- run-transition --model tiny-dense --from dp=2 --to tp=2 --repeat 0
bad 2 "needs 4 ranks but the job has 2" -- run-transition --model tiny-dense --from dp=2 --to tp=4
bad 2 "cannot write --json file '/nonexistent/dir/x.json'" -- run-transition --model tiny-dense --from dp=2 --to tp=2 --json /nonexistent/dir/x.json
bad 2 "per rank" -- run-transition --model gpt3-175b --from dp=2 --to tp=2
bad 2 "is not valid JSON" -- run-transition --model "$tmp/trunc.json" --from dp=2 --to tp=2
bad 4 "--from is required" -- run-transition --model tiny-dense --frm tp=1 --to tp=2
# --placement: one process per destination rank, each among the switch's processes, no two alike
bad 1 "placement 1 puts rank 0 on process 1; valid processes: 0..0" -- run-transition --model tiny-dense --from tp=1 --to tp=1 --placement 1
bad 4 "placement 2,3 puts rank 0 on process 2; valid processes: 0..1" -- run-transition --model tiny-dense --from tp=2 --to tp=2 --placement 2,3
bad 2 "placement 0,5 puts rank 1 on process 5; valid processes: 0..1" -- run-transition --model tiny-dense --from dp=2 --to tp=2 --placement 0,5
bad 2 "placement 0,0 puts ranks 0 and 1 on process 0" -- run-transition --model tiny-dense --from dp=2 --to tp=2 --placement 0,0
bad 2 "placement 1 names 1 processes but the layout has 2 ranks" -- run-transition --model tiny-dense --from dp=2 --to tp=2 --placement 1
bad 2 "placement '0,-1': '-1' is not a process number" -- run-transition --model tiny-dense --from dp=2 --to tp=2 --placement 0,-1
LOUD=1 bad 1 "cannot write --json file '/dev/full'" -- run-transition --model tiny-dense --from tp=1 --to tp=1 --json /dev/full

# ---- train ----
if [[ $with_train == 1 ]]; then
  D=(train --model tiny-dense --global-batch 4 --seq 16)
  bad 1 "--steps: 0 is out of range" -- "${D[@]}" --steps 0
  bad 1 "--steps: -5 is out of range" -- "${D[@]}" --steps -5
  bad 1 "--steps" -- "${D[@]}" --steps ten
  bad 1 "--steps: '1e3' is not a whole number in 1..1000000000" -- "${D[@]}" --steps 1e3
  bad 1 "--lookahead: -1 is out of range; valid: 0..1000000000 (0: auto)" -- "${D[@]}" --steps 2 --lookahead -1
  bad 1 "--hostfile: File does not exist: /nonexistent/hosts" -- "${D[@]}" --steps 2 --hostfile /nonexistent/hosts
  bad 1 "--steps: 10000000000 is out of range" -- "${D[@]}" --steps 10000000000
  bad 1 "--global-batch: 0" -- train --model tiny-dense --steps 2 --global-batch 0
  bad 1 "--global-batch: -4" -- train --model tiny-dense --steps 2 --global-batch -4
  bad 1 "--seq: 0" -- train --model tiny-dense --steps 2 --seq 0
  bad 1 "--seq: 99999999" -- train --model tiny-dense --steps 2 --seq 99999999
  bad 1 "--lr: nan" -- "${D[@]}" --steps 2 --lr nan
  bad 1 "--lr: inf" -- "${D[@]}" --steps 2 --lr inf
  bad 1 "--lr: -0.1" -- "${D[@]}" --steps 2 --lr -0.1
  bad 1 "--lr: 0" -- "${D[@]}" --steps 2 --lr 0
  bad 1 "--lr" -- "${D[@]}" --steps 2 --lr fast
  bad 1 "--micro-batches: -1" -- "${D[@]}" --steps 2 --micro-batches -1
  bad 1 "--threads: -2" -- "${D[@]}" --steps 2 --threads -2
  bad 1 "--threads: 100000" -- "${D[@]}" --steps 2 --threads 100000
  bad 1 "unknown switch method 'magic'" -- "${D[@]}" --steps 2 --switch-method magic
  bad 1 "unknown model 'gpt5'" -- train --model gpt5 --steps 2
  bad 1 "empty schedule" -- "${D[@]}" --steps 2 --schedule ""
  bad 1 "empty schedule" -- "${D[@]}" --steps 2 --schedule ";;"
  bad 1 "schedule entry 'tp=1' must be STEP:CONFIG" -- "${D[@]}" --steps 2 --schedule "tp=1"
  bad 1 "'x' is not a step number" -- "${D[@]}" --steps 2 --schedule "x:tp=1"
  bad 1 "'0x' is not a step number" -- "${D[@]}" --steps 2 --schedule "0x:tp=1"
  bad 1 "schedule must start at step 0, got '5:tp=1'" -- "${D[@]}" --steps 2 --schedule "5:tp=1"
  bad 1 "schedule steps must increase: '0:dp=1'" -- "${D[@]}" --steps 2 --schedule "0:tp=1;0:dp=1"
  bad 1 "schedule entry 2 of 3 is empty" -- "${D[@]}" --steps 6 --schedule "0:tp=1;;4:dp=1"
  bad 1 "schedule entry 2 of 2 is empty" -- "${D[@]}" --steps 6 --schedule "0:tp=1;"
  bad 1 "schedule entry 1 of 2 is empty" -- "${D[@]}" --steps 6 --schedule ";0:tp=1"
  bad 1 "'+1' is not a step number" -- "${D[@]}" --steps 6 --schedule "0:tp=1;+1:dp=1"
  bad 1 "'+0' is not a step number" -- "${D[@]}" --steps 6 --schedule "+0:tp=1"
  bad 1 "' 0' is not a step number" -- "${D[@]}" --steps 6 --schedule " 0:tp=1"
  bad 1 "' 4' is not a step number" -- "${D[@]}" --steps 6 --schedule "0:tp=1; 4:dp=1"
  bad 1 "'-4' is not a step number" -- "${D[@]}" --steps 6 --schedule "0:tp=1;-4:dp=1"
  bad 1 "'99999999999999999999' is not a step number" -- "${D[@]}" --steps 6 --schedule "0:tp=1;99999999999999999999:dp=1"
  bad 1 "empty config" -- "${D[@]}" --steps 6 --schedule "0:"
  bad 1 "is at or past --steps 6 (steps 0..5): it would never run" -- "${D[@]}" --steps 6 --schedule "0:tp=1;6:dp=1"
  bad 1 "--seed: '-1' is not a whole number in 0..18446744073709551615" -- "${D[@]}" --steps 2 --seed -1
  bad 1 "--seed: '99999999999999999999' is not a whole number" -- "${D[@]}" --steps 2 --seed 99999999999999999999
  bad 1 "--seed: '0x10' is not a whole number" -- "${D[@]}" --steps 2 --seed 0x10
  bad 1 "--save-every requires --save" -- "${D[@]}" --steps 2 --save-every 1
  bad 1 "--save-every: -1 is out of range; valid: 0..1000000000" -- "${D[@]}" --steps 2 --save-every -1 --save "$tmp/sv"
  bad 1 "--csv and --json both name '$tmp/out'" -- "${D[@]}" --steps 2 --csv "$tmp/out" --json "$tmp/out"
  bad 2 "--csv and --json both name '$tmp/out'" -- "${D[@]}" --steps 2 --schedule "0:dp=2" --csv "$tmp/out" --json "$tmp/./out"
  LOUD=1 bad 1 "cannot write CSV file '/dev/full': No space left on device" -- "${D[@]}" --steps 2 --csv /dev/full
  LOUD=1 bad 2 "cannot write CSV file '/dev/full'" -- "${D[@]}" --steps 2 --schedule "0:dp=2" --csv /dev/full
  mkfifo "$tmp/fifo"
  bad 1 "data file '$tmp/fifo' is a FIFO; give a regular text file" -- "${D[@]}" --steps 2 --data "$tmp/fifo"
  bad 1 "data file '/dev/zero' is a character device" -- "${D[@]}" --steps 2 --data /dev/zero
  bad 1 "data file '$tmp' is a directory" -- "${D[@]}" --steps 2 --data "$tmp"
  # a loss that turns NaN (injected: no --lr up to the bound 1000 overflows the tiny models'
  # loss) stops the run at that step with a hint, on every rank alike
  LOUD=1 FAULT=nan:0:step:0:3 bad 1 "the loss is nan at step 3: training diverged; lower --lr (3)" -- "${D[@]}" --steps 8 --lr 3
  LOUD=1 FAULT=nan:1:step:0:2 bad 2 "the loss is nan at step 2: training diverged; lower --lr (0.003) and --resume" -- "${D[@]}" --steps 8 --schedule "0:dp=2" --save "$tmp/nan"
  bad 1 "stray comma" -- "${D[@]}" --steps 2 --schedule "0:tp=1,"
  bad 1 "tp=3 does not divide 8 attention heads" -- "${D[@]}" --steps 3 --schedule "0:tp=3"
  bad 1 "needs 2 ranks; the job has 1 (the first layout must fit the processes the job starts with: \`dynatrain train --np 2 ...\`)" -- "${D[@]}" --steps 3 --schedule "0:dp=2"
  bad 1 "cannot open data file '/nonexistent/data.txt'" -- "${D[@]}" --steps 2 --data /nonexistent/data.txt
  bad 1 "cannot write CSV file '/nonexistent/dir/t.csv'" -- "${D[@]}" --steps 2 --csv /nonexistent/dir/t.csv
  bad 1 "cannot write CSV file '/'" -- "${D[@]}" --steps 2 --csv /
  printf 'tiny' >"$tmp/short.txt"
  bad 1 "training text has 4 bytes" -- "${D[@]}" --steps 2 --data "$tmp/short.txt"
  bad 1 "is not valid JSON" -- train --model "$tmp/trunc.json" --steps 2
  bad 2 "tp=3 does not divide 8 attention heads" -- "${D[@]}" --steps 3 --schedule "0:tp=3"
  bad 2 "--steps: 0 is out of range" -- "${D[@]}" --steps 0
  bad 4 "--lr: nan" -- "${D[@]}" --steps 2 --lr nan
  bad 2 "schedule steps must increase" -- "${D[@]}" --steps 3 --schedule "0:dp=2;2:tp=2;1:dp=1"
  bad 2 "cannot write CSV file '/nonexistent/dir/x.csv'" -- "${D[@]}" --steps 2 --schedule "0:dp=2" --csv /nonexistent/dir/x.csv
  bad 4 "cannot open data file" -- "${D[@]}" --steps 2 --schedule "0:dp=4" --data /nonexistent/data.txt
  # ---- memory checked up front (job/train_memory.h) ----
  bad 1 "training model 'llama2-70b' in tp=1,pp=1,dp=1,zero=1 needs up to" -- train --model llama2-70b --steps 2
  bad 2 "training model 'llama2-70b' in tp=2,pp=1,dp=1,zero=1 needs up to" -- train --model llama2-70b --steps 2 --schedule "0:tp=2"
  # ---- the supervisor: train --max-restarts (job/supervisor.h) ----
  bad 1 "--max-restarts: -1 is out of range" -- "${D[@]}" --steps 2 --max-restarts -1
  bad 1 "--max-restarts needs --np N" -- "${D[@]}" --steps 2 --max-restarts 1 --save "$tmp/sv"
  bad 1 "--np: 0 is out of range" -- "${D[@]}" --steps 2 --max-restarts 1 --np 0 --save "$tmp/sv"
  bad 1 "--max-restarts needs --save DIR" -- "${D[@]}" --steps 2 --max-restarts 1 --np 2
  bad 1 "--recovery-reserve keeps memory for recovering a lost process in place" -- "${D[@]}" --steps 2 --recovery-reserve
  bad 1 "cannot run '/nonexistent/mpirun'" -- "${D[@]}" --steps 2 --max-restarts 1 --np 2 --save "$tmp/sv" --mpirun /nonexistent/mpirun
  bad 2 "--np starts mpirun itself: run \`dynatrain train --np 2 ...\` without mpirun in front" -- "${D[@]}" --steps 2 --max-restarts 1 --np 2 --save "$tmp/sv"
  bad 2 "--np starts mpirun itself" -- "${D[@]}" --steps 2 --np 2
  # ---- --save checked before training; checkpoints carry their run (job/train_ckpt.h) ----
  touch "$tmp/afile"
  bad 1 "cannot create checkpoint directory '$tmp/afile/ck': Not a directory" -- "${D[@]}" --steps 2 --save "$tmp/afile/ck"
  bad 1 "cannot create checkpoint directory '$tmp/afile/ck'" -- "${D[@]}" --steps 2 --np 2 --max-restarts 1 --save "$tmp/afile/ck"
  bad 2 "cannot create checkpoint directory '$tmp/afile/ck'" -- "${D[@]}" --steps 2 --schedule "0:dp=2" --save "$tmp/afile/ck"
  # A run's checkpoint of step 2 (seed 1234, lr 0.003, the embedded text, schedule 0:tp=1).
  "$dt" "${D[@]}" --steps 2 --save "$tmp/run1" >"$tmp/run1.log" 2>&1 || { echo "FAIL: the run saving $tmp/run1"; cat "$tmp/run1.log"; }
  again="; continue it with --resume $tmp/run1, or save into another directory"
  bad 1 "--save directory '$tmp/run1' holds another run's checkpoint (step 2): its seed is 1234, this run's 5$again" -- "${D[@]}" --steps 4 --save "$tmp/run1" --seed 5
  bad 1 "holds another run's checkpoint (step 2): its lr is 0.003, this run's 0.001$again" -- "${D[@]}" --steps 4 --np 2 --max-restarts 1 --save "$tmp/run1" --lr 0.001
  bad 1 "holds another run's checkpoint (step 2): its data is \"embedded\", this run's \"$here/../data/train_text.txt\"$again" -- "${D[@]}" --steps 4 --save "$tmp/run1" --data "$here/../data/train_text.txt"
  bad 1 "holds another run's checkpoint (step 2): its schedule is" -- "${D[@]}" --steps 4 --np 2 --save "$tmp/run1" --schedule "0:dp=2"
  bad 2 "holds another run's checkpoint (step 2): its schedule is" -- "${D[@]}" --steps 4 --save "$tmp/run1" --schedule "0:dp=2"
  bad 1 "holds another run's checkpoint (step 2): its model is \"tiny-dense " -- train --model tiny-moe --steps 4 --save "$tmp/run1"
  bad 1 "--save directory '$tmp/run1' already holds this run's checkpoint of step 2$again" -- "${D[@]}" --steps 4 --save "$tmp/run1"
  bad 1 "already holds this run's checkpoint of step 2$again" -- "${D[@]}" --steps 4 --np 1 --max-restarts 2 --save "$tmp/run1"
  # ---- an edited or damaged index.json (its checksum, ckpt/index.h); a resume reads it after
  # the run's first lines (LOUD) ----
  edit_index() {  # edit_index NAME SED-EXPRESSION: a copy of run1 with its index edited
    cp -r "$tmp/run1" "$tmp/$1"
    sed -i "$2" "$tmp/$1/step-00000002/index.json"
    cmp -s "$tmp/run1/step-00000002/index.json" "$tmp/$1/step-00000002/index.json" && echo "FAIL: $1: the edit changed nothing"
  }
  edit_index ix-step '0,/"step": 2/s//"step": 3/'
  edit_index ix-position 's/"data_position": \([0-9]*\)/"data_position": 1\1/'
  edit_index ix-seed 's/"data_seed": \([0-9]*\)/"data_seed": 1\1/'
  edit_index ix-nosum '/"checksum":/d'
  for ix in ix-step ix-position ix-seed; do
    LOUD=1 bad 1 "checkpoint index '$tmp/$ix/step-00000002/index.json' fails its checksum: edited or damaged" -- "${D[@]}" --steps 4 --resume "$tmp/$ix"
  done
  LOUD=1 bad 2 "checkpoint index '$tmp/ix-step/step-00000002/index.json' fails its checksum" -- "${D[@]}" --steps 4 --schedule "0:dp=2" --resume "$tmp/ix-step"
  bad 1 "checkpoint index '$tmp/ix-seed/step-00000002/index.json' fails its checksum" -- export --hf "$tmp/hf-ix" --from "$tmp/ix-seed" --model tiny-dense
  LOUD=1 bad 1 "checkpoint index '$tmp/ix-nosum/step-00000002/index.json' has no checksum (its index_version needs one)" -- "${D[@]}" --steps 4 --resume "$tmp/ix-nosum"
fi

# ---- request (a running train --job DIR; job/job_request.h, job/job_status.h) ----
# Cases with a live job (two requests at once both answered, a FIFO and malformed JSON in
# DIR/requests/, --wait on a refused request, a job that dies): tests/job/job_control_test.sh
# and tests/edm/edm_migrate_test.sh.
mkdir -p "$tmp/job" "$tmp/ended"
touch "$tmp/regular_file"
mkfifo "$tmp/request_fifo"
bad 1 "no live job holds '$tmp/job': no job holds it (no readable job.lock" -- request --job "$tmp/job" --to dp=2
bad 1 "no live job holds '$tmp/job'" -- request --job "$tmp/job" --to dp=2 --wait
bad 1 "'$tmp/regular_file' is a regular file, not a job directory" -- request --job "$tmp/regular_file" --to dp=2
bad 1 "'$tmp/request_fifo' is a FIFO, not a job directory" -- request --job "$tmp/request_fifo" --to dp=2
bad 1 "'/nonexistent/job' does not exist" -- request --job /nonexistent/job --to dp=2
# A job that ended, and one whose leader's pid is gone (a lock left by a killed job).
printf '{"version":1,"pid":1,"host":"h","started_unix":1}\n' > "$tmp/ended/job.lock"
printf '{"version":1,"health":"ended","exit_code":0,"heartbeat_unix":1}\n' > "$tmp/ended/status.json"
bad 1 "the job ended (exit code 0)" -- request --job "$tmp/ended" --to dp=2
mkdir -p "$tmp/dead" && printf '{"version":1,"pid":999999999,"host":"%s","started_unix":1}\n' "$(hostname)" > "$tmp/dead/job.lock"
bad 1 "its process 999999999 on $(hostname) is gone" -- request --job "$tmp/dead" --to dp=2
mkdir -p "$tmp/stale" && printf '{"version":1,"pid":1,"host":"elsewhere.invalid","started_unix":1}\n' > "$tmp/stale/job.lock"
bad 1 "its heartbeat is" -- request --job "$tmp/stale" --to dp=2
bad 1 "a request needs --to CONFIG (or --migrate)" -- request --job "$tmp/job"
bad 1 "--lend takes no --to, --vacate or --migrate" -- request --job "$tmp/job" --lend 2 --to dp=2
bad 1 "--lend and --reclaim in one request" -- request --job "$tmp/job" --lend 1 --reclaim
bad 1 "--lend: 0 is out of range; valid: 1..2147483647" -- request --job "$tmp/job" --lend 0
bad 1 "--timeout 5 needs --wait" -- request --job "$tmp/job" --to dp=2 --timeout 5
bad 1 "--timeout -1 is not valid" -- request --job "$tmp/job" --to dp=2 --wait --timeout -1
bad 1 "--at-step: '99999999999999999999' is not a whole number" -- request --job "$tmp/job" --to dp=2 --at-step 99999999999999999999
bad 1 "--at-step: -5 is out of range; valid: 0..9223372036854775807" -- request --job "$tmp/job" --to dp=2 --at-step -5
