#!/usr/bin/env bash
# Pipeline schedules on the two cores beside DeepSpeed's PipelineEngine: GPT-2 L4 C256 H4 V8192
# T256 (tied head), PP 2 with 1 thread per rank, micro-batch 4, m = 8 micro-batches per step,
# fp32, ZeRO 0, AdamW (lr 1e-4, betas 0.9 / 0.95, no weight decay), clipping 1.0, the same
# initial weights (ds-worker --export-init) and the same token order. Per round, interleaved:
#   ds-runtime 1f1b, interleaved (v 2), zb-h1 (ds-launch --pp 2), stages split by
#   partition_method flops (the head's FLOPs counted), and 1f1b by parameters (DeepSpeed's default)
#   DeepSpeed 0.14.4 PipelineEngine 1F1B (tools/bench/deepspeed_pipe_gpt2.py), partition_method
#   parameters and uniform (tools/bench/setup_deepspeed.sh makes its venv)
# Prints the median ms/step of the steps after WARMUP, and for ds-runtime each rank's idle
# fraction (1 - forward/backward compute over the step, the median over steps 3..) beside the
# schedule's formula with F = B_in = W = 1: 1F1B (p-1)/(m+p-1), interleaved (p-1)/(vm+p-1),
# zb-h1 (p-1)/(3m+p-1). The first losses of each run are printed: they must agree.
#   tools/bench/pipeline_vs_deepspeed.sh            # ROUNDS=2 STEPS=10 WARMUP=2
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-10}; WARMUP=${WARMUP:-2}; ROUNDS=${ROUNDS:-2}
[[ -x bin/ds-launch ]] || tools/build.sh
PY=$(tools/bench/setup_deepspeed.sh | tail -1)
echo "== PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1), DeepSpeed $(DS_ACCELERATOR=cpu "$PY" -c 'import deepspeed; print(deepspeed.__version__)' 2>/dev/null | tail -1)"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home DS_ACCELERATOR=cpu OMP_NUM_THREADS=1
/usr/bin/python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 8192, size=400000, dtype=np.uint16).tofile('$W/tokens.bin')"
printf '127.0.0.1 slots=2\n' > "$W/hosts"
kernels=$(grep -o 'avx512f\|avx2' /proc/cpuinfo | sort -u | paste -sd' ')
echo "== GPT-2 L4 C256 H4 V8192 T256, micro 4 x m 8, PP 2 (2 ranks x 1 thread), fp32; CPU flags: $kernels; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
job() {  # job SCHEDULE [VIRTUAL] [PARTITION]
  cat > "$W/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 8
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.0}}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 4, vocab_size: 8192, max_seq_len: 256}
data: {train: $W/tokens.bin, format: uint16, seq_len: 256, shuffle: false}
training: {train_iters: $STEPS}
pipeline: {schedule: $1, virtual_stages: ${2:-1}, partition_method: ${3:-flops}}
monitor: {csv: $W/ds.csv}
device: {threads: 1}
YAML
}
job 1f1b
bin/ds-worker --config "$W/job.yaml" --export-init "$W/init.safetensors" > /dev/null 2>&1
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for round in $(seq "$ROUNDS"); do
  for s in "1f1b 1 (p-1)/(m+p-1) 0.1111 parameters" "1f1b 1 (p-1)/(m+p-1) 0.1111 flops" \
           "interleaved 2 (p-1)/(vm+p-1) 0.0588 flops" "zb-h1 1 (p-1)/(3m+p-1) 0.0400 flops"; do
    read -r schedule v formula value partition <<<"$s"
    job "$schedule" "$v" "$partition"
    rm -f "$W/ds.csv"
    bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" --pp 2 \
      > "$W/ds.log" 2>&1 || { tail -20 "$W/ds.log"; exit 1; }
    idle=$(grep -o '^\[rank [01]\] pipeline: .*idle fraction [0-9.]*' "$W/ds.log" | sort |
           sed 's/^\[rank \([01]\)\].*idle fraction \([0-9.]*\)/rank \1 \2/' | paste -sd' ')
    printf 'round %s ds-runtime %-12s %-10s %8s ms/step   idle %s (formula %s = %s)   losses %s\n' \
      "$round" "$schedule" "$partition" "$(tail -n +$((WARMUP + 2)) "$W/ds.csv" | cut -d, -f10 | median)" \
      "$idle" "$formula" "$value" "$(tail -n +2 "$W/ds.csv" | head -3 | cut -d, -f2 | paste -sd,)"
  done
  for partition in parameters uniform; do
    out=$("$PY" -m torch.distributed.run --redirects 1 --tee 2 --nproc_per_node 2 \
      --master_port $((29500 + round)) \
      tools/bench/deepspeed_pipe_gpt2.py --weights "$W/init.safetensors" --data "$W/tokens.bin" \
      --n_layer 4 --n_head 4 --batch 4 --seq 256 --micro_batches 8 --steps "$STEPS" \
      --warmup "$WARMUP" --partition "$partition" 2>&1 | grep -o 'deepspeed-pipe:.*' || true)
    ms=$(sed -n 's/.*ms_per_step=\([0-9.]*\).*/\1/p' <<<"$out")
    printf 'round %s DeepSpeed 1F1B (%s) %8s ms/step   losses %s\n' "$round" "$partition" \
      "${ms:-failed}" "$(sed -n 's/.*losses=\([^,]*,[^,]*,[^,]*\).*/\1/p' <<<"$out")"
  done
done
