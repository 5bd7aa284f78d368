#!/usr/bin/env bash
# Training on Megatron indexed datasets end to end: a job whose data.path is a 0.3 / 0.7
# blend of two .bin/.idx datasets (runtime/data/testdata/megatron, written by megatron-core's
# builder) with split "969,30,1" trains 50 steps of global batch 4, which reads exactly
# megatron-core's 200 blended samples (ds-data samples --config prints them; ds_data_cli_test
# and megatron_loader_test hold them to megatron-core's). Through ds-launch with real
# processes: DP = 2 (ZeRO 1) and DP = 2 (ZeRO 3) reproduce the single-rank loss curve and its
# validation loss (split 1); a DP = 2 run stopped at step 25 resumes at DP = 1 on the same
# curve (the checkpoint keeps the samples consumed), and a DP = 1 checkpoint resumes at DP = 2.
# With packed documents' masks (Megatron's reset_position_ids, reset_attention_mask,
# eod_mask_loss) DP = 2 at ZeRO 3 and TP = 2 reproduce the single-rank curve too.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
M=$R/runtime/data/testdata/megatron
BASE=${TEST_TMPDIR:-$(mktemp -d)}/mdata
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
printf '127.0.0.1 slots=2\n' > "$BASE/hosts"

job() {  # job FILE MICRO STAGE CSV ITERS [EXTRA YAML LINE]
  cat > "$1" <<YAML
train_batch_size: 4
train_micro_batch_size_per_gpu: $2
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}
zero_optimization: {stage: $3, reduce_bucket_size: 5000, stage3_param_persistence_threshold: 100}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 512, max_seq_len: 16}
data: {path: [0.3, $M/gpt_blend_a, 0.7, $M/gpt_blend_b], split: "969,30,1", seq_len: 16, seed: 42, train_samples: 200}
training: {train_iters: $5}
monitor: {csv: $4, eval_interval: 25, eval_iters: 5}
device: {threads: 1}
${6:-}
YAML
}

source "$(dirname "$0")/curves.sh"  # same_steps

launch() {  # launch YAML
  timeout 120 "$LAUNCH" "$1" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
    --heartbeat 0.5 >> "$BASE/out" 2>&1
}

job "$BASE/single.yaml" 4 0 "$BASE/single.csv" 50
"$WORKER" --config "$BASE/single.yaml" > "$BASE/single.out" 2>&1 || fail "single-rank run"
grep -q "step 50: validation loss" "$BASE/single.out" || fail "no validation loss at step 50"

for stage in 1 3; do
  job "$BASE/dp.yaml" 2 "$stage" "$BASE/dp_s$stage.csv" 50
  if launch "$BASE/dp.yaml" && same_steps "$BASE/single.csv" "$BASE/dp_s$stage.csv" 1 50; then
    pass "DP=2 ZeRO $stage on a Megatron blend reproduces the single-rank curve and validation loss (50 steps)"
  else
    fail "DP=2 ZeRO $stage: curves differ"; tail -5 "$BASE/out"
  fi
done

