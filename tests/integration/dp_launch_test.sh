#!/usr/bin/env bash
# Data parallelism end to end: ds-launch starts DP = 2 (1 node x 2 slots) and DP = 4
# (127.0.0.1 and 127.0.0.2, 2 slots each) CPU ranks that train over Gloo through the planned
# step with ZeRO stages 0, 1, 2 and 3 (stage 3 with a persistence threshold of 100 elements,
# so the weight matrices are gathered per block); rank 0's loss curve must match the single-rank curve with
# the same global batch within a relative 1e-5 at every one of 20 steps. A world size that
# does not divide the batch is rejected before any process starts. A DP=4 stage-3 checkpoint
# (one shard file per rank) resumes as DP=2 stage 1 on the same curve. device.type cuda with
# DS_ACCELERATOR=host (model states on a host-emulated device) matches too at stages 1-2.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
BASE=${TEST_TMPDIR:-$(mktemp -d)}/dp
rm -rf "$BASE"; mkdir -p "$BASE"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
printf '127.0.0.1 slots=2\n' > "$BASE/one"
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' > "$BASE/two"

job() {  # job FILE MICRO STAGE CSV
  cat > "$1" <<YAML
train_batch_size: 16
train_micro_batch_size_per_gpu: $2
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 0.003, weight_decay: 0.1}}
zero_optimization: {stage: $3, reduce_bucket_size: 5000, stage3_param_persistence_threshold: 100}
model: {family: gpt2, n_layer: 2, n_embd: 32, n_head: 4, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10, shuffle: true}
training: {train_iters: 20}
monitor: {csv: $4}
device: {threads: 1}
YAML
}

job "$BASE/single.yaml" 16 0 "$BASE/single.csv"
"$WORKER" --config "$BASE/single.yaml" >/dev/null 2>&1 || fail "single-rank run"
for stage in 0 1 2 3; do
  for world in 2 4; do
    name="dp=$world stage $stage"
    hosts=$BASE/one; [[ $world == 4 ]] && hosts=$BASE/two
    csv=$BASE/dp${world}_s$stage.csv
    job "$BASE/dp.yaml" $((16 / world)) "$stage" "$csv"
    if ! timeout 120 "$LAUNCH" "$BASE/dp.yaml" --hostfile "$hosts" --worker "$WORKER" --agent "$AGENT" \
        --heartbeat 0.5 > "$BASE/out" 2>&1; then
      fail "$name: ds-launch failed"; tail -8 "$BASE/out"; continue
    fi
    if paste -d, <(cut -d, -f2 "$BASE/single.csv" | tail -n +2) <(cut -d, -f2 "$csv" | tail -n +2) |
        awk -F, 'NF == 2 && $1 != "" { n++; d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > 1e-5) bad++ }
                 END { exit !(n == 20 && bad == 0) }'; then
      pass "$name reproduces the single-rank loss curve (20 steps, rel. diff <= 1e-5)"
    else
      fail "$name: loss curves differ"; paste -d' ' <(cut -d, -f2 "$BASE/single.csv") <(cut -d, -f2 "$csv") | head -6
    fi
  done
done

