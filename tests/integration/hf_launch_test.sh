#!/usr/bin/env bash
# Hugging Face folders under the parallel layouts: Llama 3.2's form (llama3 RoPE, tied
# embeddings), Qwen 2 (q/k/v biases) and OPT (learned positions from row 2, project_in/out,
# ReLU) from runtime/generate/testdata/families, each trained with `model: {hf: DIR}` through
# ds-launch at TP = 2, PP = 2 and ZeRO-3 DP = 2, and Qwen 3 (per-head q/k norms, whose weights'
# gradients are all-reduced over tp) at TP = 2 (real processes over Gloo, the weights read by
# every rank from the folder), reproduce their single-rank loss and gradient-norm curves at all
# 20 steps (curves.sh's same(): loss within 1e-5 relative, norm 5e-5). ds-launch plan works on
# such a job, and a folder with a missing shard is refused by ds-launch before any process
# starts.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
FAM=$R/runtime/generate/testdata/families
BASE=${TEST_TMPDIR:-$(mktemp -d)}/hf_launch
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
printf '127.0.0.1 slots=2\n' > "$BASE/two"

job() {  # job FILE MICRO STAGE CSV DIR
  cat > "$1" <<YAML
train_batch_size: 16
train_micro_batch_size_per_gpu: $2
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}
zero_optimization: {stage: $3, reduce_bucket_size: 5000}
model: {hf: $5}
data: {train: $BASE/data/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: 20}
monitor: {csv: $4}
device: {threads: 1}
YAML
}

source "$(dirname "$0")/curves.sh"  # same

for model in llama3-tied qwen2 opt qwen3; do
  dir=$FAM/$model
  job "$BASE/single_$model.yaml" 16 0 "$BASE/single_$model.csv" "$dir"
  if ! "$WORKER" --config "$BASE/single_$model.yaml" > "$BASE/out" 2>&1; then
    fail "$model single-rank run: $(tail -2 "$BASE/out")"; continue
  fi
  layouts=("TP=2:8:0:--tp 2" "PP=2:4:0:--pp 2" "ZeRO-3 DP=2:8:3:")
  [[ $model == qwen3 ]] && layouts=("TP=2:8:0:--tp 2")  # its q/k norms split by heads
  for layout in "${layouts[@]}"; do
    IFS=: read -r name micro stage flags <<<"$layout"
    csv=$BASE/${model}_$RANDOM.csv
    job "$BASE/par.yaml" "$micro" "$stage" "$csv" "$dir"
    # shellcheck disable=SC2086
    if ! timeout 180 "$LAUNCH" "$BASE/par.yaml" --hostfile "$BASE/two" $flags --worker "$WORKER" \
        --agent "$AGENT" --heartbeat 0.5 > "$BASE/out" 2>&1; then
      fail "$model $name: ds-launch failed: $(tail -3 "$BASE/out")"; continue
    fi
    if same "$BASE/single_$model.csv" "$csv" 1e-5; then
      pass "$model $name reproduces the single-rank curves (20 steps)"
    else
      fail "$model $name: curves differ"
      paste -d' ' <(cut -d, -f2,4 "$BASE/single_$model.csv") <(cut -d, -f2,4 "$csv") | head -21
    fi
  done
done

job "$BASE/plan.yaml" 8 3 "$BASE/plan.csv" "$FAM/qwen2"
if "$LAUNCH" plan "$BASE/plan.yaml" --world 2 > "$BASE/plan.out" 2>&1 &&
    grep -q "qwen2" "$BASE/plan.out"; then
  pass "ds-launch plan on a model.hf job"
else
  fail "ds-launch plan: $(tail -3 "$BASE/plan.out")"
fi

cp -r "$FAM/opt" "$BASE/broken" && rm "$BASE/broken/model-00003-of-00004.safetensors"
job "$BASE/broken.yaml" 8 0 "$BASE/broken.csv" "$BASE/broken"
out=$(timeout 60 "$LAUNCH" "$BASE/broken.yaml" --hostfile "$BASE/two" --worker "$WORKER" \
  --agent "$AGENT" 2>&1)
if [[ $? -ne 0 ]] && grep -qF "model-00003-of-00004.safetensors" <<<"$out" &&
    ! grep -q "starting\|agent" <<<"$(grep -i "rank 0" <<<"$out")"; then
  pass "a missing shard is refused by ds-launch before any process starts"
else
  fail "missing shard: $(tail -3 <<<"$out")"
fi

echo "hf_launch_test: $fails failure(s)"
[[ $fails -eq 0 ]]
