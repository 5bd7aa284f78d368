#!/usr/bin/env bash
# Tensor parallelism, TP = 2 on this machine (one thread per rank): ds-launch over Gloo against
# PyTorch tensor parallelism over gloo (torchrun), same GPT-2 shape, initial weights, batch,
# optimizer and clipping, interleaved ROUNDS times. Prints each system's median step time after
# warm-up, ds-runtime's split into compute and tp communication (DS_PROFILE_OPS: the
# ACT_ALL_REDUCE instructions' share of the step), the ratio (target <= 0.8) and how far the
# loss curves are apart.
#   PyTorch: torch.distributed.tensor.parallel (DTensor, ColwiseParallel / RowwiseParallel,
#   loss_parallel) and, beside it, the same split written Megatron-style over all_reduce
#   (tools/bench/pytorch_tp_gpt2.py). PyTorch 2.15 from the peers' venv (DS_PEERS=1
#   tools/setup.sh), or $PYTHON.
#   tools/bench/tp_vs_pytorch.sh          (STEPS=12, ROUNDS=3 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-12}; WARMUP=2; ROUNDS=${ROUNDS:-3}
L=4; C=256; H=4; V=8192; T=256; B=4
PEER_PY=${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python
PY=${PYTHON:-$([[ -x $PEER_PY ]] && echo "$PEER_PY" || echo /usr/bin/python3)}  # PyTorch 2.15 (DS_PEERS=1)
echo "== PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1) from $PY"
[[ -x bin/ds-launch ]] || tools/build.sh
if [[ -z "${OPENBLAS_CORETYPE:-}" ]] && grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
"$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, $V, size=400000, dtype=np.uint16).tofile('$W/tokens.bin')"
cat > "$W/job.yaml" <<YAML
train_micro_batch_size_per_gpu: $B
gradient_accumulation_steps: 1
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}}
zero_optimization: {stage: 0}
model: {family: gpt2, n_layer: $L, n_embd: $C, n_head: $H, vocab_size: $V, max_seq_len: $T}
data: {train: $W/tokens.bin, format: uint16, seq_len: $T, shuffle: false}
training: {train_iters: $STEPS}
parallel: {tensor: 2}
monitor: {csv: $W/ds.csv}
device: {threads: 1}
YAML
printf '127.0.0.1 slots=2\n' > "$W/hosts"
kernels=$(grep -o 'avx512f\|avx2' /proc/cpuinfo | sort -u | paste -sd' ')
echo "== GPT-2 L=$L C=$C H=$H V=$V T=$T, batch $B, TP=2 (2 ranks x 1 thread), fp32; CPU flags: $kernels; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
sed 's/parallel: {tensor: 2}//' "$W/job.yaml" > "$W/init.yaml"
bin/ds-worker --config "$W/init.yaml" --export-init "$W/init.safetensors" >/dev/null 2>&1
TCMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
run_ds() {  # run_ds [profile]
  rm -f "$W/ds.csv"; rm -rf "$DS_RUNTIME_HOME"
  DS_PROFILE_OPS=${1:-0} bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" > "$W/ds.log" 2>&1 || { tail -20 "$W/ds.log"; exit 1; }
  ds_ms=$(tail -n +$((WARMUP + 2)) "$W/ds.csv" | cut -d, -f10 | median)
  ds_losses=$(tail -n +2 "$W/ds.csv" | cut -d, -f2 | paste -sd,)
}
run_torch() {  # run_torch MODE
  rm -rf "$W/tr"
  OMP_NUM_THREADS=1 LD_PRELOAD=$TCMALLOC "$PY" -m torch.distributed.run --redirects 1 --tee 2 --log_dir "$W/tr" \
    --nnodes 1 --nproc_per_node 2 --master_port 29581 tools/bench/pytorch_tp_gpt2.py --mode "$1" \
    --weights "$W/init.safetensors" --data "$W/tokens.bin" --n_layer $L --n_head $H --batch $B --seq $T \
    --steps "$STEPS" --warmup $WARMUP --threads 1 > "$W/torch.log" 2>&1 || { echo "failed: $(tail -3 "$W/torch.log")"; return 1; }
  cat "$W"/tr/*/attempt_0/0/stdout.log | grep "pytorch-tp:"
}
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }
ds_all=(); dt_all=(); mg_all=(); mg_comm=()
for round in $(seq "$ROUNDS"); do
  run_ds; ds_all+=("$ds_ms")
  dt=$(run_torch dtensor || true); mg=$(run_torch megatron || true)
  dt_ms=$(field "$dt" ms_per_step); mg_ms=$(field "$mg" ms_per_step)
  dt_all+=("${dt_ms:-nan}"); mg_all+=("${mg_ms:-nan}"); mg_comm+=("$(field "$mg" comm_ms)")
  echo "round $round: ds-runtime ${ds_ms} ms, PyTorch DTensor ${dt_ms:-failed} ms, PyTorch Megatron-style ${mg_ms:-failed} ms"
done
ds_med=$(printf '%s\n' "${ds_all[@]}" | median)
dt_med=$(printf '%s\n' "${dt_all[@]}" | median); mg_med=$(printf '%s\n' "${mg_all[@]}" | median)
mg_comm_med=$(printf '%s\n' "${mg_comm[@]}" | median)
# The split: ACT_ALL_REDUCE's share of all instruction time, over a profiled run.
run_ds 1
share=$(sed -n 's/^\[rank 0\] //p' "$W/ds.log" |
  awk '/step plan instruction/ {on = 1; next} on && NF == 2 { t += $2; if ($1 == "ACT_ALL_REDUCE") c += $2 }
       on && NF != 2 { on = 0 } END { if (t > 0) printf "%.4f", c / t }')
echo "ds-runtime: ${ds_med} ms/step (median of ${ROUNDS}): compute $(awk -v m="$ds_med" -v s="$share" 'BEGIN {printf "%.1f", m * (1 - s)}') ms, tp all-reduces $(awk -v m="$ds_med" -v s="$share" 'BEGIN {printf "%.1f", m * s}') ms ($(awk -v s="$share" 'BEGIN {printf "%.1f", 100 * s}')%, DS_PROFILE_OPS run)"
echo "PyTorch DTensor: ${dt_med} ms/step; Megatron-style: ${mg_med} ms/step (all-reduces ${mg_comm_med} ms); $(field "${dt:-$mg}" torch | sed 's/^/torch /')"
best=$(printf '%s\n%s\n' "$dt_med" "$mg_med" | grep -v nan | sort -n | head -1)
awk -v d="$ds_med" -v p="$best" 'BEGIN { printf "ratio ds-runtime / best PyTorch = %.2f (target <= 0.8)\n", d / p }'
torch_losses=$(field "${mg:-$dt}" losses)
paste -d, <(tr ',' '\n' <<<"$ds_losses") <(tr ',' '\n' <<<"$torch_losses") |
  awk -F, '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d } END { printf "loss curves: largest difference %.2e over %d steps\n", m, NR }'
