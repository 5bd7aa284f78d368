#!/usr/bin/env bash
# ds-generate end to end on the Hugging Face directories of runtime/generate/testdata (random
# GPT-2 and Llama with grouped-query attention, transformers' greedy output in hf_golden.json):
# greedy tokens equal transformers' alone, as one left-padded batch, and from the same folders
# sharded as the Hub shards them; JSONL carries the
# summary's tokens per second, a sampling seed repeats, and bad input gets one clear error.
set -uo pipefail
R=${TEST_SRCDIR:-.}/ds_runtime
GEN=$R/tools/ds_generate/ds-generate
DATA=$R/runtime/generate/testdata
W=${TEST_TMPDIR:-$(mktemp -d)}
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
golden() {  # golden FAMILY KIND INDEX: transformers' tokens as "a,b,c"
  sed -n "/\"$1\": {/,/\"first_logits\"/p" "$DATA/hf_golden.json" | tr -d ' \n' |
    sed -n "s/.*\"$2\":\[\(\[[0-9,]*\]\(,\[[0-9,]*\]\)*\)\].*/\1/p" |
    sed 's/\],\[/\n/g; s/[][]//g' | sed -n "$(($3 + 1))p"
}
P0=5 P1=17,3,42,8,29 P2=1,60,7,33,12,9,50,2,41,19,26
for fam in gpt2 llama; do
  out=$("$GEN" --hf "$DATA/$fam" --prompt_ids $P1 --max_new_tokens 12 2>&1)
  got=$(echo "$out" | head -1 | sed 's/.*-> \[//; s/\]//')
  [[ "$got" == "$(golden $fam alone 1)" ]] && pass "$fam: greedy equals transformers ($got)" ||
    fail "$fam: greedy $got, transformers $(golden $fam alone 1)"
  "$GEN" --hf "$DATA/$fam" --prompt_ids $P0 --prompt_ids $P1 --prompt_ids $P2 --max_new_tokens 12 \
    --jsonl > "$W/$fam.jsonl" 2>&1
  ok=1
  for i in 0 1 2; do
    got=$(sed -n "$((i + 1))p" "$W/$fam.jsonl" | sed 's/.*"ids": \[\([0-9,]*\)\].*/\1/')
    [[ "$got" == "$(golden $fam batched $i)" ]] || ok=0
  done
  ((ok)) && pass "$fam: a left-padded batch of 3 (0, 6 and 10 pads) equals transformers' batch" ||
    fail "$fam: batched output differs: $(cat "$W/$fam.jsonl")"
  grep -q '"summary": {"prompts": 3, "prefill_tokens": 17,.*"decode_tokens": 33,' "$W/$fam.jsonl" &&
    pass "$fam: JSONL summary with prefill and decode tokens/s" || fail "$fam: no summary"
done
# The same models saved as the Hub shards them (model-0000k-of-0000N.safetensors and the index,
# by tools/shard_safetensors.py): the same tokens as transformers'.
for fam in gpt2 llama; do
  python3 "$R/tools/shard_safetensors.py" "$DATA/$fam" "$W/${fam}_sharded" 20000 > "$W/shard.log" 2>&1
  out=$("$GEN" --hf "$W/${fam}_sharded" --prompt_ids $P1 --max_new_tokens 12 2>&1)
  got=$(echo "$out" | head -1 | sed 's/.*-> \[//; s/\]//')
  [[ "$got" == "$(golden $fam alone 1)" ]] &&
    pass "$fam sharded ($(cat "$W/shard.log")): greedy equals transformers ($got)" ||
    fail "$fam sharded: $got, transformers $(golden $fam alone 1): $(echo "$out" | tail -2)"
