#!/usr/bin/env bash
# Mixture of experts end to end: ds-launch starts CPU ranks that train an MoE model over Gloo,
# the experts split over expert-parallel groups (parallel.expert), tokens exchanged by the plan's
# all-to-alls. Rank 0's loss and gradient-norm curves (monitor.csv) must match the single-rank run
# with the same micro-batches at every one of 20 steps (top-2 without drops and with the second
# expert by argmax, so that routing depends on the tokens alone):
#   GPT-2 (4 experts in every block) DP = 4 with EP = 2 on one node, ZeRO-2;
#   Mixtral-style Llama (top-2 SwiGLU experts) DP = 4 with EP = 4 over two nodes, ZeRO-1;
#   GPT-2 PR-MoE (residual experts in every second block) DP = 4, EP = 2, ZeRO-3;
#   GPT-2 with TP = 2 x DP = 2, EP = 2 over two nodes, ZeRO-2 (each tp rank routes half of the
#   tokens; the aux loss out of the objective, as each chunk's aux loss is its own);
#   GPT-2 PP = 2 x DP = 2 x EP = 2 over two nodes, ZeRO-1, and PR-MoE at the same layout, ZeRO-2
#   (its one MoE block on one stage: the other adds no aux term), each stage's aux terms summed.
# Each rank holds only its experts. A checkpoint saved at EP = 4 after 10 steps resumes at EP = 2
# and at one rank on the curve (each expert stored once, under its global id), and ds-ckpt
# consolidates it; a PP = 2 x EP = 2 checkpoint resumes on one rank;
# an EP = 4 Llama checkpoint exports to Hugging Face with Mixtral's names.
# Bad layouts and gating settings are refused before any process starts.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
CKPT=$R/tools/ds_ckpt/ds-ckpt
BASE=${TEST_TMPDIR:-$(mktemp -d)}/moe
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
printf '127.0.0.1 slots=4\n' > "$BASE/four"
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/two"

GATE='top_k: 2, drop_tokens: false, top2_2nd_expert_sampling: false'
MODEL_GPT="{family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10, moe: {num_experts: 4, $GATE}}"
MODEL_LLAMA="{family: llama, n_layer: 2, n_embd: 32, n_head: 4, n_kv_head: 2, vocab_size: 16, max_seq_len: 10, moe: {num_experts: 4, $GATE}}"
MODEL_TP="{family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10, moe: {num_experts: 4, moe_loss_coeff: 0.0, $GATE}}"
MODEL_PR="{family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10, moe: {num_experts: 4, expert_interval: 2, use_residual: true, $GATE}}"

job() {  # job FILE STAGE CSV MODEL [STEPS]
  cat > "$1" <<YAML
train_batch_size: 16
train_micro_batch_size_per_gpu: 4
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}
zero_optimization: {stage: $2, reduce_bucket_size: 5000, stage3_param_persistence_threshold: 100}
model: $4
data: {train: $BASE/data/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: ${5:-20}}
monitor: {csv: $3}
device: {threads: 1}
YAML
}

source "$(dirname "$0")/curves.sh"  # same, same_tail

for model in GPT LLAMA PR TP; do
  spec_var=MODEL_$model
  job "$BASE/single_$model.yaml" 0 "$BASE/single_$model.csv" "${!spec_var}"
  "$WORKER" --config "$BASE/single_$model.yaml" >/dev/null 2>&1 || fail "$model single-rank run"
done

run_case() {  # run_case NAME MODEL HOSTS EP STAGE [EXTRA_YAML] (EP may add "tensor: 2")
  local name=$1 spec_var=MODEL_$2 csv=$BASE/$RANDOM.csv
  job "$BASE/ep.yaml" "$5" "$csv" "${!spec_var}"
  printf 'parallel: {expert: %s}\n%s\n' "$4" "${6:-}" >> "$BASE/ep.yaml"
  if ! timeout 180 "$LAUNCH" "$BASE/ep.yaml" --hostfile "$3" --worker "$WORKER" --agent "$AGENT" \
      --heartbeat 0.5 > "$BASE/out" 2>&1; then
    fail "$name: ds-launch failed"; tail -8 "$BASE/out"; return
  fi
  if same "$BASE/single_$2.csv" "$csv" 1e-5; then
    pass "$name reproduces the single-rank curves (20 steps, loss rel. 1e-5, norm rel. 5e-5)"
  else
    fail "$name: curves differ"
    paste -d' ' <(cut -d, -f2,4 "$BASE/single_$2.csv") <(cut -d, -f2,4 "$csv") | head -6
  fi
}

