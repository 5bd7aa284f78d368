#!/usr/bin/env bash
# The step-time cost of activation recompute and of partition_activations under tensor
# parallelism: TP 2 (2 ranks x 1 thread) on the L4 C256 V8192 T256 shape, batch 4, fp32,
# training.recompute none, full, and full with activation_checkpointing.partition_activations
# (each block input kept as 1/2 slices, all-gathered before its recompute), interleaved in
# ROUNDS rounds; the median ms/step of the steps after WARMUP, and the last loss (the three must
# agree: recompute and partitioning change no number).
#   tools/bench/recompute_cost.sh            # ROUNDS=3 STEPS=12
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-12}; WARMUP=2; ROUNDS=${ROUNDS:-3}
[[ -x bin/ds-launch ]] || tools/build.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
/usr/bin/python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 8192, size=400000, dtype=np.uint16).tofile('$W/tokens.bin')"
printf '127.0.0.1 slots=2\n' > "$W/hosts"
kernels=$(grep -o 'avx512f\|avx2' /proc/cpuinfo | sort -u | paste -sd' ')
echo "== GPT-2 L4 C256 H4 V8192 T256, batch 4, TP 2 (2 ranks x 1 thread), fp32; CPU flags: $kernels; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for round in $(seq "$ROUNDS"); do
  for mode in none full full+partition; do
    part=false; [[ $mode == full+partition ]] && part=true
    cat > "$W/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 1
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 4, vocab_size: 8192, max_seq_len: 256}
data: {train: $W/tokens.bin, format: uint16, seq_len: 256, shuffle: false}
training: {train_iters: $STEPS, recompute: ${mode%+*}}
activation_checkpointing: {partition_activations: $part}
parallel: {tensor: 2}
monitor: {csv: $W/ds.csv}
device: {threads: 1}
YAML
    rm -f "$W/ds.csv"; rm -rf "$DS_RUNTIME_HOME"
    bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" > "$W/ds.log" 2>&1 || { tail -20 "$W/ds.log"; exit 1; }
    printf 'round %s %-15s %8s ms/step   last loss %s\n' "$round" "$mode" \
      "$(tail -n +$((WARMUP + 2)) "$W/ds.csv" | cut -d, -f10 | median)" "$(tail -1 "$W/ds.csv" | cut -d, -f2)"
  done
done
