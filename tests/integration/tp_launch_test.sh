#!/usr/bin/env bash
# Tensor parallelism end to end: ds-launch starts CPU ranks that train over Gloo through the
# planned step, the tp all-reduces as plan instructions on each node's tp group. Rank 0's loss
# and gradient-norm curves (monitor.csv, 6 decimals) must match the single-rank run with the
# same global batch at every one of 20 steps:
#   TP = 2 and TP = 4 on one node (GPT-2), TP = 2 for Llama with grouped-query attention, TP = 4
#   for Llama with 2 kv heads (replicated on 2 ranks each): the
#     loss within 1e-6 relative (plus the CSV's last printed digit), the norm within 5e-5 (see
#     same() below)
#   TP = 2 x DP = 2 over two nodes (127.0.0.1 and 127.0.0.2), ZeRO-1, 2 and 3: within 1e-5
#   with sequence parallelism (and, for Llama, full recompute through DeepSpeed's
#   activation_checkpointing block) the same, and full recompute with partition_activations
#   (each tp rank keeps half of every block input) at TP = 2 x DP = 2
#   TP = 2 and TP = 2 x DP = 2 (ZeRO-2) in bf16 against the single rank in bf16: the loss within
#   1e-3, the norm within 5e-2 (bf16's rounding of the all-reduced sums)
# A TP=2 x DP=2 checkpoint resumes on one rank, and ds-ckpt consolidates and exports it. Bad
# grids are refused before any process starts, naming the key and the numbers: a tp group
# that would span nodes, a vocabulary tp does not divide.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
BASE=${TEST_TMPDIR:-$(mktemp -d)}/tp
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
printf '127.0.0.1 slots=2\n' > "$BASE/one"
printf '127.0.0.1 slots=4\n' > "$BASE/four"
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/two"

MODEL_GPT='{family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10}'
MODEL_LLAMA='{family: llama, n_layer: 2, n_embd: 32, n_head: 4, n_kv_head: 2, vocab_size: 16, max_seq_len: 10}'

job() {  # job FILE MICRO STAGE CSV MODEL
  cat > "$1" <<YAML
train_batch_size: 16
train_micro_batch_size_per_gpu: $2
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}
zero_optimization: {stage: $3, reduce_bucket_size: 5000}
model: $5
data: {train: $BASE/data/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: 20}
monitor: {csv: $4}
device: {threads: 1}
YAML
}

source "$(dirname "$0")/curves.sh"  # same, same_tail

launch() {  # launch YAML HOSTS TP
  timeout 180 "$LAUNCH" "$1" --hostfile "$2" --tp "$3" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 > "$BASE/out" 2>&1
}

for model in gpt llama; do
  spec=$MODEL_GPT; [[ $model == llama ]] && spec=$MODEL_LLAMA
  job "$BASE/single_$model.yaml" 16 0 "$BASE/single_$model.csv" "$spec"
  "$WORKER" --config "$BASE/single_$model.yaml" >/dev/null 2>&1 || fail "$model single-rank run"
done

run_case() {  # run_case NAME MODEL HOSTS TP MICRO STAGE REL [EXTRA_YAML]
  local name=$1 model=$2 csv=$BASE/$RANDOM.csv spec=$MODEL_GPT
  [[ $model == llama ]] && spec=$MODEL_LLAMA
  job "$BASE/tp.yaml" "$5" "$6" "$csv" "$spec"
  [[ -n "${8:-}" ]] && printf '%s\n' "$8" >> "$BASE/tp.yaml"
  if ! launch "$BASE/tp.yaml" "$3" "$4"; then
    fail "$name: ds-launch failed"; tail -8 "$BASE/out"; return
  fi
  if same "$BASE/single_$model.csv" "$csv" "$7"; then
    pass "$name reproduces the single-rank curves (20 steps, loss rel. $7, norm rel. 5e-5)"
  else
    fail "$name: curves differ"
    paste -d' ' <(cut -d, -f2,4 "$BASE/single_$model.csv") <(cut -d, -f2,4 "$csv") | head -6
  fi
}

