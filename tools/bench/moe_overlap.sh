#!/usr/bin/env bash
# PR-MoE's shared-expert overlap (parallel/expert/moe_overlap.h) measured: GPT-2 L4 C256 T256 with
# DeepSpeed-MoE's residual layers (use_residual: 4 experts every second block, top-1, the dense
# MLP beside them), EP 2 over 2 ranks x 1 thread, ZeRO-2 overlap_comm, Gloo over loopback. The
# same job runs with parallel.moe_shared_expert_overlap true (the dense branch runs while the
# dispatch all-to-all is in flight, forward and backward) and false (the same node order, the
# all-to-all synchronous), alternating for ROUNDS rounds; each round's figure is the median step
# time after WARMUP steps (monitor.csv). The losses of the two must be identical.
#   [STEPS=14] tools/bench/moe_overlap.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-/usr/bin/python3}
ROUNDS=${1:-3}
STEPS=${STEPS:-14}
WARMUP=4
[[ -x bin/ds-launch ]] || tools/build.sh
if [[ -z "${OPENBLAS_CORETYPE:-}" ]] && grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export DS_RUNTIME_HOME=$W/home
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
"$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, 8192, size=400000, dtype=np.uint16).tofile('$W/tokens.bin')"
printf '127.0.0.1 slots=2\n' > "$W/hosts"

job() {  # job NAME OVERLAP
  cat > "$W/$1.yaml" <<YAML
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 1
gradient_clipping: 1.0
optimizer: {type: AdamW, params: {lr: 1.0e-4}}
zero_optimization: {stage: 2, overlap_comm: true}
model: {family: gpt2, n_layer: 4, n_embd: 256, n_head: 4, vocab_size: 8192, max_seq_len: 256, moe: {num_experts: 4, top_k: 1, expert_interval: 2, use_residual: true, use_rts: false}}
parallel: {expert: 2, moe_shared_expert_overlap: $2}
data: {train: $W/tokens.bin, format: uint16, seq_len: 256, shuffle: false}
training: {train_iters: $STEPS}
monitor: {csv: $W/$1.csv}
device: {threads: 1}
YAML
}
job overlap true
job sync false
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
run() {  # run NAME: prints the median step ms
  rm -f "$W/$1.csv"
  bin/ds-launch "$W/$1.yaml" --hostfile "$W/hosts" > "$W/$1.log" 2>&1 || { tail -20 "$W/$1.log" >&2; exit 1; }
  tail -n +$((WARMUP + 2)) "$W/$1.csv" | cut -d, -f10 | median
}
bin/ds-launch plan "$W/overlap.yaml" --world 2 | grep -E "ACT_ALL_TO_ALL|overlap" || true
on=(); off=()
for r in $(seq "$ROUNDS"); do
  on+=("$(run overlap)"); off+=("$(run sync)")
  echo "round $r: overlap ${on[-1]} ms/step, synchronous ${off[-1]} ms/step"
done
if cmp -s <(cut -d, -f2 "$W/overlap.csv") <(cut -d, -f2 "$W/sync.csv"); then
  echo "losses: identical over $STEPS steps"
else
  echo "losses differ:"; paste -d' ' <(cut -d, -f2 "$W/overlap.csv") <(cut -d, -f2 "$W/sync.csv") | head
fi
# Where the time goes (wall_clock_breakdown: each instruction kind's time over the steps): posted,
# the all-to-all costs its hand-over; its transfer is waited for in the compute after the branch.
for name in sync overlap; do
  printf 'wall_clock_breakdown: true\n' >> "$W/$name.yaml"
  bin/ds-launch "$W/$name.yaml" --hostfile "$W/hosts" > "$W/$name.log" 2>&1 || { tail -20 "$W/$name.log"; exit 1; }
  grep "^\[rank 0\]" "$W/$name.log" | sed 's/^\[rank 0\] //' | awk -v name="$name" -v steps="$STEPS" '
    /^step plan instruction/ { table = 1; next }
    table && NF == 2 && $2 ~ /^[0-9.]+$/ { total += $2; ms[$1] = $2 }
    END { if (total > 0) printf "%s: ACT_ALL_TO_ALL %.1f ms of %.1f ms over %d steps (%.1f%%), FORWARD %.1f, BACKWARD %.1f\n",
            name, ms["ACT_ALL_TO_ALL"], total, steps, 100 * ms["ACT_ALL_TO_ALL"] / total, ms["FORWARD"], ms["BACKWARD"] }'
done
"$PY" - "${on[*]}" "${off[*]}" <<'PY'
import statistics, sys
on = [float(x) for x in sys.argv[1].split()]
off = [float(x) for x in sys.argv[2].split()]
a, b = statistics.median(on), statistics.median(off)
print(f"PR-MoE EP 2: overlap {a:.1f} ms/step, synchronous {b:.1f} ms/step: "
      f"{100 * (b - a) / b:.1f}% less step time (median of {len(on)} rounds)")
PY
