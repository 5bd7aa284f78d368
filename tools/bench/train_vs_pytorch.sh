#!/usr/bin/env bash
# Trains the same GPT-2 shape with ds-worker and with PyTorch on the CPU (same initial
# weights, data, batch, sequence, optimizer, clipping and threads) and prints ms/step,
# peak RSS, the ratio, and how far the two loss curves are apart.
#
#   tools/bench/train_vs_pytorch.sh                      # L=4 C=256 H=4 V=8192 T=256 B=4
#   tools/bench/train_vs_pytorch.sh --shape gpt2-small   # L=12 C=768 H=12 V=50257 T=256 B=4
#   STEPS=12 THREADS=2 tools/bench/train_vs_pytorch.sh
#
# PyTorch runs twice: with glibc's default allocator, and with the allocator told to keep
# freed memory (no page-fault storm: MALLOC_MMAP_THRESHOLD_/TRIM_THRESHOLD_/TOP_PAD_); the
# better of the two is the reference. OPENBLAS_CORETYPE is whatever the environment sets,
# the same for both sides, and is printed.
set -euo pipefail
cd "$(dirname "$0")/../.."

SHAPE=small
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shape) SHAPE=$2; shift 2 ;;
    *) echo "usage: $0 [--shape small|gpt2-small]" >&2; exit 2 ;;
  esac
done
case "$SHAPE" in
  small) L=4; C=256; H=4; V=8192; T=256; B=4; DEFAULT_STEPS=12 ;;
  gpt2-small) L=12; C=768; H=12; V=50257; T=256; B=4; DEFAULT_STEPS=6 ;;
  *) echo "unknown shape $SHAPE" >&2; exit 2 ;;
esac
STEPS=${STEPS:-$DEFAULT_STEPS}
THREADS=${THREADS:-2}
WARMUP=2
PY=${PYTHON:-/usr/bin/python3}
[[ -x bin/ds-worker ]] || tools/build.sh

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$PY" - "$WORK/tokens.bin" "$V" <<'PYEOF'
import sys, numpy as np
rng = np.random.default_rng(0)
rng.integers(0, int(sys.argv[2]), size=400000, dtype=np.uint16).tofile(sys.argv[1])
PYEOF
cat > "$WORK/job.yaml" <<YAML
train_micro_batch_size_per_gpu: $B
gradient_accumulation_steps: 1
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}}
model: {family: gpt2, n_layer: $L, n_embd: $C, n_head: $H, vocab_size: $V, max_seq_len: $T}
data: {train: $WORK/tokens.bin, format: uint16, seq_len: $T, shuffle: false}
training: {train_iters: $STEPS}
monitor: {csv: $WORK/ds.csv, log_interval: 1}
device: {threads: $THREADS}
YAML

echo "== shape: L=$L C=$C H=$H V=$V T=$T B=$B, fp32, $THREADS threads, $STEPS steps ($WARMUP warm-up)"
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
bin/ds-worker --config "$WORK/job.yaml" --export-init "$WORK/init.safetensors" >/dev/null
bin/ds-worker --config "$WORK/job.yaml" 2>&1 | grep -E "^step|done|memory" || true

ds_ms=$("$PY" - "$WORK/ds.csv" "$WARMUP" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))[int(sys.argv[2]):]
ms = sorted(float(r["step_ms"]) for r in rows)
print(f"{ms[len(ms)//2]:.1f}")
PYEOF
)
ds_rss=$("$PY" -c "import csv,sys; r=list(csv.DictReader(open('$WORK/ds.csv'))); print(f\"{int(r[-1]['peak_rss_bytes'])/2**20:.1f}\")")
ds_losses=$("$PY" -c "import csv; print(','.join(r['loss'] for r in csv.DictReader(open('$WORK/ds.csv'))))")

run_torch() {
  "$PY" tools/bench/pytorch_gpt2.py --weights "$WORK/init.safetensors" --data "$WORK/tokens.bin" \
    --n_layer "$L" --n_head "$H" --batch "$B" --seq "$T" --steps "$STEPS" --warmup "$WARMUP" \
    --threads "$THREADS" | tail -1
}
echo "== pytorch, default glibc allocator"
pt_default=$(run_torch)
echo "$pt_default" | cut -c1-120
echo "== pytorch, allocator keeping freed memory (MALLOC_MMAP_THRESHOLD_/TRIM_THRESHOLD_/TOP_PAD_)"
pt_tuned=$(MALLOC_MMAP_THRESHOLD_=17179869184 MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=1073741824 run_torch)
echo "$pt_tuned" | cut -c1-120

"$PY" - "$ds_ms" "$ds_rss" "$ds_losses" "$pt_default" "$pt_tuned" <<'PYEOF'
import sys
ds_ms, ds_rss, ds_losses = float(sys.argv[1]), float(sys.argv[2]), [float(x) for x in sys.argv[3].split(",")]
def parse(line):
    kv = dict(p.split("=", 1) for p in line.split()[1:])
    return float(kv["ms_per_step"]), float(kv["peak_rss_mib"]), [float(x) for x in kv["losses"].split(",")]
runs = {"default allocator": parse(sys.argv[4]), "kept-memory allocator": parse(sys.argv[5])}
best_name = min(runs, key=lambda k: runs[k][0])
pt_ms, pt_rss, pt_losses = runs[best_name]
diff = max(abs(a - b) / abs(b) for a, b in zip(ds_losses, pt_losses))
print()
print(f"{'':24s} {'ms/step':>10s} {'peak RSS MiB':>14s}")
print(f"{'ds-runtime':24s} {ds_ms:10.1f} {ds_rss:14.1f}")
for name, (ms, rss, _) in runs.items():
    print(f"{'pytorch, ' + name:24s} {ms:10.1f} {rss:14.1f}")
print(f"ratio ds/pytorch-best ({best_name}): time {ds_ms / pt_ms:.2f}x (target <= 0.80), "
      f"RSS {ds_rss / pt_rss:.2f}x (target <= 1.00)")
print(f"loss curves: max relative difference over {len(ds_losses)} steps {diff:.2e} "
      f"(first loss ds {ds_losses[0]:.5f} / torch {pt_losses[0]:.5f})")
PYEOF