run_case "GPT-2 TP=2" gpt "$BASE/one" 2 16 0 1e-6
run_case "GPT-2 TP=4" gpt "$BASE/four" 4 16 0 1e-6
run_case "Llama (GQA, kv heads split) TP=2" llama "$BASE/one" 2 16 0 1e-6
run_case "GPT-2 TP=2 x DP=2 over two nodes, ZeRO-1" gpt "$BASE/two" 2 8 1 1e-5
run_case "GPT-2 TP=2 x DP=2 over two nodes, ZeRO-2" gpt "$BASE/two" 2 8 2 1e-5
run_case "GPT-2 TP=2 x DP=2 over two nodes, ZeRO-3" gpt "$BASE/two" 2 8 3 1e-5
MODEL_MQA='{family: llama, n_layer: 2, n_embd: 32, n_head: 8, n_kv_head: 2, vocab_size: 16, max_seq_len: 10}'
job "$BASE/single_mqa.yaml" 16 0 "$BASE/single_mqa.csv" "$MODEL_MQA"
"$WORKER" --config "$BASE/single_mqa.yaml" >/dev/null 2>&1 || fail "kv-replicated single-rank run"
cp "$BASE/single_mqa.yaml" "$BASE/mqa.yaml"; sed -i "s#single_mqa.csv#mqa.csv#" "$BASE/mqa.yaml"
if launch "$BASE/mqa.yaml" "$BASE/four" 4 && same "$BASE/single_mqa.csv" "$BASE/mqa.csv" 1e-6; then
  pass "Llama with 2 kv heads at TP=4 (each kv head replicated on 2 ranks) reproduces the single-rank curves"
else fail "kv-replicated TP=4"; tail -5 "$BASE/out"; fi
SP='parallel: {sequence_parallel: true}'
run_case "GPT-2 TP=2 + sequence parallelism" gpt "$BASE/one" 2 16 0 1e-6 "$SP"
run_case "Llama TP=2 + sequence parallelism + full recompute" llama "$BASE/one" 2 16 0 1e-6 \
  "$SP"$'\n'"activation_checkpointing: {}"
run_case "GPT-2 TP=2 x DP=2 + sequence parallelism, ZeRO-2" gpt "$BASE/two" 2 8 2 1e-5 "$SP"
# bf16: the all-reduces sum the executor's bf16 activations and gradients (widened, summed,
# rounded once per exchange) where the single rank rounds one product: the curves agree to
# bf16's rounding, as data parallelism's bf16 curves do (the loss within 1e-3, the norm 5e-2).
BF16='bf16: {enabled: true}'
job "$BASE/single_gpt_bf16.yaml" 16 0 "$BASE/single_gpt_bf16.csv" "$MODEL_GPT"
echo "$BF16" >> "$BASE/single_gpt_bf16.yaml"
"$WORKER" --config "$BASE/single_gpt_bf16.yaml" >/dev/null 2>&1 || fail "bf16 single-rank run"
for grid in "one 2 16 0 TP=2" "two 2 8 2 TP=2 x DP=2 over two nodes, ZeRO-2"; do
  read -r hosts tp micro stage name <<< "$grid"
  job "$BASE/tp_bf16.yaml" "$micro" "$stage" "$BASE/tp_bf16.csv" "$MODEL_GPT"
  echo "$BF16" >> "$BASE/tp_bf16.yaml"
  if launch "$BASE/tp_bf16.yaml" "$BASE/$hosts" "$tp" && same "$BASE/single_gpt_bf16.csv" "$BASE/tp_bf16.csv" 1e-3 5e-2; then
    pass "GPT-2 $name in bf16 reproduces the single-rank bf16 curves (loss rel. 1e-3, norm 5e-2)"
  else fail "GPT-2 $name in bf16"; tail -4 "$BASE/out"; fi
