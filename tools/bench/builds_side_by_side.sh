#!/usr/bin/env bash
# Times two builds of ds-runtime against each other on this machine, alternating runs so that
# both see the same load: the single-rank GPT-2 shape of train_vs_pytorch.sh (L=4 C=256 H=4
# V=8192 T=256 B=4, fp32, 2 threads) and the DP=2 ZeRO-2 overlap_comm job of
# ddp_vs_pytorch.sh (1 thread per rank, Gloo). Prints each round's median ms/step and the
# median over rounds, per build. For refactorings that must not slow anything down.
#
#   tools/bench/builds_side_by_side.sh OLD_BIN_DIR NEW_BIN_DIR    (ROUNDS=3 STEPS=12)
set -euo pipefail
cd "$(dirname "$0")/../.."
OLD=$(realpath "$1"); NEW=$(realpath "$2")
ROUNDS=${ROUNDS:-3}; STEPS=${STEPS:-12}; WARMUP=2
PY=${PYTHON:-/usr/bin/python3}
L=4; C=256; H=4; V=8192; T=256; B=4
if [[ -z "${OPENBLAS_CORETYPE:-}" ]] && grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
"$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, $V, size=400000, dtype=np.uint16).tofile('$W/tokens.bin')"
printf '127.0.0.1 slots=2\n' > "$W/hosts"
job() {  # FILE THREADS EXTRA CSV
  cat > "$1" <<YAML
train_micro_batch_size_per_gpu: $B
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}}
model: {family: gpt2, n_layer: $L, n_embd: $C, n_head: $H, vocab_size: $V, max_seq_len: $T}
data: {train: $W/tokens.bin, format: uint16, seq_len: $T, shuffle: false}
training: {train_iters: $STEPS}
monitor: {csv: $4, log_interval: 1}
device: {threads: $2}
$3
YAML
}
median_ms() {
  "$PY" -c "import csv,sys; r=list(csv.DictReader(open('$1')))[$WARMUP:]; m=sorted(float(x['step_ms']) for x in r); print(f'{m[len(m)//2]:.1f}')"
}
declare -A single dp
for round in $(seq "$ROUNDS"); do
  for which in old new; do
    bin=$OLD; [[ $which == new ]] && bin=$NEW
    job "$W/single.yaml" 2 "" "$W/single.csv"
    "$bin/ds-worker" --config "$W/single.yaml" > /dev/null 2>&1
    single[$which]+="$(median_ms "$W/single.csv") "
    job "$W/dp.yaml" 1 "zero_optimization: {stage: 2, overlap_comm: true}" "$W/dp.csv"
    timeout 300 "$bin/ds-launch" "$W/dp.yaml" --hostfile "$W/hosts" --worker "$bin/ds-worker" \
      --agent "$bin/ds-agent" --heartbeat 0.5 > /dev/null 2>&1
    dp[$which]+="$(median_ms "$W/dp.csv") "
  done
done
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
med() { "$PY" -c "import sys; v=sorted(map(float, sys.argv[1:])); print(f'{v[len(v)//2]:.1f}')" $1; }
for which in old new; do
  echo "$which: single rank ms/step per round: ${single[$which]}(median $(med "${single[$which]}"));" \
       "DP=2 ZeRO-2: ${dp[$which]}(median $(med "${dp[$which]}"))"
done