# Sharded checkpoints over Gloo with real processes: DP=4 stage 3 saves at step 10 (one shard
# file per rank), then DP=2 stage 1 resumes it; steps 11-20 must continue the single-rank curve.
ck=$BASE/ckpt
job "$BASE/s3.yaml" 4 3 "$BASE/s3.csv"
sed -i 's/train_iters: 20/train_iters: 10/' "$BASE/s3.yaml"
printf 'checkpoint: {dir: %s}\n' "$ck" >> "$BASE/s3.yaml"
job "$BASE/resume.yaml" 8 1 "$BASE/resume.csv"
printf 'checkpoint: {dir: %s, load: latest}\n' "$ck" >> "$BASE/resume.yaml"
if timeout 120 "$LAUNCH" "$BASE/s3.yaml" --hostfile "$BASE/two" --worker "$WORKER" --agent "$AGENT" \
     --heartbeat 0.5 > "$BASE/out" 2>&1 &&
   [[ $(ls "$ck"/step_00000010/zero_shard_rank_*.safetensors 2>/dev/null | wc -l) == 4 ]] &&
   timeout 120 "$LAUNCH" "$BASE/resume.yaml" --hostfile "$BASE/one" --worker "$WORKER" --agent "$AGENT" \
     --heartbeat 0.5 >> "$BASE/out" 2>&1; then
  if paste -d, <(cut -d, -f1,2 "$BASE/single.csv" | tail -n +12) <(cut -d, -f1,2 "$BASE/resume.csv" | tail -n +2) |
      awk -F, 'NF == 4 && $1 == $3 { n++; d = ($2 - $4) / $2; if (d < 0) d = -d; if (d > 1e-5) bad++ }
               END { exit !(n == 10 && bad == 0) }'; then
    pass "a DP=4 stage-3 checkpoint (4 shard files) resumes as DP=2 stage 1 on the single-rank curve"
  else
    fail "resumed curve differs"; paste -d' ' <(tail -n +12 "$BASE/single.csv" | cut -d, -f1,2) \
      <(tail -n +2 "$BASE/resume.csv" | cut -d, -f1,2) | head -4
  fi
else
  fail "sharded checkpoint save/resume over Gloo"; tail -8 "$BASE/out"; ls -R "$ck" 2>/dev/null | head
fi

# device.type cuda with DS_ACCELERATOR=host (runtime/exec/accelerator.h), forwarded by
# ds-launch: each rank keeps its model states in "device" memory, steps the optimizer there
# and stages its collectives through the host over Gloo, as a GPU rank without NCCL would.
for stage in 1 2; do
  name="device states (DS_ACCELERATOR=host), dp=2 stage $stage"
  csv=$BASE/dev_s$stage.csv
  job "$BASE/dev.yaml" 8 "$stage" "$csv"
  sed -i 's/device: {threads: 1}/device: {type: cuda, threads: 1}/' "$BASE/dev.yaml"
  if ! DS_ACCELERATOR=host timeout 120 "$LAUNCH" "$BASE/dev.yaml" --hostfile "$BASE/one" --worker "$WORKER" \
      --agent "$AGENT" --heartbeat 0.5 > "$BASE/out" 2>&1; then
    fail "$name: ds-launch failed"; tail -8 "$BASE/out"; continue
  fi
  if ! grep -q "optimizer run on cpu (host memory)" "$BASE/out" "$BASE"/home/jobs/*/logs/* 2>/dev/null &&
     ! grep -rq "optimizer run on cpu (host memory)" "$DS_RUNTIME_HOME" 2>/dev/null; then
    fail "$name: no rank said its model states were on the (host-emulated) device"; continue
  fi
  if paste -d, <(cut -d, -f2 "$BASE/single.csv" | tail -n +2) <(cut -d, -f2 "$csv" | tail -n +2) |
      awk -F, 'NF == 2 && $1 != "" { n++; d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > 1e-5) bad++ }
               END { exit !(n == 20 && bad == 0) }'; then
    pass "$name reproduces the single-rank loss curve"
  else
    fail "$name: loss curves differ"; paste -d' ' <(cut -d, -f2 "$BASE/single.csv") <(cut -d, -f2 "$csv") | head -6
  fi
done

printf '127.0.0.1 slots=3\n' > "$BASE/three"
job "$BASE/dp.yaml" 4 1 "$BASE/x.csv"
out=$("$LAUNCH" "$BASE/dp.yaml" --hostfile "$BASE/three" --worker "$WORKER" --agent "$AGENT" 2>&1); rc=$?
if [[ $rc == 2 ]] && grep -q "16" <<<"$out" && ! grep -q "coordinator 127" <<<"$out"; then
  pass "world 3 with batch 16 rejected before anything starts"
else fail "world 3: exit $rc: $out"; fi

# Tensor-parallel grids (ds-launch --tp): tp_launch_test.sh.

echo "dp_launch_test: $fails failure(s)"
[[ $fails -eq 0 ]]