run_case "GPT-2 MoE DP=4 x EP=2, ZeRO-2" GPT "$BASE/four" 2 2
grep -q "expert parallel: rank 3 is ep rank 1 of 2: holds experts 2-3 of 4" "$BASE/out" &&
  pass "EP=2: rank 3 says it holds experts 2-3" || fail "EP=2: no expert line"
run_case "Llama (Mixtral-style) DP=4 x EP=4 over two nodes, ZeRO-1" LLAMA "$BASE/two" 4 1 \
  "checkpoint: {dir: $BASE/ck_llama, save_interval: 20}"
# Hugging Face export with Mixtral's names: each expert its own w1 / w3 / w2.
if "$CKPT" export --family llama --input "$BASE/ck_llama" --output "$BASE/mixtral.safetensors" \
    > "$BASE/export.out" 2>&1 &&
   grep -aq "model.layers.1.block_sparse_moe.experts.3.w2.weight" "$BASE/mixtral.safetensors" &&
   grep -aq "model.layers.0.block_sparse_moe.gate.weight" "$BASE/mixtral.safetensors"; then
  pass "ds-ckpt exports the EP=4 Llama checkpoint with Mixtral's per-expert names"
else fail "Mixtral export"; tail -3 "$BASE/export.out"; fi
run_case "GPT-2 PR-MoE DP=4 x EP=2, ZeRO-3" PR "$BASE/four" 2 3
run_case "GPT-2 MoE TP=2 x DP=2 x EP=2 over two nodes, ZeRO-2" TP "$BASE/two" "2, tensor: 2" 2
grep -q "rank 3 is ep rank 1 of 2: holds experts 2-3 of 4 and routes 1/2 of the tokens" \
  "$BASE/out" && pass "TP x EP: rank 3 holds experts 2-3 and routes half of the tokens" ||
  fail "TP x EP: no expert line"
# Pipeline parallelism: each stage adds its own MoE layers' aux terms; the loss sums the stages'.
run_case "GPT-2 MoE PP=2 x DP=2 x EP=2 over two nodes, ZeRO-1" GPT "$BASE/two" "2, pipeline: 2" 1
grep -q "pipeline: rank 3 runs stage 1 of 2" "$BASE/out" &&
  grep -q "expert parallel: rank 3 is ep rank 1 of 2: holds experts 2-3 of 4" "$BASE/out" &&
  pass "PP x EP: rank 3 runs stage 1 and holds experts 2-3" || fail "PP x EP: no stage line"
run_case "GPT-2 PR-MoE PP=2 x DP=2 x EP=2 (a stage without experts), ZeRO-2" PR "$BASE/four" \
  "2, pipeline: 2" 2
# Saved at PP = 2 x EP = 2 after 10 steps, resumed on one rank: steps 11-20 on the curve.
job "$BASE/save_pp.yaml" 1 "$BASE/save_pp.csv" "$MODEL_GPT" 10
printf 'parallel: {expert: 2, pipeline: 2}\ncheckpoint: {dir: %s, save_interval: 10}\n' \
  "$BASE/ck_pp" >> "$BASE/save_pp.yaml"
csv=$BASE/$RANDOM.csv
job "$BASE/resume_pp.yaml" 0 "$csv" "$MODEL_GPT"
printf 'checkpoint: {dir: %s, load: latest}\n' "$BASE/ck_pp" >> "$BASE/resume_pp.yaml"
if timeout 180 "$LAUNCH" "$BASE/save_pp.yaml" --hostfile "$BASE/two" --worker "$WORKER" \
     --agent "$AGENT" --heartbeat 0.5 > "$BASE/out" 2>&1 &&
   timeout 180 "$WORKER" --config "$BASE/resume_pp.yaml" > "$BASE/out" 2>&1 &&
   same_tail "$BASE/single_GPT.csv" "$csv"; then
  pass "a PP=2 x EP=2 checkpoint resumes on one rank on the single-rank curve (steps 11-20)"