done
PART='activation_checkpointing: {partition_activations: true}'
run_case "GPT-2 TP=2 x DP=2 + full recompute with partition_activations, ZeRO-1" gpt "$BASE/two" \
  2 8 1 1e-5 "$PART"
if grep -rq "partition_activations: 2 block inputs kept as 1/2 slices" "$BASE/out" "$DS_RUNTIME_HOME" 2>/dev/null; then
  pass "rank 0 says it keeps half of each block input"
else fail "no partition_activations line"; tail -5 "$BASE/out"; fi
if grep -rq "tensor parallel: rank 3 is tp rank 1 of 2, dp rank 1 of 2" "$DS_RUNTIME_HOME" "$BASE/out" 2>/dev/null; then
  pass "rank 3 of the TP=2 x DP=2 grid is tp rank 1, dp rank 1 (Megatron's order)"
else fail "no rank said its grid place"; fi

# Checkpoints: TP=2 x DP=2 ZeRO-1 saves at step 10 (one file per rank, every slice a range of a
# whole parameter); a single rank resumes it on the single-rank curve (steps 11-20, 1e-5), no
# conversion step; ds-ckpt consolidate and export read it whole, and its weights equal the
# single-rank run's at step 10 (1e-4: ten AdamW steps amplify the last bits of small gradients).
ck=$BASE/ckpt
job "$BASE/save.yaml" 8 1 "$BASE/save.csv" "$MODEL_GPT"
sed -i 's/train_iters: 20/train_iters: 10/' "$BASE/save.yaml"
printf 'checkpoint: {dir: %s}\n' "$ck" >> "$BASE/save.yaml"
job "$BASE/resume.yaml" 16 0 "$BASE/resume.csv" "$MODEL_GPT"
printf 'checkpoint: {dir: %s, load: latest}\n' "$ck" >> "$BASE/resume.yaml"
job "$BASE/single10.yaml" 16 0 "$BASE/single10.csv" "$MODEL_GPT"
sed -i 's/train_iters: 20/train_iters: 10/' "$BASE/single10.yaml"
printf 'checkpoint: {dir: %s}\n' "$BASE/ck1" >> "$BASE/single10.yaml"
if launch "$BASE/save.yaml" "$BASE/two" 2 &&
   [[ $(ls "$ck"/step_00000010/zero_shard_rank_*.safetensors 2>/dev/null | wc -l) == 4 ]] &&
   "$WORKER" --config "$BASE/resume.yaml" >/dev/null 2>&1; then
  if paste -d, <(cut -d, -f1,2 "$BASE/single_gpt.csv" | tail -n +12) <(cut -d, -f1,2 "$BASE/resume.csv" | tail -n +2) |
      awk -F, 'NF == 4 && $1 == $3 { n++; d = ($2 - $4) / $2; if (d < 0) d = -d; if (d > 1e-5) bad++ }
               END { exit !(n == 10 && bad == 0) }'; then
    pass "a TP=2 x DP=2 ZeRO-1 checkpoint (4 files) resumes on one rank on the single-rank curve"
  else
    fail "resumed curve differs"; paste -d' ' <(tail -n +12 "$BASE/single_gpt.csv" | cut -d, -f1,2) \
      <(tail -n +2 "$BASE/resume.csv" | cut -d, -f1,2) | head -4
  fi
else
  fail "TP checkpoint save / resume"; tail -8 "$BASE/out"; ls -R "$ck" 2>/dev/null | head
fi
CKPT=$R/tools/ds_ckpt/ds-ckpt
"$WORKER" --config "$BASE/single10.yaml" >/dev/null 2>&1
if "$CKPT" consolidate "$ck/step_00000010" "$BASE/tp.safetensors" >/dev/null 2>&1 &&
   "$CKPT" consolidate "$BASE/ck1" "$BASE/one.safetensors" >/dev/null 2>&1 &&
   "$CKPT" export --family gpt2 --input "$ck/step_00000010" --output "$BASE/hf.safetensors" >/dev/null 2>&1 &&
   "${PYTHON:-/usr/bin/python3}" - "$BASE/tp.safetensors" "$BASE/one.safetensors" "$BASE/hf.safetensors" <<'PY'