done
# Imported into our layout and exported back as a sharded folder (ds-ckpt --max_shard_size):
# still transformers' tokens.
for fam in gpt2 llama; do
  mkdir -p "$W/${fam}_hub" && cp "$DATA/$fam/config.json" "$W/${fam}_hub/"
  "$R/tools/ds_ckpt/ds-ckpt" import --family $fam --input "$DATA/$fam" --output "$W/$fam.ours" \
    > /dev/null 2>&1 &&
    "$R/tools/ds_ckpt/ds-ckpt" export --family $fam --input "$W/$fam.ours" --output "$W/${fam}_hub" \
      --max_shard_size 30KB > /dev/null 2>&1 || fail "$fam: import and sharded export"
  out=$("$GEN" --hf "$W/${fam}_hub" --prompt_ids $P1 --max_new_tokens 12 2>&1)
  got=$(echo "$out" | head -1 | sed 's/.*-> \[//; s/\]//')
  [[ "$got" == "$(golden $fam alone 1)" ]] &&
    pass "$fam exported as $(ls "$W/${fam}_hub" | grep -c '^model-') shards: greedy equals transformers" ||
    fail "$fam exported sharded: $got, transformers $(golden $fam alone 1): $(echo "$out" | tail -2)"
done
a=$("$GEN" --hf "$DATA/llama" --prompt_ids $P1 --max_new_tokens 16 --top_k 8 --seed 3 | head -1)
b=$("$GEN" --hf "$DATA/llama" --prompt_ids $P1 --max_new_tokens 16 --top_k 8 --seed 3 | head -1)
[[ -n "$a" && "$a" == "$b" ]] && pass "sampling with --seed 3 repeats: $a" || fail "sampling: $a / $b"
# A checkpoint through --config: a tiny addition model trained 300 steps (long enough that the
# prompts' digits change its answers), its checkpoint loaded by
# the Trainer on one rank (task tokens: ids in and out).
"$R/tools/ds_data/ds-data" addition --digits 2 --train_examples 500 --val_examples 20 \
  --output_dir "$W/add" > /dev/null 2>&1
cat > "$W/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 1, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 16}
data: {train: $W/add/train.tok, seq_len: 10}
training: {train_iters: 300}
checkpoint: {dir: $W/ckpt}
device: {threads: 1}
YAML
"$R/runtime/worker/ds-worker" --config "$W/job.yaml" > "$W/train.log" 2>&1 || fail "training for --config"
# The golden: the same greedy decoding of step 300's consolidated weights, written out plainly in
# Python (gpt2_reference.py: no KV cache, no batching), for two prompts whose answers differ.
"$R/tools/ds_ckpt/ds-ckpt" consolidate "$W/ckpt/step_00000300" "$W/step300.safetensors" > /dev/null 2>&1
for prompt in 1,2,10,3,4,11 5,7,10,8,9,11; do
  out=$("$GEN" --config "$W/job.yaml" --prompt_ids $prompt --max_new_tokens 4 2>&1)
  ref=$(python3 "$(dirname "$0")/gpt2_reference.py" "$W/step300.safetensors" 4 $prompt 4 2>&1)
  got=$(echo "$out" | grep -m1 -o '^\[[0-9,]*\] -> \[[0-9,]*\]')
  [[ -n "$got" && "$got" == "$(echo "$ref" | head -1)" ]] && echo "$out" | grep -q "prefill 6 tokens" &&
    pass "--config: step 300's checkpoint generates the reference's tokens: $got ($(echo "$ref" | tail -1))" ||
    fail "--config: ds-generate $got, the Python reference $ref"
done
out=$("$GEN" --config "$W/job.yaml" --checkpoint "$W/ckpt/step_00000300" --prompt_ids 1,2,10 \
  --max_new_tokens 2 2>&1)
echo "$out" | grep -q "prefill 3 tokens" && pass "--checkpoint names the step directory" ||
  fail "--checkpoint: $out"

