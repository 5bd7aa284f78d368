#!/usr/bin/env bash
# Mixture of experts, 2 ranks on this machine (1 thread each): ds-launch with expert parallelism
# (parallel.expert 2: each rank holds and computes 2 of the 4 experts, tokens travel by
# all-to-all) and ZeRO-2 (overlap_comm) over Gloo, against DeepSpeed-MoE itself (tools/bench/deepspeed_moe_gpt2.py:
# deepspeed.moe.layer.MoE, ep_size 2, ZeRO-2 overlap_comm, CPU accelerator over gloo), installed
# on first use into a venv by tools/bench/setup_deepspeed.sh; DEEPSPEED=0 skips it, a failed
# install or run is reported in its place. GPT-2 L4 C256 H4 V8192 T256, micro 4 per rank,
# 4 experts in every second block (blocks 1 and 3), top-1, capacity_factor 1.0, min_capacity 4,
# drop_tokens true, use_rts false (random token selection draws differ between the two systems),
# aux loss x 0.01; same initial weights (ds-worker --export-init), data order, batch, AdamW and
# clipping 1.0 on both sides. ds-runtime's dense GPT-2 of the same shape (the same job without
# model.moe: the same active parameters per token, less the gates) runs too.
# Prints the median step time of each after warm-up, ds-runtime MoE / DeepSpeed-MoE (target
# <= 0.8), ds-runtime MoE / dense, and how far the MoE loss curves are apart. With drops,
# DeepSpeed's top-1 keeps the tokens torch.topk picks among an expert's tied 0/1 scores (not
# the first by token order, as ds-runtime), so the curves may part by a little; a short
# second pair of runs without drops (EXACT=1, EXACT_STEPS=4; every token kept) must agree.
#   tools/bench/moe_vs_deepspeed.sh          (STEPS=12, ROUNDS=3 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-12}; WARMUP=2; ROUNDS=${ROUNDS:-3}; EXACT=${EXACT:-1}; EXACT_STEPS=${EXACT_STEPS:-4}
L=4; C=256; H=4; V=8192; T=256; B=4
E=4; K=1; CF=1.0; MINCAP=4; DROP=true; RTS=false; TOP2S=false; INTERVAL=2; COEFF=0.01; EP=2
PEER_PY=${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python
PY=${PYTHON:-$([[ -x $PEER_PY ]] && echo "$PEER_PY" || echo /usr/bin/python3)}  # PyTorch 2.15 (DS_PEERS=1)
echo "== PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1) from $PY"
[[ -x bin/ds-launch ]] || tools/build.sh
if [[ -z "${OPENBLAS_CORETYPE:-}" ]] && grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
"$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, $V, size=400000, dtype=np.uint16).tofile('$W/tokens.bin')"
# job NAME STEPS MOE(yes|no) DROP_TOKENS EXPERT_PARALLEL: writes $W/NAME.yaml, metrics to $W/NAME.csv.
job() {
  local model="family: gpt2, n_layer: $L, n_embd: $C, n_head: $H, vocab_size: $V, max_seq_len: $T"
  local parallel=""
  if [[ $3 == yes ]]; then
    model+=", moe: {num_experts: $E, top_k: $K, capacity_factor: $CF, min_capacity: $MINCAP, drop_tokens: $4,"
    model+=" use_rts: $RTS, top2_2nd_expert_sampling: $TOP2S, expert_interval: $INTERVAL, moe_loss_coeff: $COEFF}"
    parallel="parallel: {expert: $5}"
  fi
  cat > "$W/$1.yaml" <<YAML
train_micro_batch_size_per_gpu: $B
gradient_accumulation_steps: 1
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}}
zero_optimization: {stage: 2, overlap_comm: true}
model: {$model}
$parallel
data: {train: $W/tokens.bin, format: uint16, seq_len: $T, shuffle: false}
training: {train_iters: $2}
monitor: {csv: $W/$1.csv}
device: {threads: 1}
YAML
}
job moe "$STEPS" yes "$DROP" "$EP"
job dense "$STEPS" no
job moe_nodrop "$EXACT_STEPS" yes false "$EP"
job moe_ep1 "$STEPS" yes "$DROP" 1
printf '127.0.0.1 slots=2\n' > "$W/hosts"
echo "== GPT-2 L=$L C=$C H=$H V=$V T=$T, micro $B per rank, 2 ranks x 1 thread, fp32, ZeRO-2;" \
  "MoE: $E experts every $INTERVAL blocks, top-$K, capacity_factor $CF, min_capacity $MINCAP," \
  "drop_tokens $DROP, use_rts $RTS, aux x $COEFF, expert parallel $EP"
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
# The initial weights for DeepSpeed, whole expert tensors under global expert ids (a checkpoint
# holds the same at every expert-parallel degree), exported by one process: hence the job at
# parallel.expert 1, which builds the same model.
bin/ds-worker --config "$W/moe_ep1.yaml" --export-init "$W/init.safetensors" > "$W/export.log" 2>&1 \
  || { tail -20 "$W/export.log"; exit 1; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# run_ds NAME: ds-launch on job NAME; sets ds_ms (median step after warm-up) and ds_losses.
run_ds() {
  rm -f "$W/$1.csv"
  bin/ds-launch "$W/$1.yaml" --hostfile "$W/hosts" > "$W/$1.log" 2>&1 || { tail -20 "$W/$1.log"; exit 1; }
  ds_ms=$(tail -n +$((WARMUP + 2)) "$W/$1.csv" | cut -d, -f10 | median)
  ds_losses=$(tail -n +2 "$W/$1.csv" | cut -d, -f2 | paste -sd,)
}
# DeepSpeed: torchrun's flags as ddp_vs_pytorch.sh (rank 0's stdout under --log_dir holds the
# summary), one thread per rank, tcmalloc, from the peers' venv (PyTorch 2.15, DeepSpeed 0.19.8).
TCMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
dsp_line=""
DSPY=""
if [[ "${DEEPSPEED:-1}" == 0 ]]; then
  dsp_line="skipped: DEEPSPEED=0"
elif ! DSPY=$(tools/bench/setup_deepspeed.sh 2> "$W/dsp_setup.log" | tail -1); then
  dsp_line="skipped: tools/bench/setup_deepspeed.sh failed: $(tail -1 "$W/dsp_setup.log")"
  DSPY=""
fi
# run_deepspeed STEPS DROP_TOKENS: sets dsp_line (the summary line, or why there is none).
run_deepspeed() {
  [[ -n "$DSPY" ]] || return 0
  rm -rf "$W/dtr"
  if ! OMP_NUM_THREADS=1 DS_ACCELERATOR=cpu LD_PRELOAD=$TCMALLOC \
    "$DSPY" -m torch.distributed.run --redirects 1 --tee 2 --log_dir "$W/dtr" --nnodes 1 --nproc_per_node 2 \
    --master_port 29579 tools/bench/deepspeed_moe_gpt2.py --weights "$W/init.safetensors" --data "$W/tokens.bin" \
    --n_layer $L --n_embd $C --n_head $H --vocab $V --seq $T --batch $B --num_experts $E --ep_size $EP \
    --k $K --capacity_factor $CF --min_capacity $MINCAP --drop_tokens "$2" --use_rts $RTS \
    --top2_2nd_expert_sampling $TOP2S --moe_loss_coeff $COEFF --expert_interval $INTERVAL --zero_stage 2 \
    --steps "$1" --warmup $WARMUP --threads 1 > "$W/dsp.log" 2>&1; then
    # The exception's own line (a traceback's last), else the launcher's last word.
    local why
    why=$(grep -h -E "^[A-Za-z_.]*(Error|Exception): |^deepspeed-moe: " \
      "$W"/dtr/*/attempt_0/*/stderr.log 2>/dev/null | head -1 || true)
    dsp_line="failed (the ds-runtime figures stand): ${why:-$(tail -1 "$W/dsp.log")}"
    DSPY=""
    return 0
  fi
  dsp_line=$(cat "$W"/dtr/*/attempt_0/0/stdout.log | grep "^deepspeed-moe:")
}
# This VM's step times move by +-30% from one run to the next, so the three run ROUNDS times,
# interleaved, and the medians over the rounds are compared.
rounds=()
for ((r = 1; r <= ROUNDS; r++)); do
  run_ds moe; moe_ms=$ds_ms; moe_losses=$ds_losses
  run_ds dense; dense_ms=$ds_ms
  run_deepspeed "$STEPS" "$DROP"
  rounds+=("$moe_ms|$dense_ms|$dsp_line")
done
dsp_main=$dsp_line
exact_ds="" exact_dsp="skipped: EXACT=0"
if [[ "$EXACT" == 1 ]]; then
  run_ds moe_nodrop; exact_ds=$ds_losses
  run_deepspeed "$EXACT_STEPS" false; exact_dsp=$dsp_line
fi
"$PY" - "$moe_losses" "$dsp_main" "$exact_ds" "$exact_dsp" "${rounds[@]}" <<'PYEOF'
import statistics, sys
def parse(text):
    kv = dict(p.split("=", 1) for p in text.split()[1:])
    return float(kv["ms_per_step"]), [float(x) for x in kv["losses"].split(",")], kv
def rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))
head = lambda v: ",".join(f"{x:.4f}" for x in v[:4])
moe_losses = [float(x) for x in sys.argv[1].split(",")]
dsp_text, exact_ds, exact_dsp = sys.argv[2], sys.argv[3], sys.argv[4]
have_dsp = dsp_text.startswith("deepspeed-moe:")
moe, dense, dsp = [], [], []
for r in sys.argv[5:]:
    a, b, c = r.split("|", 2)
    moe.append(float(a)); dense.append(float(b))
    if c.startswith("deepspeed-moe:"): dsp.append(parse(c)[0])
fmt = lambda v: " ".join(f"{x:.1f}" for x in v)
med = statistics.median
print(f"rounds: {len(moe)} (medians over rounds; each round's median step after warm-up in brackets)")
print(f"ds-runtime MoE, EP 2, ZeRO-2 overlap (Gloo): {med(moe):8.1f} ms/step  [{fmt(moe)}]")
print(f"ds-runtime dense, ZeRO-2 overlap (Gloo):     {med(dense):8.1f} ms/step  [{fmt(dense)}]")
if have_dsp and dsp:
    _, dsp_losses, kv = parse(dsp_text)
    print(f"DeepSpeed {kv['deepspeed']} MoE, ep_size 2, ZeRO-2 overlap (gloo): {med(dsp):8.1f} ms/step  [{fmt(dsp)}]"
          f"  (CPU accelerator, torch {kv['torch']}, allgather={kv['allgather']}, tcmalloc, torchrun)")
    print(f"ratio ds-runtime MoE / DeepSpeed-MoE: {med(moe) / med(dsp):.2f}x (target <= 0.80); per round "
          f"{' '.join(f'{a / b:.2f}' for a, b in zip(moe, dsp))}")
else:
    print(f"DeepSpeed: {dsp_text}")
print(f"ratio ds-runtime MoE / dense: {med(moe) / med(dense):.2f}x; per round "
      f"{' '.join(f'{a / b:.2f}' for a, b in zip(moe, dense))}")
if have_dsp and dsp:
    print(f"MoE loss curves (drop_tokens true, use_rts false): max relative difference {rel(moe_losses, dsp_losses):.2e}"
          f" over {min(len(moe_losses), len(dsp_losses))} steps; first steps ds-runtime {head(moe_losses)},"
          f" DeepSpeed {head(dsp_losses)}")
if exact_dsp.startswith("deepspeed-moe:") and exact_ds:
    a, b = [float(x) for x in exact_ds.split(",")], parse(exact_dsp)[1]
    print(f"MoE loss curves without drops (every token kept): max relative difference {rel(a, b):.2e};"
          f" ds-runtime {head(a)}, DeepSpeed {head(b)}")
else:
    print(f"MoE loss curves without drops: {exact_dsp}")
PYEOF
