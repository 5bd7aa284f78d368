#!/usr/bin/env bash
# LoRA fine-tuning of a Llama-3.2-1B shape (issue 33): a random-weight Hugging Face folder of
# its shape (tools/bench/make_hf_model.py, fp32; 1.24B parameters, 128256 vocabulary, tied
# embeddings) trained from `model: {hf: DIR}` by ds-worker with and without `model.lora`
# (r 16, alpha 32, all-linear), beside transformers + PyTorch and transformers + PEFT on the same
# folder, batches and threads (tools/bench/transformers_finetune.py), all fp32. Prints, per run:
# the planned memory per rank (ds-launch plan: model states, frozen weights, peak) and the
# measured median step time after 2 warm-up steps, tokens/s and peak RSS.
#
#   tools/bench/lora_finetune.sh      (B=1 T=256 STEPS=5 THREADS=2 R=16; FULL=0 skips full
#                                      fine-tuning, which needs about 20 GiB; WORK=dir keeps
#                                      the model)
set -uo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-/tmp/ds-lora-finetune}
B=${B:-1}; T=${T:-256}; STEPS=${STEPS:-5}; THREADS=${THREADS:-2}; R=${R:-16}
PEER=${DS_PEER_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python}
TOOLS_PY=${DS_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/tools-venv}/bin/python
[[ -x bin/ds-worker ]] || tools/build.sh
mkdir -p "$WORK"
MODEL=$WORK/llama-3.2-1b
[[ -f $MODEL/config.json ]] || "$TOOLS_PY" tools/bench/make_hf_model.py --shape llama-3.2-1b --dtype f32 --out "$MODEL"
python3 -c "
import random, struct
random.seed(0)
n = $B * $T * ($STEPS + 1) + 1
open('$WORK/tokens.bin', 'wb').write(struct.pack('<%dH' % n, *[random.randrange(32000) for _ in range(n)]))"
job() {  # job NAME LORA_YAML
  cat > "$WORK/$1.yaml" <<YAML
train_micro_batch_size_per_gpu: $B
gradient_accumulation_steps: 1
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}}
model: {hf: $MODEL$2}
data: {train: $WORK/tokens.bin, format: uint16, seq_len: $T, shuffle: false}
training: {train_iters: $STEPS}
monitor: {csv: $WORK/$1.csv, log_interval: 1}
device: {threads: $THREADS}
YAML
}
job full ""
job lora ", lora: {r: $R, lora_alpha: $((2 * R)), target_modules: all-linear}"
echo "== Llama-3.2-1B shape, fp32, B=$B T=$T, $STEPS steps (median after 2), $THREADS threads, LoRA r $R all-linear"
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(free -g | awk '/Mem/ {print $2}') GiB"
runs=(lora); [[ ${FULL:-1} == 1 ]] && runs+=(full)
for run in "${runs[@]}"; do
  echo "-- $run fine-tuning"
  bin/ds-launch plan "$WORK/$run.yaml" --world 1 2>&1 |
    grep -E "^model|model states|frozen weights|activations \(peak\)|peak total" | sed 's/^/  plan: /'
  if ! bin/ds-worker --config "$WORK/$run.yaml" > "$WORK/$run.out" 2>&1; then
    echo "  ds-runtime: failed: $(tail -2 "$WORK/$run.out")"; continue
  fi
  python3 - "$WORK/$run.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
mid = lambda xs: sorted(xs)[len(xs) // 2]
ms = mid([float(r["step_ms"]) for r in rows[2:]])
print(f"  ds-runtime: ms_per_step={ms:.1f} tokens_per_s={mid([float(r['tokens_per_s']) for r in rows[2:]]):.1f} "
      f"peak_rss_mib={max(int(r['peak_rss_bytes']) for r in rows) / 2**20:.0f} first_loss={rows[0]['loss']}")
PY
  if "$PEER" -c "import peft, transformers" 2>/dev/null; then
    args=(); [[ $run == lora ]] && args=(--lora "$R" --lora-alpha $((2 * R)) --lora-targets all-linear)
    out=$(OMP_NUM_THREADS=$THREADS "$PEER" tools/bench/transformers_finetune.py --model "$MODEL" \
      --data "$WORK/tokens.bin" --batch "$B" --seq "$T" --steps "$STEPS" --threads "$THREADS" --lr 1e-4 \
      "${args[@]}" 2>/dev/null | tail -1)
    echo "  PyTorch $("$PEER" -c 'import torch; print(torch.__version__)')${args:+ + PEFT $("$PEER" -c 'import peft; print(peft.__version__)')}: ${out#pytorch: }" |
      sed 's/ losses=\([0-9.]*\),.*/ first_loss=\1/'
  else
    echo "  PyTorch: no peers' venv with peft (DS_PEERS=1 tools/setup.sh)"
  fi
done