# DP=2 stops at step 25 (data.train_samples keeps the 200-sample order), DP=1 resumes to 50.
ck=$BASE/ck2
job "$BASE/first.yaml" 2 1 "$BASE/first.csv" 25 "checkpoint: {dir: $ck}"
job "$BASE/resume.yaml" 4 1 "$BASE/resume.csv" 50 "checkpoint: {dir: $ck, load: latest}"
if launch "$BASE/first.yaml" && "$WORKER" --config "$BASE/resume.yaml" >> "$BASE/out" 2>&1 &&
   grep -q '"position": 100' "$ck"/step_00000025/*.json 2>/dev/null &&
   same_steps "$BASE/single.csv" "$BASE/resume.csv" 26 50; then
  pass "a DP=2 checkpoint at step 25 (100 samples consumed) resumes at DP=1 on the single-rank curve"
else
  fail "DP=2 -> DP=1 resume left the curve"; grep -rh position "$ck" 2>/dev/null | head -2
fi

# And the other way: DP=1 stops at step 25, DP=2 resumes.
ck=$BASE/ck1
job "$BASE/first1.yaml" 4 1 "$BASE/first1.csv" 25 "checkpoint: {dir: $ck}"
job "$BASE/resume2.yaml" 2 1 "$BASE/resume2.csv" 50 "checkpoint: {dir: $ck, load: latest}"
if "$WORKER" --config "$BASE/first1.yaml" >> "$BASE/out" 2>&1 && launch "$BASE/resume2.yaml" &&
   same_steps "$BASE/single.csv" "$BASE/resume2.csv" 26 50; then
  pass "a DP=1 checkpoint at step 25 resumes at DP=2 on the single-rank curve"
else
  fail "DP=1 -> DP=2 resume left the curve"
fi

# Packed documents (reset_position_ids, reset_attention_mask, eod_mask_loss at EOD 0): the
# single-rank curve moves off the unmasked one, and DP = 2 at ZeRO 3 and TP = 2 stay on it.
packed() { sed -i 's/train_samples: 200}/train_samples: 200, reset_position_ids: true, reset_attention_mask: true, eod_mask_loss: true, eod_token: 0}/' "$1"; }
job "$BASE/psingle.yaml" 4 0 "$BASE/psingle.csv" 50
packed "$BASE/psingle.yaml"
if "$WORKER" --config "$BASE/psingle.yaml" > "$BASE/psingle.out" 2>&1 &&
   ! same_steps "$BASE/single.csv" "$BASE/psingle.csv" 2 50; then
  pass "packed documents' masks change the single-rank curve"
else
  fail "packed single-rank run"; tail -3 "$BASE/psingle.out"
fi
# eod_mask_loss leaves micro-batches with different counts of scored tokens, and each
# micro-batch's loss is its own mean (Megatron's default, a mean of per-micro-batch means):
# DP = 2 with micro-batches of 2 is held to one rank accumulating the same micro-batches of 2.
job "$BASE/psingle2.yaml" 2 0 "$BASE/psingle2.csv" 50
packed "$BASE/psingle2.yaml"
"$WORKER" --config "$BASE/psingle2.yaml" > "$BASE/psingle2.out" 2>&1 || fail "packed micro-2 run"
job "$BASE/pdp.yaml" 2 3 "$BASE/pdp.csv" 50
packed "$BASE/pdp.yaml"
job "$BASE/ptp.yaml" 4 1 "$BASE/ptp.csv" 50 "parallel: {tensor: 2}"
packed "$BASE/ptp.yaml"
for layout in dp:"DP=2 ZeRO 3":psingle2 tp:"TP=2":psingle; do
  IFS=: read -r key name ref <<< "$layout"
  if launch "$BASE/p$key.yaml" && same_steps "$BASE/$ref.csv" "$BASE/p$key.csv" 1 50; then
    pass "$name with packed documents' masks reproduces the single-rank curve ($ref)"
  else
    fail "$name with packed documents' masks left the curve"; tail -3 "$BASE/out"
  fi
done

# Bad input, refused before training: a missing prefix names it; fewer train_samples than
# the job reads; token files and Megatron datasets together.
job "$BASE/bad.yaml" 4 0 "$BASE/bad.csv" 50
sed -i "s|$M/gpt_blend_b|$M/no_such|" "$BASE/bad.yaml"
"$WORKER" --config "$BASE/bad.yaml" > "$BASE/bad.out" 2>&1
grep -q "no_such" "$BASE/bad.out" && ! grep -q "^step 1/" "$BASE/bad.out" &&
  pass "a missing dataset prefix is named before the first step" ||
  { fail "missing prefix"; tail -3 "$BASE/bad.out"; }
job "$BASE/bad.yaml" 4 0 "$BASE/bad.csv" 60
"$WORKER" --config "$BASE/bad.yaml" > "$BASE/bad.out" 2>&1
grep -q "data.train_samples 200 is fewer than the 240" "$BASE/bad.out" &&
  pass "data.train_samples below train_iters x train_batch_size is refused" ||
  { fail "short train_samples"; tail -3 "$BASE/bad.out"; }
job "$BASE/bad.yaml" 4 0 "$BASE/bad.csv" 50
sed -i "s|seq_len: 16, seed|train: x.tok, seq_len: 16, seed|" "$BASE/bad.yaml"
"$WORKER" --config "$BASE/bad.yaml" > "$BASE/bad.out" 2>&1
grep -q "data.train.*cannot be combined with data.path" "$BASE/bad.out" &&
  pass "data.train with data.path is refused" || { fail "train + path"; tail -3 "$BASE/bad.out"; }

[[ $fails == 0 ]] && echo "megatron data launch: ok" || echo "megatron data launch: $fails failed"
exit $((fails > 0))
