#!/usr/bin/env bash
# tools/gpu_check/gpt2_diagnose.sh: where the GPT-2 124M step's time goes on a GPU, and how
# the README example's outcome varies with the seed there. Run after tools/gpu-check.sh on
# a bare GPU machine, with .gpu-deps carried along (its prebuilt bundle):
#   1. gemm_bench (cuBLASLt and cublasGemmEx) at the GEMM shapes of GPT-2 124M's linears
#      for B 16 x T 1024 tokens: the forward of qkv, proj, fc, fc_proj and the LM head;
#   2. ds-worker on the gpt-check GPT-2 job with the flops profiler at step 3 (every node
#      timed and synchronized: forward latency and achieved FLOP/s per node);
#   3. the example (configs/examples/addition.yaml) for 3000 steps on the GPU at seeds 1-5,
#      each with its held-out exact match;
#   4. (only when named) linear_gpu_test, then the GPT-2 job's tokens/s (steps 3-6) beside
#      PyTorch eager at the same micro-batch: the check after a change to the linear.
# Usage: gpt2_diagnose.sh [OUTDIR] [SECTIONS]   (SECTIONS default "gemm profile example";
# "linear" is section 4). Output: stdout, and files under OUTDIR (default $OUT, else a temp dir).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUTDIR=${1:-${OUT:-$(mktemp -d)}}
SECTIONS=" ${2:-gemm profile example} "
WORK=$(mktemp -d /tmp/gpt2-diagnose.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
tar -xJf .gpu-deps/bundle.tar.xz -C "$WORK" || exit 1
B=$WORK/bundle/bin
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$WORK/bundle/lib:/usr/local/cuda/lib64${nccl:+:$nccl}"

if [[ $SECTIONS == *" gemm "* ]]; then
echo "== 1. GEMM shapes of GPT-2 124M (B 16 x T 1024 = 16384 tokens), forward, bf16"
for s in qkv:2304:16384:768 proj:768:16384:768 fc:3072:16384:768 fc_proj:768:16384:3072 \
         lm_head_staged:50264:16384:768; do
  IFS=: read -r name m n k <<<"$s"
  r=$(timeout 60 "$B/gemm_bench" --m "$m" --n "$n" --k "$k" --iters 20 | grep '^RESULT')
  echo "$name m=$m n=$n k=$k: $r"
done
fi

python3 -c "
import random, struct
random.seed(0)
with open('$WORK/tokens.bin', 'wb') as f:
    f.write(struct.pack('<%dH' % 400000, *[random.randrange(50257) for _ in range(400000)]))"
cat >"$WORK/gpt2.yaml" <<YAML
train_micro_batch_size_per_gpu: 16
bf16: {enabled: true}
optimizer: {type: AdamW, params: {lr: 3.0e-4, weight_decay: 0.1}}
gradient_clipping: 1.0
zero_optimization: {stage: 1}
model: {family: gpt2, n_layer: 12, n_embd: 768, n_head: 12, vocab_size: 50257, max_seq_len: 1024}
data: {train: $WORK/tokens.bin, format: uint16, seq_len: 1024, shuffle: false}
training: {train_iters: 4}
device: {type: cuda}
YAML
if [[ $SECTIONS == *" profile "* ]]; then
echo "== 2. flops profiler at step 3"
sed 's/^training: .*/training: {train_iters: 4}\nflops_profiler: {enabled: true, profile_step: 3, module_depth: -1, top_modules: 3, detailed: true}/' \
  "$WORK/gpt2.yaml" >"$WORK/gpt2_profile.yaml"
timeout 120 "$B/ds-worker" --config "$WORK/gpt2_profile.yaml" >"$OUTDIR/gpt2_flops_profile.txt" 2>&1
grep -E "fwd latency|bwd latency|step latency|iter latency|h\.0\.|logits|loss \(|ln_f" \
  "$OUTDIR/gpt2_flops_profile.txt" | head -40
fi

if [[ $SECTIONS == *" linear "* ]]; then
  echo "== 4. linear_gpu_test; GPT-2 124M tokens/s beside PyTorch eager"
  timeout 90 "$B/linear_gpu_test" | tail -2
  sed -i 's/^training: .*/training: {train_iters: 6}/' "$WORK/gpt2.yaml"
  timeout 90 "$B/ds-worker" --config "$WORK/gpt2.yaml" 2>&1 | grep -E '^step [3-6]/6|error'
  timeout 90 python3 tools/bench/gpt2_torch_gpu.py --micro 16 | grep RESULT
fi
[[ $SECTIONS == *" example "* ]] || exit 0

echo "== 3. the example for 3000 steps on the GPU, seeds 1-5"
"$B/ds-data" addition --digits 3 --train_examples 50000 --val_examples 2000 --seed 1 \
  --output_dir "$WORK/data" >/dev/null 2>&1
for seed in 1 2 3 4 5; do
  d=$WORK/seed$seed
  mkdir -p "$d"
  sed -e "s#runs/addition/data#$WORK/data#; s#runs/addition/ckpt#$d/ckpt#" \
      -e "s#runs/addition/metrics.csv#$d/metrics.csv#; s#^seed: .*#seed: $seed#" \
      configs/examples/addition.yaml >"$d/job.yaml"
  printf 'bf16: {enabled: true}\ndevice: {type: cuda}\n' >>"$d/job.yaml"
  timeout 120 "$B/ds-worker" --config "$d/job.yaml" >"$d/train.log" 2>&1
  em=$(timeout 60 "$B/ds-worker" --config "$d/job.yaml" --eval 2>&1 | grep -m1 'exact match')
  echo "seed $seed: final loss $(tail -1 "$d/metrics.csv" | cut -d, -f2); $em"
done
