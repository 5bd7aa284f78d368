#!/usr/bin/env bash
# ZeRO-Infinity on this machine: a GPT-2 XL-size model (48 layers, 1600 wide, 1.56B parameters;
# model states about 25 GB with bf16 and Adam, more than the machine's memory) trains STEPS
# steps at micro-batch 1, sequence 256, stage 3, with the optimizer states, the fp32 master and
# the 16-bit parameters on NVMe, through ds-launch with real processes. Prints:
#   - ds-plan for the job without offload (does it fit 8 GiB? which offload would?) and with it;
#   - ds-io-bench on the swap directory with the job's aio block (the reference GB/s);
#   - each step's loss, compute time, I/O wait, bytes read and written, achieved GB/s, hidden %;
#   - the peak resident memory (VmHWM) of the worker, the agent and ds-launch, and their sum.
# The tokens are drawn from a Zipf law over the GPT-2 vocabulary (no tokenizer here): the loss
# falls as the model learns their frequencies.
#
# The learning rate warms up linearly to LR over the STEPS steps (Adam's first full-size steps
# move every weight by about lr and raise the loss of a model this size for a few steps).
#
# PRECISION=fp32 trains in fp32 instead (model states again about 25 GB: the fp32 parameters,
# which are the master, gradients and Adam's moments; the parameters swap with the moments).
#
#   tools/bench/zero_infinity.sh [SWAP_DIR]        (STEPS=6 LR=2e-5 PRECISION=bf16 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -x bin/ds-launch && -x bin/ds-io-bench ]] || tools/build.sh
mkdir -p runs
DIR=${1:-$(mktemp -d -p "$PWD/runs" zero_infinity.XXXXXX)}
STEPS=${STEPS:-6}; LR=${LR:-2.0e-5}; PRECISION=${PRECISION:-bf16}
mkdir -p "$DIR/swap"
echo "== ZeRO-Infinity, GPT-2 XL size, $PRECISION, $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), swap on $(df -T "$DIR" | awk 'NR==2 {print $1" ("$2")"}')"
grep -m1 -o 'avx512f' /proc/cpuinfo > /dev/null && echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), AVX-512" ||
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), AVX2"

/usr/bin/python3 - "$DIR/tokens.bin" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(0)
v = 50257
p = 1.0 / np.arange(1, v + 1) ** 1.1
rng.choice(v, size=400000, p=p / p.sum()).astype(np.uint16).tofile(sys.argv[1])
PY

cat > "$DIR/xl.yaml" <<YAML
train_batch_size: 1
train_micro_batch_size_per_gpu: 1
gradient_clipping: 1.0
bf16: {enabled: $([[ $PRECISION == bf16 ]] && echo true || echo false)}
optimizer: {type: AdamW, params: {lr: $LR, weight_decay: 0.1}}
scheduler: {type: WarmupLR, params: {warmup_min_lr: 0.0, warmup_max_lr: $LR, warmup_num_steps: $STEPS, warmup_type: linear}}
zero_optimization:
  stage: 3
  reduce_bucket_size: 50000000
  stage3_prefetch_bucket_size: 50000000
  stage3_max_live_parameters: 100000000
  sub_group_size: 25000000
  offload_optimizer: {device: nvme, nvme_path: $DIR/swap, buffer_count: 6, pipeline_read: true, pipeline_write: true}
  offload_param: {device: nvme, nvme_path: $DIR/swap, buffer_count: 5, buffer_size: 100000000}
aio: {block_size: 1048576, queue_depth: 8, intra_op_parallelism: 1, single_submit: false, overlap_events: true}
model: {family: gpt2, n_layer: 48, n_embd: 1600, n_head: 25, vocab_size: 50257, max_seq_len: 1024}
data: {train: $DIR/tokens.bin, format: uint16, seq_len: 256}
training: {train_iters: $STEPS}
monitor: {csv: $DIR/metrics.csv}
device: {threads: $(nproc)}
YAML
grep -v "offload_" "$DIR/xl.yaml" > "$DIR/xl_no_offload.yaml"

echo; echo "== ds-launch plan without offload, 8 GiB per rank"
bin/ds-launch plan "$DIR/xl_no_offload.yaml" --world 1 --host-memory 8 | tail -3
echo "== ds-launch plan with the NVMe offload, 8 GiB per rank"
bin/ds-launch plan "$DIR/xl.yaml" --world 1 --host-memory 8 | grep -E "swap buffers|on NVMe|peak total|fit"

echo; echo "== ds-io-bench on the swap directory, the job's aio block (1 MiB x 8, one ring)"
bin/ds-io-bench --path "$DIR/swap" --size 2G --block_size 1048576 --queue_depth 8 --loops 2 | grep -E "^(read|write)"

echo; echo "== training $STEPS steps"
printf '127.0.0.1 slots=1\n' > "$DIR/hosts"
export DS_RUNTIME_HOME=$DIR/home
bin/ds-launch "$DIR/xl.yaml" --hostfile "$DIR/hosts" > "$DIR/out" 2>&1 &
launch=$!
peak() { awk '/VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || true; }
declare -A hwm=()
while kill -0 $launch 2>/dev/null; do
  for name in ds-worker ds-agent ds-launch; do
    for p in $(pgrep -f "$name" || true); do
      v=$(peak "$p"); [[ ${v:-0} -gt ${hwm[$name]:-0} ]] && hwm[$name]=$v
    done
  done
  sleep 1
done
wait $launch || { echo "ds-launch failed:"; tail -20 "$DIR/out"; exit 1; }
grep -E "\[swap\]|^\[rank 0\] step|initialized|done:" "$DIR/out" | sed 's/^\[rank 0\] //' || true
launcher=${hwm[ds-launch]:-0}
total=$(( ${hwm[ds-worker]:-0} + ${hwm[ds-agent]:-0} + launcher ))
printf '\nVmHWM: worker %.2f GiB, agent %.3f GiB, ds-launch %.3f GiB; the whole job %.2f GiB (target <= 8 GiB)\n' \
  "$(awk -v k="${hwm[ds-worker]:-0}" 'BEGIN {print k/1048576}')" "$(awk -v k="${hwm[ds-agent]:-0}" 'BEGIN {print k/1048576}')" \
  "$(awk -v k="${launcher:-0}" 'BEGIN {print k/1048576}')" "$(awk -v k="$total" 'BEGIN {print k/1048576}')"
echo "losses: $(cut -d, -f2 "$DIR/metrics.csv" | tail -n +2 | tr '\n' ' ')"
rm -rf "$DIR/swap/ds-swap" "$DIR/tokens.bin"
