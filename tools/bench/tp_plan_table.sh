#!/usr/bin/env bash
# ds-launch plan for GPT-2 124M (micro 8 x 1024 tokens, fp32, ZeRO-0) at TP = 1, 2 and 4, with
# and without sequence parallelism, with training.recompute none, selective and full: per-rank
# model states, activation peak, one layer's planned activations and the recompute arena, the
# tensor-parallel bytes sent beside Megatron's (TP: 4 all-reduces of bsh per layer; SP: 4
# all-gathers + 4 reduce-scatters and 2 gathers again in backward; full recompute: the
# forward's again), and Korthikanti et al.'s formulas; and full recompute with DeepSpeed's
# partition_activations at TP 2 and 4 (block inputs kept as 1/tp slices, all-gathered back).
#   tools/bench/tp_plan_table.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -x bin/ds-launch ]] || tools/build.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
for grid in 1:false 2:false 2:true 4:false 4:true; do
  tp=${grid%:*}; sp=${grid#*:}
  for rc in none selective full full+partition; do
    [[ $rc == full+partition && ( $tp == 1 || $sp == true ) ]] && continue
    part=false; [[ $rc == full+partition ]] && part=true
    cat > "$W/job.yaml" <<YAML
train_batch_size: 8
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 3.0e-4}}
model: {family: gpt2, n_layer: 12, n_embd: 768, n_head: 12, vocab_size: 50304, max_seq_len: 1024}
data: {train: none.bin, seq_len: 1024}
training: {train_iters: 1, recompute: ${rc%+*}}
parallel: {tensor: $tp, sequence_parallel: $sp}
activation_checkpointing: {partition_activations: $part}
YAML
    echo "== TP $tp, sequence parallel $sp, recompute $rc"
    bin/ds-launch plan "$W/job.yaml" -n "$tp" | grep -E "model states  |activations \(peak\)|peak total|one transformer layer|recompute \(|partition_activations:|ACT_|TP_GRAD|CHECKPOINT_|Megatron:"
  done
done
bin/ds-launch plan "$W/job.yaml" -n 4 | grep -A6 "one transformer layer" | grep "Korthikanti"