# The checkpoint exported as a Hugging Face folder (ds-ckpt export --config: config.json from the
# job, the weights in shards) generates what the checkpoint does: GPT-2 here, a Llama with
# grouped-query attention and its own head, and one with tied embeddings (no lm_head.weight in
# the folder, as transformers saves it), each Llama trained 30 steps.
sed 's/family: gpt2, n_layer: 1, n_embd: 32, n_head: 4,/family: llama, n_layer: 2, n_embd: 32, n_head: 4, n_kv_head: 2, tie_embeddings: false,/;
     s/train_iters: 300/train_iters: 30/; s|ckpt}|ckpt_llama}|' "$W/job.yaml" > "$W/job_llama.yaml"
sed 's/tie_embeddings: false/tie_embeddings: true/; s|ckpt_llama}|ckpt_tied}|' "$W/job_llama.yaml" > "$W/job_tied.yaml"
for job in job_llama job_tied; do
  "$R/runtime/worker/ds-worker" --config "$W/$job.yaml" > "$W/train_$job.log" 2>&1 || fail "$job training"
done
for job in job job_llama job_tied; do
  dir=$(sed -n 's/^checkpoint: {dir: \(.*\)}$/\1/p' "$W/$job.yaml")
  fam=$(grep -o 'family: [a-z0-9]*' "$W/$job.yaml" | cut -d' ' -f2)
  if "$R/tools/ds_ckpt/ds-ckpt" export --family $fam --config "$W/$job.yaml" --input "$dir" \
       --output "$W/${job}_hf" --max_shard_size 10KB > "$W/export.log" 2>&1; then
    a=$("$GEN" --hf "$W/${job}_hf" --prompt_ids 5,7,10,8,9,11 --max_new_tokens 4 2>&1 | grep -m1 -- '->')
    b=$("$GEN" --config "$W/$job.yaml" --prompt_ids 5,7,10,8,9,11 --max_new_tokens 4 2>&1 | grep -m1 -- '->')
    [[ -n "$a" && "$a" == "$b" && -f $W/${job}_hf/model.safetensors.index.json ]] &&
      pass "$job ($fam) exported with config.json in $(ls "$W/${job}_hf" | grep -c '^model-') shards generates as its checkpoint: $a" ||
      fail "$fam export with --config: --hf $a, --config $b"
  else fail "$fam export with --config: $(tail -2 "$W/export.log")"; fi
done
expect_export_error() {  # expect_export_error NAME PATTERN ARGS...
  local name=$1 pattern=$2
  shift 2
  if out=$("$R/tools/ds_ckpt/ds-ckpt" export "$@" 2>&1); then fail "$name: accepted"; return; fi
  echo "$out" | grep -q -- "$pattern" && pass "$name refused: $(echo "$out" | tail -1)" ||
    fail "$name: $(echo "$out" | tail -1)"
}
expect_export_error "a --family the job does not describe" "describes a llama model" \
  --family gpt2 --config "$W/job_llama.yaml" --input "$W/ckpt_llama" --output "$W/x_hf"

# A checkpoint saved by a tensor-parallel job (TP 2, ZeRO-1) generates on one rank: the same
# tokens as the job's layout-free twin trained from the same weights.
sed 's|checkpoint: {dir: $W/ckpt}|checkpoint: {dir: $W/ckpt_tp}\nparallel: {tensor: 2}\nzero_optimization: {stage: 1}|' \
  "$W/job.yaml" > "$W/job_tp.yaml"
printf '127.0.0.1 slots=2\n' > "$W/hosts"
if timeout 120 "$R/launcher/launch/ds-launch" "$W/job_tp.yaml" --hostfile "$W/hosts" \
    --worker "$R/runtime/worker/ds-worker" --agent "$R/launcher/agent/ds-agent" > "$W/tp.log" 2>&1; then
  a=$("$GEN" --config "$W/job_tp.yaml" --prompt_ids 1,2,10,3,4,11 --max_new_tokens 3 2>&1 | grep -- '->')
  b=$("$GEN" --config "$W/job.yaml" --prompt_ids 1,2,10,3,4,11 --max_new_tokens 3 2>&1 | grep -- '->')
  [[ "$a" == "$b" && "$a" == *"->"* ]] &&
    pass "a TP 2 checkpoint generates on one rank as the TP 1 one does: $a" || fail "TP 2: $a / $b"
