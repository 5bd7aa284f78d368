#!/usr/bin/env bash
# All-to-all on this machine (2 ranks x 1 thread, Gloo over loopback):
#  1. comm_bench's all-to-all bus bandwidth at the MoE job's message size (and around it);
#  2. an MoE GPT-2 (L4 C256 T256, micro 4, 4 experts every second block, top-1, EP 2, ZeRO-2)
#     trained 8 steps with comms_logger and wall_clock_breakdown: its all-to-alls' size, count,
#     latency and bus bandwidth inside the job, and their share of the step (Megatron reports
#     30-40% of MoE training time in EP all-to-all before optimisation);
#  3. Ulysses (SP 2) against Megatron-SP (TP 2 with sequence parallelism) on GPT-2 L4 C256 H8
#     T256, micro 2: the bytes each rank exchanges per layer, from the plans (ds-launch plan) and
#     from the comms logger of a 4-step run, beside 4Nh/P and 4Nh.
#   tools/bench/moe_alltoall.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-/usr/bin/python3}
[[ -x bin/ds-launch ]] || tools/build.sh
if [[ -z "${OPENBLAS_CORETYPE:-}" ]] && grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
"$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, 8192, size=400000, dtype=np.uint16).tofile('$W/tokens.bin')"
printf '127.0.0.1 slots=2\n' > "$W/hosts"

echo "== 1. comm_bench all-to-all, 2 ranks"
bazel build -c opt --jobs=2 //parallel/comm:comm_bench >/dev/null 2>&1
bazel-bin/parallel/comm/comm_bench --worlds=2 --ops=alltoall --min_bytes=262144 --max_bytes=4194304 --step=2 | grep -v "^#"

echo "== 2. MoE GPT-2, EP 2: all-to-all inside the job"
cat > "$W/moe.yaml" <<YAML
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 1
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
zero_optimization: {stage: 2, overlap_comm: true}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 4, vocab_size: 8192, max_seq_len: 256, moe: {num_experts: 4, top_k: 1, expert_interval: 2, use_rts: false}}
parallel: {expert: 2}
data: {train: $W/tokens.bin, format: uint16, seq_len: 256, shuffle: false}
training: {train_iters: 8}
device: {threads: 1}
comms_logger: {enabled: true}
wall_clock_breakdown: true
YAML
bin/ds-launch "$W/moe.yaml" --hostfile "$W/hosts" > "$W/moe.log" 2>&1 || { tail -20 "$W/moe.log"; exit 1; }
grep "^\[rank 0\]" "$W/moe.log" | sed 's/^\[rank 0\] //' | awk '
  /^all_to_all_single/ { a2a = 1; next }
  a2a && NF >= 6 { printf "all_to_all_single: %s %s x %s, avg %s ms, busbw %s Gbps\n", $1, $2, $3, $5, $7; a2a = 0 }
  /^step plan instruction/ { table = 1; next }
  table && NF == 2 && $2 ~ /^[0-9.]+$/ { total += $2; if ($1 == "ACT_ALL_TO_ALL") mine = $2 }
  END { if (total > 0) printf "all-to-all share of the step: %.1f%% (%.1f of %.1f ms over 8 steps)\n", 100 * mine / total, mine, total }'

echo "== 3. Ulysses SP 2 against Megatron-SP TP 2: bytes per layer and rank"
job() {  # job NAME PARALLEL
  cat > "$W/$1.yaml" <<YAML
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 1
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
zero_optimization: {stage: 0}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 8, vocab_size: 8192, max_seq_len: 256}
parallel: $2
data: {train: $W/tokens.bin, format: uint16, seq_len: 256, shuffle: false}
training: {train_iters: 4}
device: {threads: 1}
comms_logger: {enabled: true}
YAML
}
job ulysses "{ulysses: 2}"
job megatron "{tensor: 2, sequence_parallel: true}"
bin/ds-launch plan "$W/ulysses.yaml" --world 2 | sed -n '/^ulysses:/,/Megatron-SP/p'
bin/ds-launch plan "$W/megatron.yaml" --world 2 | grep -E "tensor-parallel sent|ACT_ALL_GATHER|ACT_REDUCE_SCATTER"
for name in ulysses megatron; do
  bin/ds-launch "$W/$name.yaml" --hostfile "$W/hosts" > "$W/$name.log" 2>&1 || { tail -20 "$W/$name.log"; exit 1; }
  echo "-- $name, comms logger (rank 0, 4 steps):"
  grep "^\[rank 0\]" "$W/$name.log" | sed 's/^\[rank 0\] //' | sed -n '/^Comm. Op/,/^step plan/p' | grep -v "^step plan"
done
