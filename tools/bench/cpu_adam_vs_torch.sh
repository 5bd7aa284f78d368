#!/usr/bin/env bash
# The host AdamW step (runtime/core/cpu_adam.h) beside torch.optim.AdamW and DeepSpeed's
# DeepSpeedCPUAdam, one run, same parameter count and threads, fp32 parameters and gradients;
# ours also against the memory roofline measured in the same run (cpu_adam_bench).
#   tools/bench/cpu_adam_vs_torch.sh      (N=100000000 THREADS=2 STEPS=7)
# DeepSpeed comes from tools/bench/setup_deepspeed.sh's venv (DEEPSPEED=0 skips it); its
# cpu_adam op is JIT-built on first use (a minute or two).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-100000000}; THREADS=${THREADS:-2}; STEPS=${STEPS:-7}
PY=${PYTHON:-/usr/bin/python3}
bazel build --jobs=2 //runtime/core:cpu_adam_bench > /dev/null 2>&1
echo "== $N parameters, $THREADS threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
ours=$(OMP_NUM_THREADS=$THREADS bazel-bin/runtime/core/cpu_adam_bench "$N" "$STEPS")
echo "$ours"
ds_ms=$(awk '/^fp32 grads/ {print $6}' <<< "$ours")
peers=$(OMP_NUM_THREADS=$THREADS "$PY" tools/bench/torch_adam.py --n "$N" --steps "$STEPS" --threads "$THREADS")
if [[ "${DEEPSPEED:-1}" != 0 ]] && DSPY=$(tools/bench/setup_deepspeed.sh 2>/dev/null | tail -1); then
  peers+=$'\n'$(DS_ACCELERATOR=cpu OMP_NUM_THREADS=$THREADS "$DSPY" tools/bench/torch_adam.py --deepspeed --n "$N" --steps "$STEPS" --threads "$THREADS" 2>/dev/null | grep -E "^DeepSpeed" || echo "DeepSpeedCPUAdam: skipped: it did not run")
fi
echo "$peers"
echo "== ratios (peer ms / ds-runtime ms, fp32 gradients; > 1 means ds-runtime is faster)"
while read -r line; do
  [[ $line == *" ms "* ]] || continue
  name=${line%%:*}; ms=$(awk '{print $(NF-3)}' <<< "$line")
  printf '%-34s %.2fx\n' "$name" "$(awk -v a="$ms" -v b="$ds_ms" 'BEGIN {print a / b}')"
done <<< "$peers"