else
  fail "TP 2 training: $(tail -3 "$W/tp.log")"
fi

expect_error() {  # expect_error NAME PATTERN ARGS...
  local name=$1 pattern=$2
  shift 2
  if out=$("$GEN" "$@" 2>&1); then fail "$name: accepted"; return; fi
  echo "$out" | grep -q -- "$pattern" && pass "$name refused: $(echo "$out" | tail -1)" ||
    fail "$name: $(echo "$out" | tail -1)"
}
expect_error "a prompt longer than the context" "exceed the context of 64" \
  --hf "$DATA/gpt2" --prompt_ids "$(seq -s, 1 60)" --max_new_tokens 8
expect_error "a text prompt without a tokenizer" "give --tokenizer" --hf "$DATA/gpt2" --prompt hello
expect_error "a tokenizer larger than the model" "has 552 tokens, more than the model's 64" \
  --hf "$DATA/gpt2" --tokenizer "$DATA/tokenizer.json" --prompt hello
expect_error "a SentencePiece model larger than the model" "has 600 tokens" \
  --hf "$DATA/gpt2" --tokenizer "$DATA/sp.model" --prompt hello
expect_error "an unknown tokenizer format" "unknown tokenizer format" \
  --hf "$DATA/gpt2" --tokenizer "$DATA/gpt2/model.safetensors" --prompt hello
expect_error "a token outside the vocabulary" "outside the vocabulary of 64" \
  --hf "$DATA/gpt2" --prompt_ids 1,99
printf '{"prompt_ids": [1]}\n' > "$W/bad.jsonl"
expect_error "a prompts file line without prompt or ids" "bad.jsonl:1" --hf "$DATA/gpt2" --prompts "$W/bad.jsonl"
mkdir -p "$W/other" && sed 's/"model_type": "gpt2"/"model_type": "mixtral"/' "$DATA/gpt2/config.json" > "$W/other/config.json"
expect_error "an unknown model_type" '"model_type" is "mixtral"' --hf "$W/other" --prompt_ids 1
# A sharded folder missing a shard, and an index that maps a tensor to a shard without it.
cp -r "$W/llama_sharded" "$W/broken" && rm "$W/broken/model-00003-of-00006.safetensors"
expect_error "a missing shard" "model.safetensors.index.json: shard model-00003-of-00006.safetensors" \
  --hf "$W/broken" --prompt_ids 1
cp "$W/llama_sharded/model-00003-of-00006.safetensors" "$W/broken/"
sed -i 's/"model.norm.weight": "model-0000[0-9]-of-00006.safetensors"/"model.norm.weight": "model-00001-of-00006.safetensors"/' \
  "$W/broken/model.safetensors.index.json"
expect_error "an index naming the wrong shard" "is mapped to model-00001-of-00006.safetensors" \
  --hf "$W/broken" --prompt_ids 1
sed 's/"n_embd": 32/"n_embd": 48/' "$DATA/gpt2/config.json" > "$W/other/config.json"
cp "$DATA/gpt2/model.safetensors" "$W/other/"
expect_error "weights of another shape" "model.safetensors" --hf "$W/other" --prompt_ids 1
expect_error "no model" "one of --hf DIR or --config JOB" --prompt_ids 1
sed 's/n_embd: 32/n_embd: 48/' "$W/job.yaml" > "$W/job_wide.yaml"
expect_error "a checkpoint of another model shape" "the model expects" \
  --config "$W/job_wide.yaml" --prompt_ids 1,2
echo "ds_generate_cli_test: $fails failed"
exit $((fails > 0))
