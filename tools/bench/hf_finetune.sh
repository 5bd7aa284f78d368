#!/usr/bin/env bash
# Fine-tuning a Hugging Face folder (issue: bring your own model): a Qwen2.5-0.5B-shape model
# (random, tools/bench/make_hf_model.py; 494M parameters, 151936 vocabulary, q/k/v biases)
# trained 10 steps at T 256 from `model: {hf: DIR}` by ds-worker, beside the same folder
# trained by transformers + PyTorch (tools/bench/transformers_finetune.py: same batches, AdamW,
# clipping, threads), in fp32 and in bf16 (ours: bf16: {enabled: true}; PyTorch's: autocast).
# Prints the median step time after 2 warm-up steps, tokens/s, peak RSS and the first losses.
#
#   tools/bench/hf_finetune.sh          (B=1 T=256 STEPS=10 THREADS=2; COMPILE=1 adds
#                                        torch.compile; WORK=dir keeps the model)
set -uo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-/tmp/ds-hf-finetune}
B=${B:-1}; T=${T:-256}; STEPS=${STEPS:-10}; THREADS=${THREADS:-2}
PEER=${DS_PEER_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python}
TOOLS_PY=${DS_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/tools-venv}/bin/python
[[ -x bin/ds-worker ]] || tools/build.sh
mkdir -p "$WORK"
MODEL=$WORK/qwen2.5-0.5b
[[ -f $MODEL/config.json ]] || "$TOOLS_PY" tools/bench/make_hf_model.py --shape qwen2.5-0.5b --dtype f32 --out "$MODEL"
python3 -c "
import random, struct
random.seed(0)
n = $B * $T * ($STEPS + 1) + 1
open('$WORK/tokens.bin', 'wb').write(struct.pack('<%dH' % n, *[random.randrange(32000) for _ in range(n)]))"
cat > "$WORK/job.yaml" <<YAML
train_micro_batch_size_per_gpu: $B
gradient_accumulation_steps: 1
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-5, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}}
model: {hf: $MODEL}
data: {train: $WORK/tokens.bin, format: uint16, seq_len: $T, shuffle: false}
training: {train_iters: $STEPS}
monitor: {csv: $WORK/ds.csv, log_interval: 1}
device: {threads: $THREADS}
YAML
echo "== Qwen2.5-0.5B shape, fp32 weights, B=$B T=$T, $STEPS steps (median after 2), $THREADS threads"
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(grep -o 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | paste -sd' ' | sed 's/^$/no bf16 instructions/')"
# ds-runtime in fp32, then in bf16 mixed precision (bf16 weights and products, fp32 master and
# optimizer states) beside PyTorch's autocast.
for prec in fp32 bf16; do
  job=$WORK/job.yaml
  [[ $prec == bf16 ]] && { job=$WORK/job_bf16.yaml; sed "s|ds.csv|ds_bf16.csv|" "$WORK/job.yaml" > "$job"; echo "bf16: {enabled: true}" >> "$job"; }
  csv=$(sed -n 's/.*csv: \([^,}]*\).*/\1/p' "$job")
  bin/ds-worker --config "$job" > "$WORK/ds_$prec.out" 2>&1 || { tail -5 "$WORK/ds_$prec.out"; exit 1; }
  python3 - "$csv" "$prec" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ms = sorted(float(r["step_ms"]) for r in rows[2:])[len(rows[2:]) // 2]
print(f"ds-runtime {sys.argv[2]}: ms_per_step={ms:.1f} tokens_per_s={float(sorted(float(r['tokens_per_s']) for r in rows[2:])[len(rows[2:]) // 2]):.1f} "
      f"peak_rss_mib={max(int(r['peak_rss_bytes']) for r in rows) / 2**20:.0f} first_loss={rows[0]['loss']}")
PY
done
if "$PEER" -c "import transformers" 2>/dev/null; then
  echo "PyTorch $("$PEER" -c 'import torch; print(torch.__version__)'), transformers $("$PEER" -c 'import transformers; print(transformers.__version__)'):"
  modes=("" "--bf16"); [[ ${COMPILE:-0} == 1 ]] && modes+=("--compile" "--bf16 --compile")
  for m in "${modes[@]}"; do
    # shellcheck disable=SC2086
    out=$(OMP_NUM_THREADS=$THREADS "$PEER" tools/bench/transformers_finetune.py --model "$MODEL" \
      --data "$WORK/tokens.bin" --batch "$B" --seq "$T" --steps "$STEPS" --threads "$THREADS" $m 2>/dev/null | tail -1)
    echo "  eager${m:+ $m}: ${out#pytorch: }" | sed 's/ losses=\([0-9.]*\),.*/ first_loss=\1/'
  done
else
  echo "PyTorch: no peers' venv (DS_PEERS=1 tools/setup.sh)"
fi
