#!/usr/bin/env bash
# Trains the same GPT-2 shape with ds-worker and with PyTorch on the CPU (same initial
# weights, data, batch, sequence, optimizer, clipping and threads) in fp32 and in bf16 (our
# bf16 mixed precision; PyTorch's autocast), PyTorch eager and torch.compile'd, and prints
# ms/step, peak RSS, the ratios against PyTorch's best in each precision, and how far the fp32
# loss curves are apart. PyTorch is the peers' venv's (PyPI's 2.15, `DS_PEERS=1
# tools/setup.sh`) unless PYTHON names another; the versions that ran are printed.
#
#   tools/bench/train_vs_pytorch.sh                      # L=4 C=256 H=4 V=8192 T=256 B=4
#   tools/bench/train_vs_pytorch.sh --shape gpt2-small   # L=12 C=768 H=12 V=50257 T=256 B=4
#   STEPS=12 THREADS=2 ROUNDS=2 tools/bench/train_vs_pytorch.sh
#
# PyTorch runs with glibc's default allocator, with glibc told to keep freed memory
# (MALLOC_MMAP_THRESHOLD_/TRIM_THRESHOLD_/TOP_PAD_), and with jemalloc and tcmalloc where
# installed; the fastest is the reference. Both sides run the same OPENBLAS_CORETYPE
# (printed). Times are medians after the warm-up steps, each configuration's best of ROUNDS
# rounds (default 2) that run every configuration in turn, so a machine whose speed drifts during
# the run (a shared VM's does, by 10-15% within an hour) moves both sides alike; every round's
# figure is printed beside the best. The model FLOP utilization is reported
# against the 2048^3 GEMM rate of each side (gemm_bench's oneDNN and torch.mm), measured in the
# same run; our bf16 step's against the fp32 rate on a CPU without bf16 products (no AVX512_BF16
# or AMX), where it multiplies in fp32.
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
# Both sides must run the same OpenBLAS kernels. When the environment does not choose,
# choose the best this CPU runs (OpenBLAS's own detection can fall back to generic SSE3
# kernels inside VMs, which would slow both sides 3-5x).
if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  if [[ $flags == *avx512f* && $flags == *avx512bw* && $flags == *avx512dq* && $flags == *avx512vl* ]]; then
    export OPENBLAS_CORETYPE=SkylakeX
  elif [[ $flags == *avx2* && $flags == *fma* ]]; then
    export OPENBLAS_CORETYPE=Haswell
  fi
  echo "== OPENBLAS_CORETYPE was unset; using ${OPENBLAS_CORETYPE:-OpenBLAS detection} for both sides"
