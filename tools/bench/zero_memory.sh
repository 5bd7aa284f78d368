#!/usr/bin/env bash
# Per-rank memory of the model states at DP = 4 for ZeRO stages 0-3 (GPT-2 L=4 C=256 V=8192,
# 5.27M parameters, bf16, AdamW, 3 steps via ds-launch on one node).
#
# Measured: each worker runs with DS_MEMORY_PROFILE=1, which samples after every instruction
# the resident bytes (mincore) of the buffers that hold model states: parameters (stage 3:
# the 16-bit shard and the persistent units), gradients (full or shard), the fp32 master and
# the optimizer state. Gathered stage-3 units and unreduced gradient buckets are transient and
# printed apart, as the plan counts them apart. The table shows rank 0's peak beside the
# planner's model-state bytes for rank 0 (`ds-launch plan --json`) and the ZeRO paper's
# 2 + 2 + 12 bytes per parameter divided as the stage divides it. Peak RSS (whole process,
# with libraries and activations) is printed too.
#   tools/bench/zero_memory.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -x bin/ds-launch ]] || tools/build.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
/usr/bin/python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 8192, size=200000, dtype=np.uint16).tofile('$W/tokens.bin')"
printf '127.0.0.1 slots=4\n' > "$W/hosts"
printf '%-6s %14s %14s %14s %10s %10s   %s\n' stage "measured MiB" "planned MiB" "paper MiB" "vs plan" "vs paper" "rank 0: peak by role (MiB), peak RSS"
for stage in 0 1 2 3; do
  extra=""
  # Small enough that stage 3 keeps only about two blocks gathered (the planner rejects a
  # max_live_parameters below what one block needs).
  [[ $stage == 3 ]] && extra=", stage3_max_live_parameters: 3000000, stage3_prefetch_bucket_size: 800000, stage3_max_reuse_distance: 0"
  cat > "$W/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 1
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
bf16: {enabled: true}
zero_optimization: {stage: $stage$extra}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 4, vocab_size: 8192, max_seq_len: 64}
data: {train: $W/tokens.bin, format: uint16, seq_len: 64, shuffle: false}
training: {train_iters: 3}
device: {threads: 1}
YAML
  DS_MEMORY_PROFILE=1 bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" > "$W/log$stage" 2>&1 ||
    { tail "$W/log$stage"; exit 1; }
  line=$(grep -m1 '^\[rank 0\] memory (rank 0):' "$W/log$stage")
  rss=$(grep -m1 '^\[rank 0\] done:' "$W/log$stage" | sed 's/.*peak RSS //')
  measured=$(sed 's/.*model states peak \([0-9.]*\) MiB.*/\1/' <<<"$line")
  roles=$(sed 's/.*MiB (\(.*\)), planned.*/\1/' <<<"$line")
  read -r plan paper < <(bin/ds-launch plan "$W/job.yaml" --world 4 --json | /usr/bin/python3 -c \
    "import json,sys; j=json.load(sys.stdin); print(int(j['ranks'][0]['model_state_bytes']), int(j['paper_model_state_bytes']))")
  /usr/bin/python3 - "$stage" "$measured" "$plan" "$paper" "$roles" "$rss" <<'PY'
import sys
stage, measured, plan, paper, roles, rss = sys.argv[1:]
m, p, q = float(measured), int(plan) / 2**20, int(paper) / 2**20
print(f"{stage:<6} {m:14.2f} {p:14.2f} {q:14.2f} {100 * (m / p - 1):+9.1f}% {100 * (m / q - 1):+9.1f}%   {roles}; RSS {rss}")
PY
done