else fail "PP x EP resume"; tail -8 "$BASE/out"; fi

# Saved at EP = 4 after 10 steps, resumed at EP = 2 and on one rank: steps 11-20 on the curve.
CK=$BASE/ck
job "$BASE/save.yaml" 1 "$BASE/save.csv" "$MODEL_GPT" 10
printf 'parallel: {expert: 4}\ncheckpoint: {dir: %s, save_interval: 10}\n' "$CK" >> "$BASE/save.yaml"
timeout 180 "$LAUNCH" "$BASE/save.yaml" --hostfile "$BASE/four" --worker "$WORKER" --agent "$AGENT" \
  --heartbeat 0.5 > "$BASE/out" 2>&1 || { fail "EP=4 save"; tail -8 "$BASE/out"; }
for target in "EP=2" "one rank"; do
  csv=$BASE/$RANDOM.csv
  rm -rf "$BASE/ck_resume"; cp -r "$CK" "$BASE/ck_resume"
  job "$BASE/resume.yaml" 2 "$csv" "$MODEL_GPT"
  printf 'checkpoint: {dir: %s, load: latest}\n' "$BASE/ck_resume" >> "$BASE/resume.yaml"
  if [[ $target == EP=2 ]]; then
    printf 'parallel: {expert: 2}\n' >> "$BASE/resume.yaml"
    timeout 180 "$LAUNCH" "$BASE/resume.yaml" --hostfile "$BASE/four" --worker "$WORKER" \
      --agent "$AGENT" --heartbeat 0.5 > "$BASE/out" 2>&1
  else
    timeout 180 "$WORKER" --config "$BASE/resume.yaml" > "$BASE/out" 2>&1
  fi
  if [[ $? == 0 ]] && same_tail "$BASE/single_GPT.csv" "$csv"; then
    pass "an EP=4 checkpoint resumes at $target on the single-rank curve (steps 11-20)"
  else fail "resume at $target"; tail -8 "$BASE/out"; fi
done
if "$CKPT" consolidate "$CK/step_00000010" "$BASE/moe.safetensors" >/dev/null 2>&1 &&
   "$CKPT" verify "$CK/step_00000010" >/dev/null 2>&1; then
  pass "ds-ckpt verifies and consolidates the EP=4 checkpoint"
else fail "ds-ckpt on the EP checkpoint"; fi

# Refused before start, naming the setting and the numbers.
refused() {  # refused NAME PATTERN MODEL EXPERT
  local name=$1 pattern=$2
  job "$BASE/x.yaml" 0 "$BASE/x.csv" "$3"
  printf 'parallel: {expert: %s}\n' "$4" >> "$BASE/x.yaml"
  out=$("$LAUNCH" "$BASE/x.yaml" --hostfile "$BASE/four" --worker "$WORKER" --agent "$AGENT" 2>&1); rc=$?
  if [[ $rc == 2 ]] && grep -q -- "$pattern" <<<"$out" && ! grep -q "coordinator 127" <<<"$out"; then
    pass "$name refused before start: $pattern"
  else fail "$name: exit $rc: $out"; fi
}
refused "EP not dividing DP" "parallel.expert 3 must be >= 1 and divide the data-parallel size 4" \
  "$MODEL_GPT" 3
refused "EP not dividing num_experts" "parallel.expert 4 does not divide num_experts 6" \
  "${MODEL_GPT/num_experts: 4/num_experts: 6}" 4
refused "top_k above num_experts" "model.moe.top_k\" (line 6): must not exceed num_experts 1" \
  "${MODEL_GPT/num_experts: 4/num_experts: 1}" 1
refused "EP on a dense model" "parallel.expert 2 needs a mixture-of-experts model" \
  "{family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10}" 2

echo "moe_launch_test: $fails failed"
((fails == 0))