fi
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
WARMUP=2
PEER_PY=${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python
PY=${PYTHON:-$([[ -x $PEER_PY ]] && echo "$PEER_PY" || echo /usr/bin/python3)}
echo "== PyTorch from $PY: $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
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

echo "== shape: L=$L C=$C H=$H V=$V T=$T B=$B, $THREADS threads, $STEPS steps ($WARMUP warm-up)"
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
bin/ds-worker --config "$WORK/job.yaml" --export-init "$WORK/init.safetensors" >/dev/null
# ds_run CSV [EXTRA YAML]: one run, its median ms/step (after the warm-up) and peak RSS.
ds_run() {
  sed "s|csv: $WORK/ds.csv|csv: $1|" "$WORK/job.yaml" > "$WORK/run.yaml"
  [[ -n ${2:-} ]] && echo "$2" >> "$WORK/run.yaml"
  bin/ds-worker --config "$WORK/run.yaml" > "$WORK/run.out" 2>&1 || { tail -3 "$WORK/run.out" >&2; return 1; }
  "$PY" - "$1" "$WARMUP" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ms = sorted(float(r["step_ms"]) for r in rows[int(sys.argv[2]):])
print(f"{ms[len(ms)//2]:.1f} {int(rows[-1]['peak_rss_bytes'])/2**20:.1f}")
PYEOF
}

run_torch() {  # run_torch [--bf16] [--compile]
  "$PY" tools/bench/pytorch_gpt2.py --weights "$WORK/init.safetensors" --data "$WORK/tokens.bin" \
    --n_layer "$L" --n_head "$H" --batch "$B" --seq "$T" --steps "$STEPS" --warmup "$WARMUP" \
    --threads "$THREADS" "$@" 2>&1 | tail -1
}
# PyTorch with each allocator setting available; the fastest is the reference.
declare -a PT_NAMES PT_LINES
try_torch() {  # try_torch NAME FLAGS ENV...: FLAGS ("" or "--bf16 --compile" ...) to the script
  local name=$1 flags=$2; shift 2
  echo "== pytorch, $name"
  local line
  line=$(env "$@" bash -c "$(declare -f run_torch); $(declare -p WORK PY L H B T STEPS WARMUP THREADS); run_torch $flags")
  echo "$line" | cut -c1-100
  PT_NAMES+=("$name"); PT_LINES+=("$line")
}
KEEP=(MALLOC_MMAP_THRESHOLD_=17179869184 MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=1073741824)
# ROUNDS rounds, each running our two precisions and PyTorch's contenders one after the other,
# so a machine that speeds up or slows down during the run moves both sides alike; each
# configuration's figure is its best round (the eager fp32 allocator variants, never the best,
# run in the first round only).
declare -a DS_FP32 DS_BF16
BF16_PRODUCTS=bf16
for round in $(seq "$ROUNDS"); do
  echo "== round $round of $ROUNDS"
  echo "== ds-runtime, fp32"
  DS_FP32+=("$(ds_run "$WORK/ds$round.csv")")
  echo "== ds-runtime, bf16"
  DS_BF16+=("$(ds_run "$WORK/ds_bf16_$round.csv" "bf16: {enabled: true}")")
  # Where the CPU has no bf16 products (no AVX512_BF16 or AMX), our bf16 step multiplies in fp32.
  grep -q "bf16 products: fp32 on the widened weights" "$WORK/run.out" && BF16_PRODUCTS=fp32
  if [[ $round == 1 ]]; then
    try_torch "eager fp32, glibc malloc (default)" ""
    try_torch "eager fp32, glibc keeping freed memory" "" "${KEEP[@]}"
    for lib in /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4; do
      [[ -e $lib ]] && try_torch "eager fp32, LD_PRELOAD=$(basename "$lib")" "" LD_PRELOAD="$lib"
    done
  fi
  # The other modes with glibc keeping freed memory.
  try_torch "eager bf16 autocast" "--bf16" "${KEEP[@]}"
  try_torch "torch.compile fp32" "--compile" "${KEEP[@]}"
  try_torch "torch.compile bf16 autocast" "--bf16 --compile" "${KEEP[@]}"
done
ds_losses=$("$PY" -c "import csv; print(','.join(r['loss'] for r in csv.DictReader(open('$WORK/ds1.csv'))))")
# The GEMM peaks both sides quote (2048^3, same threads), for the model FLOP utilization.
bazel build -c opt --jobs=2 //kernels/cpu:gemm_bench >/dev/null 2>&1
read -r peak_ours_fp32 peak_ours_bf16 < <(bazel-bin/kernels/cpu/gemm_bench --threads "$THREADS" \
  --shape none | awk '/^2048\^3/ {print $9, $10}')
read -r peak_torch_fp32 peak_torch_bf16 < <(OMP_NUM_THREADS=$THREADS "$PY" - "$THREADS" <<'PYEOF'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
def rate(dtype):
    a, b = torch.randn(2048, 2048).to(dtype), torch.randn(2048, 2048).to(dtype)
    t0 = time.perf_counter(); torch.mm(a, b); first = time.perf_counter() - t0
    # Where a call takes seconds (bf16 without AVX-512: PyTorch's fallback ran at 0.3 GFLOP/s,
    # a minute a call), one timed call after the first; else the median of 7 after another.
    calls = 7 if first < 1.0 else 1
    if calls > 1: torch.mm(a, b)
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter(); torch.mm(a, b); ts.append(time.perf_counter() - t0)
    return 2.0 * 2048 ** 3 / sorted(ts)[calls // 2] / 1e9
print(f"{rate(torch.float32):.1f} {rate(torch.bfloat16):.1f}")
PYEOF
)
runs_file=$WORK/runs.txt
: > "$runs_file"
for i in "${!PT_NAMES[@]}"; do printf '%s\t%s\n' "${PT_NAMES[$i]}" "${PT_LINES[$i]}" >> "$runs_file"; done
ds_file=$WORK/ds_runs.txt
: > "$ds_file"
for r in "${DS_FP32[@]}"; do printf 'fp32\t%s\n' "$r" >> "$ds_file"; done
for r in "${DS_BF16[@]}"; do printf 'bf16\t%s\n' "$r" >> "$ds_file"; done

"$PY" - "$ds_file" "$ds_losses" "$runs_file" \
  "$L $C $V $T $B" "$peak_ours_fp32 $peak_ours_bf16 $peak_torch_fp32 $peak_torch_bf16" \
  "$BF16_PRODUCTS" <<'PYEOF'
import sys
bf16_products = sys.argv[6]  # "fp32" where our bf16 step's products are fp32 on this CPU
L, C, V, T, B = map(int, sys.argv[4].split())
peaks = dict(zip(("ours fp32", "ours bf16", "torch fp32", "torch bf16"), map(float, sys.argv[5].split())))
ds_losses = [float(x) for x in sys.argv[2].split(",")]
def parse(line):
    kv = dict(p.split("=", 1) for p in line.split()[1:])
    return float(kv["ms_per_step"]), float(kv["peak_rss_mib"]), [float(x) for x in kv["losses"].split(",")]
ours = {}  # precision -> [(ms, rss)] by round
for row in open(sys.argv[1]):
    label, fig = row.rstrip("\n").split("\t", 1)
    ours.setdefault(label, []).append(tuple(map(float, fig.split())))
rounds = {}  # PyTorch configuration -> [(ms, rss, losses)] by round
for row in open(sys.argv[3]):
    name, line = row.rstrip("\n").split("\t", 1)
    if line.startswith("pytorch:"):
        rounds.setdefault(name, []).append(parse(line))
    else:
        print(f"pytorch {name}: did not run ({line[:80]})")
runs = {name: min(r, key=lambda x: x[0]) for name, r in rounds.items()}  # each one's best round
(ds_ms, ds_rss), (bf_ms, bf_rss) = (min(ours[k]) for k in ("fp32", "bf16"))
def each(ms):
    return " ".join(f"{m:.1f}" for m in ms) if len(ms) > 1 else ""
print()
print(f"{'':48s} {'ms/step':>10s} {'peak RSS MiB':>14s}   {'each round (ms/step)'}")
print(f"{'ds-runtime fp32':48s} {ds_ms:10.1f} {ds_rss:14.1f}   {each([x[0] for x in ours['fp32']])}")
print(f"{'ds-runtime bf16':48s} {bf_ms:10.1f} {bf_rss:14.1f}   {each([x[0] for x in ours['bf16']])}")
for name, (ms, rss, _) in runs.items():
    print(f"{'pytorch ' + name:48s} {ms:10.1f} {rss:14.1f}   {each([x[0] for x in rounds[name]])}")
for label, ours, rss in (("fp32", ds_ms, ds_rss), ("bf16", bf_ms, bf_rss)):
    mine = {k: v for k, v in runs.items() if label in k}
    if not mine:
        continue
    best = min(mine, key=lambda k: mine[k][0])
    print(f"{label}: ds/pytorch-best ({best}): time {ours / mine[best][0]:.2f}x (target <= 0.80), "
          f"RSS {rss / mine[best][1]:.2f}x (target <= 1.00)")
# Model FLOPs per step as PaLM counts them: 6 per matmul parameter per token (the blocks'
# 12 L C^2 and the head's V C) plus 12 L T C per token for attention's two products.
flops = B * T * (6 * (12 * L * C * C + V * C) + 12 * L * T * C)
print(f"model FLOPs per step {flops / 1e9:.2f} G; GEMM peaks at 2048^3 (GFLOP/s): "
      + ", ".join(f"{k} {v:.1f}" for k, v in peaks.items()))
for label, ms in (("fp32", ds_ms), ("bf16", bf_ms)):
    rate = flops / (ms / 1e3) / 1e9
    # Our bf16 step on a CPU without bf16 products computes in fp32: its MFU is against fp32.
    peak = "fp32" if label == "bf16" and bf16_products == "fp32" else label
    why = " (this CPU has no bf16 products: our bf16 step multiplies in fp32)" if peak != label else ""
    print(f"{label}: ds-runtime {rate:.1f} GFLOP/s of model FLOPs = MFU {100 * rate / peaks['ours ' + peak]:.1f}% "
          f"of our {peak} GEMM peak, {100 * rate / peaks['torch ' + peak]:.1f}% of PyTorch's{why}")
# Whether a ratio target can be met at all: the model FLOPs at the 0.80x target's step time
# against the fastest GEMM of this run in that precision (either side's, at 2048^3).
for label in ("fp32", "bf16"):
    mine = [v[0] for k, v in runs.items() if label in k]
    if not mine:
        continue
    target_ms = 0.8 * min(mine)
    need = flops / (target_ms / 1e3) / 1e9
    fastest = max(peaks["ours " + label], peaks["torch " + label])
    verdict = (f"the whole step at {100 * need / fastest:.1f}% of that rate, attention, norms and "
               "the optimizer included" if need <= fastest
               else "above every GEMM of this run: unreachable by computing faster")
    print(f"{label}: 0.80x of PyTorch's best is {target_ms:.1f} ms, {need:.1f} GFLOP/s of model FLOPs; "
          f"the fastest {label} GEMM here {fastest:.1f} ({verdict})")
eager = runs.get("eager fp32, glibc malloc (default)")
if eager:
    diff = max(abs(a - b) / abs(b) for a, b in zip(ds_losses, eager[2]))
    print(f"fp32 loss curves (eager): max relative difference over {len(ds_losses)} steps {diff:.2e} "
          f"(first loss ds {ds_losses[0]:.5f} / torch {eager[2][0]:.5f})")
PYEOF