import json, struct, sys
import numpy as np
def load(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
            dtype=np.float32).reshape(v["shape"]) for k, v in h.items() if k != "__metadata__"}
tp, one, hf = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
assert tp.keys() == one.keys(), (sorted(tp), sorted(one))
worst = max(float(np.abs(tp[k] - one[k]).max()) for k in tp)
assert all(tp[k].shape == one[k].shape for k in tp)
assert "transformer.h.0.attn.c_attn.weight" in hf, sorted(hf)[:5]
print("largest difference", worst); sys.exit(worst > 1e-4)
PY
then
  pass "ds-ckpt consolidate and export read the TP=2 x DP=2 checkpoint whole; its weights are the single rank's"
else fail "consolidate / export of the TP checkpoint"; fi

# Refused before start, with the numbers.
job "$BASE/x.yaml" 8 1 "$BASE/x.csv" "$MODEL_GPT"
printf '127.0.0.1 slots=3\n127.0.0.2 slots=1\n' > "$BASE/uneven"
out=$("$LAUNCH" "$BASE/x.yaml" --hostfile "$BASE/uneven" --tp 2 --worker "$WORKER" --agent "$AGENT" 2>&1); rc=$?
if [[ $rc == 2 ]] && grep -q "node 127.0.0.1 has 3 slots, so a tensor-parallel group would span two nodes" <<<"$out"; then
  pass "--tp 2 over 3 + 1 slots refused: a tensor-parallel group would span nodes"
else fail "--tp uneven: exit $rc: $out"; fi
job "$BASE/x.yaml" 16 0 "$BASE/x.csv" '{family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 18, max_seq_len: 10}'
out=$("$LAUNCH" "$BASE/x.yaml" --hostfile "$BASE/four" --tp 4 --worker "$WORKER" --agent "$AGENT" 2>&1); rc=$?
if [[ $rc == 2 ]] && grep -q "parallel.tensor 4 does not divide model.vocab_size 18" <<<"$out" &&
   ! grep -q "coordinator 127" <<<"$out"; then
  pass "--tp 4 with vocab_size 18 refused before start, naming model.vocab_size"
else fail "--tp 4 vocab 18: exit $rc: $out"; fi

# Pipeline layouts are checked before start too: the stage split, then the schedule.
refused() {  # refused NAME PATTERN LAUNCH_ARGS...
  local name=$1 pattern=$2; shift 2
  out=$("$LAUNCH" "$BASE/x.yaml" --hostfile "$BASE/four" --worker "$WORKER" --agent "$AGENT" "$@" 2>&1); rc=$?
  if [[ $rc == 2 ]] && grep -q -- "$pattern" <<<"$out" && ! grep -q "coordinator 127" <<<"$out"; then
    pass "$name refused before start: $pattern"
  else fail "$name: exit $rc: $out"; fi
}
job "$BASE/x.yaml" 8 0 "$BASE/x.csv" "$MODEL_GPT"
refused "--pp 4 over 2 blocks" "has 2 transformer blocks; each stage needs one" --pp 4
printf 'pipeline: {schedule: gpipe}\n' >> "$BASE/x.yaml"
refused "an unknown schedule" 'pipeline.schedule "gpipe" must be 1f1b, interleaved or zb-h1' --pp 2
job "$BASE/x.yaml" 8 0 "$BASE/x.csv" '{family: gpt2, n_layer: 4, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10}'
printf 'pipeline: {schedule: interleaved, virtual_stages: 2}\n' >> "$BASE/x.yaml"
refused "interleaving 1 micro-batch" "the least is 2" --pp 2

echo "tp_launch_test: $fails failure(s)"
[[ $fails -eq 0 ]]
