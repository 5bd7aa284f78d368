#!/usr/bin/env bash
# Supervised fine-tuning end to end: `ds-data preprocess --json-keys prompt chosen` turns
# DeepSpeed-Chat-style JSON lines (prompt, chosen) into the two paired datasets with a
# tokenizer.json, and a job's data.sft trains on them with the loss on the answers only (each
# answer followed by data.eod_token). Through ds-launch with real processes: DP = 2 at ZeRO 2
# reproduces one rank accumulating the same micro-batches (loss and validation loss, 20
# steps), and a DP = 2 checkpoint at step 10 resumes on one rank on the same curve.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
TOK=$R/runtime/generate/testdata/tokenizer.json
BASE=${TEST_TMPDIR:-$(mktemp -d)}/sft
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
printf '127.0.0.1 slots=2\n' > "$BASE/hosts"

python3 - "$BASE" <<'PY'
import json, random, sys
random.seed(3)
words = ["the", "model", "data", "rank", "zero", "train", "layer", "token", "fox", "dog"]
for name, n in (("train", 48), ("val", 8)):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for _ in range(n):
            a, b = random.randint(1, 9), random.randint(1, 9)
            prompt = "Human: add " + " ".join(random.choice(words) for _ in range(a)) + " Assistant:"
            answer = " " + " ".join(str(random.randint(0, 99)) for _ in range(b))
            f.write(json.dumps({"prompt": prompt, "chosen": answer, "rejected": "no"}) + "\n")
PY
for split in train val; do
  "$DATA" preprocess --input "$BASE/$split.jsonl" --json-keys prompt chosen --tokenizer "$TOK" \
    --output-prefix "$BASE/$split" > "$BASE/pre.out" 2>&1 || { fail "preprocess $split"; cat "$BASE/pre.out"; }
done
[[ -f $BASE/train_prompt_document.idx && -f $BASE/train_chosen_document.idx ]] &&
  pass "ds-data preprocess --json-keys prompt chosen wrote the paired datasets" ||
  fail "paired datasets missing"

job() {  # job FILE MICRO STAGE CSV ITERS [EXTRA YAML LINE]
  cat > "$1" <<YAML
train_batch_size: 4
train_micro_batch_size_per_gpu: $2
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 0.003}}
zero_optimization: {stage: $3}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 560, max_seq_len: 32}
data:
  seq_len: 32
  eod_token: 0
  seed: 5
  sft: {prompt: $BASE/train_prompt_document, answer: $BASE/train_chosen_document,
        validation_prompt: $BASE/val_prompt_document, validation_answer: $BASE/val_chosen_document,
        max_prompt_seq_len: 20, max_answer_seq_len: 10}
training: {train_iters: $5}
monitor: {csv: $4, eval_interval: 10, eval_iters: 2}
device: {threads: 1}
${6:-}
YAML
}
source "$(dirname "$0")/curves.sh"  # same_steps
launch() {
  timeout 120 "$LAUNCH" "$1" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 >> "$BASE/out" 2>&1
}

job "$BASE/single.yaml" 2 0 "$BASE/single.csv" 20
"$WORKER" --config "$BASE/single.yaml" > "$BASE/single.out" 2>&1 || { fail "single-rank SFT"; tail -3 "$BASE/single.out"; }
first=$(sed -n 2p "$BASE/single.csv" | cut -d, -f2); last=$(sed -n 21p "$BASE/single.csv" | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' &&
  pass "SFT lowers the answers' loss over 20 steps ($first -> $last)" || fail "SFT loss did not fall ($first -> $last)"

job "$BASE/dp.yaml" 2 2 "$BASE/dp.csv" 20
if launch "$BASE/dp.yaml" && same_steps "$BASE/single.csv" "$BASE/dp.csv" 1 20; then
  pass "DP=2 ZeRO 2 SFT reproduces the single-rank curve and validation loss"
else
  fail "DP=2 SFT left the curve"; tail -3 "$BASE/out"
fi

ck=$BASE/ck
job "$BASE/first.yaml" 2 2 "$BASE/first.csv" 10 "checkpoint: {dir: $ck}"
job "$BASE/resume.yaml" 2 0 "$BASE/resume.csv" 20 "checkpoint: {dir: $ck, load: latest}"
if launch "$BASE/first.yaml" && "$WORKER" --config "$BASE/resume.yaml" >> "$BASE/out" 2>&1 &&
   same_steps "$BASE/single.csv" "$BASE/resume.csv" 11 20; then
  pass "a DP=2 SFT checkpoint at step 10 resumes on one rank on the single-rank curve"
else
  fail "SFT resume left the curve"
fi

[[ $fails == 0 ]] && echo "sft launch: ok" || echo "sft launch: $fails failed"
exit $((fails > 0))
