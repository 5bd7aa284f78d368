#!/usr/bin/env bash
# Data-parallel training, 2 ranks on this machine (1 thread each): ds-launch with ZeRO stage 2
# (overlap_comm: bucket reductions overlap backward)
# over Gloo against PyTorch DistributedDataParallel with the gloo backend (torchrun), same GPT-2
# shape, initial weights, data order, global batch, optimizer and clipping. Prints the median
# step time of each after warm-up, the ratio (target <= 0.8), and how far the loss curves are
# apart. A third column is DeepSpeed itself (tools/bench/deepspeed_gpt2.py: ZeRO-2, overlap_comm,
# CPU accelerator over gloo, same torch as the DDP column: the peers' venv, PyTorch 2.15 and
# DeepSpeed 0.19.8 from PyPI, DS_PEERS=1 tools/setup.sh; tools/bench/setup_deepspeed.sh adds
# DeepSpeed on first use); DEEPSPEED=0 skips it; a failed install or run is reported in its place.
#   tools/bench/ddp_vs_pytorch.sh          (STEPS=12, ROUNDS=3 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-12}; WARMUP=2
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
zero_optimization: {stage: 2, overlap_comm: true}
model: {family: gpt2, n_layer: $L, n_embd: $C, n_head: $H, vocab_size: $V, max_seq_len: $T}
data: {train: $W/tokens.bin, format: uint16, seq_len: $T, shuffle: false}
training: {train_iters: $STEPS}
monitor: {csv: $W/ds.csv}
device: {threads: 1}
YAML
printf '127.0.0.1 slots=2\n' > "$W/hosts"
echo "== GPT-2 L=$L C=$C V=$V T=$T, micro $B per rank, 2 ranks x 1 thread, fp32, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
bin/ds-worker --config "$W/job.yaml" --export-init "$W/init.safetensors" >/dev/null 2>&1
# This VM's step times move by +-30% from one run to the next (other tenants), so the three
# systems run ROUNDS times, interleaved, and the medians over the rounds are compared; each
# round's own ratio is printed too.
ROUNDS=${ROUNDS:-3}
TCMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
run_ds() {
  bin/ds-launch "$W/job.yaml" --hostfile "$W/hosts" > "$W/ds.log" 2>&1 || { tail -20 "$W/ds.log"; exit 1; }
  ds_ms=$(tail -n +$((WARMUP + 2)) "$W/ds.csv" | cut -d, -f10 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  ds_losses=$(tail -n +2 "$W/ds.csv" | cut -d, -f2 | paste -sd,)
}
# torchrun from the same Python (stdout goes to per-rank files under --log_dir; rank 0's holds
# the summary line).
run_ddp() {
  rm -rf "$W/tr"
  OMP_NUM_THREADS=1 LD_PRELOAD=$TCMALLOC \
    "$PY" -m torch.distributed.run --redirects 1 --tee 2 --log_dir "$W/tr" --nnodes 1 --nproc_per_node 2 --master_port 29577 \
    tools/bench/pytorch_gpt2.py --ddp --weights "$W/init.safetensors" --data "$W/tokens.bin" --n_layer $L \
    --n_head $H --batch $B --seq $T --steps "$STEPS" --warmup $WARMUP --threads 1 > "$W/torch.log" 2>&1 \
    || { tail -20 "$W/torch.log"; exit 1; }
  line=$(cat "$W"/tr/*/attempt_0/0/stdout.log | grep "pytorch:")
}
# DeepSpeed: the same torchrun flags, threads and allocator, from the venv's Python.
dsp_line=""
DSPY=""
if [[ "${DEEPSPEED:-1}" == 0 ]]; then
  dsp_line="skipped: DEEPSPEED=0"
elif ! DSPY=$(tools/bench/setup_deepspeed.sh 2> "$W/dsp_setup.log" | tail -1); then
  dsp_line="skipped: tools/bench/setup_deepspeed.sh failed: $(tail -1 "$W/dsp_setup.log")"
  DSPY=""
fi
run_deepspeed() {
  [[ -n "$DSPY" ]] || return 0
  rm -rf "$W/dtr"
  if ! OMP_NUM_THREADS=1 DS_ACCELERATOR=cpu LD_PRELOAD=$TCMALLOC \
    "$DSPY" -m torch.distributed.run --redirects 1 --tee 2 --log_dir "$W/dtr" --nnodes 1 --nproc_per_node 2 \
    --master_port 29578 tools/bench/deepspeed_gpt2.py --weights "$W/init.safetensors" --data "$W/tokens.bin" \
    --n_layer $L --n_head $H --batch $B --seq $T --steps "$STEPS" --warmup $WARMUP --threads 1 > "$W/dsp.log" 2>&1; then
    dsp_line="failed (the ds-runtime and DDP figures stand): $(grep -h -m1 -E "Error|error:" \
      "$W"/dtr/*/attempt_0/*/stderr.log "$W/dsp.log" 2>/dev/null || tail -1 "$W/dsp.log")"
    DSPY=""
    return 0
  fi
  dsp_line=$(cat "$W"/dtr/*/attempt_0/0/stdout.log | grep "^deepspeed:")
}
rounds=()
for ((r = 1; r <= ROUNDS; r++)); do
  run_ds
  run_ddp
  run_deepspeed
  rounds+=("$ds_ms|$line|$dsp_line")
done
"$PY" - "$ds_losses" "$line" "$dsp_line" "${rounds[@]}" <<'PYEOF'
import statistics, sys
def parse(text):
    kv = dict(p.split("=", 1) for p in text.split()[1:])
    return float(kv["ms_per_step"]), [float(x) for x in kv["losses"].split(",")], kv
ds_losses = [float(x) for x in sys.argv[1].split(",")]
_, pt_losses, _ = parse(sys.argv[2])
have_dsp = sys.argv[3].startswith("deepspeed:")
ds, pt, dsp = [], [], []
for r in sys.argv[4:]:
    a, b, c = r.split("|", 2)
    ds.append(float(a)); pt.append(parse(b)[0])
    if c.startswith("deepspeed:"): dsp.append(parse(c)[0])
fmt = lambda v: " ".join(f"{x:.1f}" for x in v)
diff = max(abs(a - b) / abs(b) for a, b in zip(ds_losses, pt_losses))
print(f"rounds: {len(ds)} (medians over rounds; each round's median step after warm-up in brackets)")
print(f"ds-runtime DP=2 ZeRO-2 overlap (Gloo):  {statistics.median(ds):8.1f} ms/step  [{fmt(ds)}]")
print(f"PyTorch DDP, gloo, tcmalloc (torchrun): {statistics.median(pt):8.1f} ms/step  [{fmt(pt)}]")
if have_dsp and dsp:
    _, dsp_losses, dkv = parse(sys.argv[3])
    dsp_diff = max(abs(a - b) / abs(b) for a, b in zip(ds_losses, dsp_losses))
    print(f"DeepSpeed {dkv['deepspeed']} ZeRO-2 overlap (gloo): {statistics.median(dsp):8.1f} ms/step  [{fmt(dsp)}]"
          f"  (CPU accelerator, torch {dkv['torch']}, allgather={dkv['allgather']}, tcmalloc, torchrun)")
print(f"ratio ds/DDP: {statistics.median(ds) / statistics.median(pt):.2f}x (target <= 0.80); per round "
      f"{' '.join(f'{a / b:.2f}' for a, b in zip(ds, pt))}; loss curves: max relative difference {diff:.2e}")
if have_dsp and dsp:
    print(f"ratio ds/DeepSpeed: {statistics.median(ds) / statistics.median(dsp):.2f}x; per round "
          f"{' '.join(f'{a / b:.2f}' for a, b in zip(ds, dsp))}; loss curves: max relative difference {dsp_diff:.2e}")
else:
    print(f"DeepSpeed: {sys.argv[3]}")
PYEOF
