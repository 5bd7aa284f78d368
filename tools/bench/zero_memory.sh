#!/usr/bin/env bash
# Per-rank memory at DP = 4 for ZeRO stages 0-2 (GPT-2 L=4 C=256 V=8192, bf16, Adam): rank 0's
# measured peak RSS from a 3-step ds-launch run beside the planner's model-state prediction
# (`ds-launch plan`) and the ZeRO paper's 2+2+12 bytes per parameter. The RSS includes the
# process baseline and activations, so compare the differences between stages.
#   tools/bench/zero_memory.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -x bin/ds-launch ]] || tools/build.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
/usr/bin/python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 8192, size=200000, dtype=np.uint16).tofile('$W/tokens.bin')"
printf '127.0.0.1 slots=4\n' > "$W/hosts"
printf '%-6s %16s %22s %18s\n' stage "rank-0 peak RSS" "planned model states" "ZeRO paper"
for stage in 0 1 2; do
  cat > "$W/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 1
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
bf16: {enabled: true}
zero_optimization: {stage: $stage}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 4, vocab_size: 8192, max_seq_len: 64}
data: {train: $W/tokens.bin, format: uint16, seq_len: 64, shuffle: false}
training: {train_iters: 3}
monitor: {csv: $W/m$stage.csv}
device: {threads: 1}
YAML
  bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" > "$W/log$stage" 2>&1 || { tail "$W/log$stage"; exit 1; }
  rss=$(tail -1 "$W/m$stage.csv" | cut -d, -f7)
  plan=$(bin/ds-launch plan "$W/job.yaml" --world 4 --json | /usr/bin/python3 -c \
    "import json,sys; j=json.load(sys.stdin); r=j['ranks'][0]; print(int(r['model_state_bytes']), int(j['paper_model_state_bytes']))")
  printf '%-6s %13.1f MiB %19.1f MiB %15.1f MiB\n' "$stage" "$(echo "$rss/1048576" | bc -l)" \
    "$(echo "${plan% *}/1048576" | bc -l)" "$(echo "${plan#* }/1048576" | bc -l)"
done
