#!/usr/bin/env bash
# The default example (configs/examples/addition.yaml: a 3-layer GPT learning 3-digit addition,
# 3000 steps) in bf16 against fp32, as tools/run-example.sh runs it: once with every kernel the
# CPU has (bf16 products in bf16 where it has AVX512_BF16 or AMX), once forced onto the fallback
# of a CPU without AVX-512 (DS_CPU_ISA=avx2: oneDNN held to AVX2, bf16 products as fp32 products
# of the widened values, the 8-lane loops). Each bf16 run:
#  - says which path it took (the worker's CPU GEMM line);
#  - follows the fp32 curve within 2e-2 relative over the first 300 steps (each 20-step mean),
#    and its mean loss over the last 300 steps, and the final validation loss, within 2e-2;
#  - reaches the fp32 run's held-out exact match within one point.
# Between those spans the loss sits on a plateau and then falls as the model learns to carry;
# where the fall starts moves by a hundred steps or more with any change of rounding (fp32 and
# bf16 runs of this example differ there by up to 28% at one step), so the test prints the
# largest per-step difference over the whole run and holds the spans where the curve is a
# curve, not a race. A per-step bound also fails inside the first 300 steps: single steps of
# the bf16 run sit up to 3.9% off fp32's while their 20-step means agree within 0.7%. A loss
# spike on the plateau is a race too: both runs take one (one run: bf16 at steps 287-297, fp32
# at 331-335, each to about 2.1 against 1.60), at a step that moves with rounding. So the
# first-300 check skips the 20-step windows holding a spike step of either run (past the
# warm-up's 100 steps, a loss above 1.05x that run's median over steps 101-300) and says how many
# it skipped; at most 60 of the 281 may go, and each run must be back on the fp32 curve for its
# last 300 steps (below).
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
WORKER=$R/runtime/worker/ds-worker
DATA=$R/tools/ds_data/ds-data
T=${TEST_TMPDIR:-$(mktemp -d)}/bf16_example
rm -rf "$T"; mkdir -p "$T"
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

"$DATA" addition --digits 3 --train_examples 50000 --val_examples 2000 --seed 1 \
  --output_dir "$T/data" > /dev/null 2>&1 || { echo "FAIL: ds-data addition"; exit 1; }

# run NAME EXTRA_YAML [ENV...]: the example as shipped, its paths under $T/NAME.
run() {
  local name=$1 extra=$2; shift 2
  mkdir -p "$T/$name"
  sed -e "s#runs/addition/data#$T/data#g" -e "s#runs/addition#$T/$name#g" \
    "$R/configs/examples/addition.yaml" > "$T/$name.yaml"
  [[ -n $extra ]] && echo "$extra" >> "$T/$name.yaml"
  env "$@" timeout 900 "$WORKER" --config "$T/$name.yaml" > "$T/$name.out" 2>&1 \
    && env "$@" timeout 300 "$WORKER" --config "$T/$name.yaml" --eval > "$T/$name.eval" 2>&1 \
    || { fail "$name: ds-worker failed"; tail -5 "$T/$name.out" "$T/$name.eval"; return 1; }
  grep -m1 "CPU GEMM" "$T/$name.out" | sed 's/.*CPU GEMM: /  CPU GEMM: /'
  grep -m1 "exact match" "$T/$name.eval" | sed 's/^/  /'
}

run fp32 "" || exit 1
run bf16 "bf16: {enabled: true}"
run bf16_avx2 "bf16: {enabled: true}" DS_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell

# The native run takes bf16 products where the CPU has them; the forced one never does.
if grep -q -E "avx512_bf16|amx_bf16" /proc/cpuinfo; then
  grep -q "bf16 inputs, fp32 accumulation (native)" "$T/bf16.out" \
    && pass "bf16: native bf16 products on this CPU" || fail "bf16: not the native path"
fi
grep "CPU GEMM" "$T/bf16_avx2.out" | grep -q "oneDNN ISA avx2" \
  && grep "CPU GEMM" "$T/bf16_avx2.out" | grep -q "bf16 products: fp32 on the widened weights" \
  && pass "bf16_avx2: the fallback (oneDNN at AVX2, widened products)" \
  || fail "bf16_avx2: the fallback was not taken"
if [[ $(grep -c avx512f /proc/cpuinfo) -gt 0 ]]; then
  grep -q "DS_CPU_ISA caps the host's kernels at avx2" "$T/bf16_avx2.out" \
    && pass "bf16_avx2: the worker says the ISA is capped" || fail "bf16_avx2: no cap line"
fi

python3 - "$T" <<'PY' || fails=$((fails + 1))
import csv, re, sys
t = sys.argv[1]
def curve(name):
    return [float(r["loss"]) for r in csv.DictReader(open(f"{t}/{name}/metrics.csv"))]
def evals(name):
    text = open(f"{t}/{name}.eval").read()
    val = float(re.search(r"validation loss ([0-9.]+)", text).group(1))
    em = re.search(r"exact match [0-9.]+% \((\d+)/(\d+)", text)
    return val, 100.0 * int(em.group(1)) / int(em.group(2))
f32 = curve("fp32")
f32_val, f32_em = evals("fp32")
bad = 0
for name in ("bf16", "bf16_avx2"):
    c = curve(name)
    if len(c) != len(f32):
        print(f"FAIL: {name}: {len(c)} steps, fp32 {len(f32)}"); bad += 1; continue
    rel = [abs(a - b) / abs(b) for a, b in zip(c, f32)]
    mean20 = lambda x, i: sum(x[i:i + 20]) / 20
    spike = lambda x: {i for i in range(100, 300) if x[i] > 1.05 * sorted(x[100:300])[100]}
    spikes = spike(c) | spike(f32)
    windows = [i for i in range(0, 281) if not spikes & set(range(i, i + 20))]
    early = max(abs(mean20(c, i) - mean20(f32, i)) / mean20(f32, i) for i in windows)
    print(f"  {name}: spike steps in the first 300: {name} {sorted(j + 1 for j in spike(c))}, "
          f"fp32 {sorted(j + 1 for j in spike(f32))}; {281 - len(windows)} of 281 windows skipped")
    tail = abs(sum(c[-300:]) - sum(f32[-300:])) / abs(sum(f32[-300:]))
    val, em = evals(name)
    vrel = abs(val - f32_val) / f32_val
    worst = max(range(len(rel)), key=rel.__getitem__)
    print(f"  {name}: first 300 steps, 20-step means: max rel {early:.2e}; last 300 mean rel {tail:.2e}; "
          f"validation {val} vs {f32_val} ({vrel:.2e}); exact match {em:.2f}% vs {f32_em:.2f}%; "
          f"largest per-step rel {rel[worst]:.3f} at step {worst + 1}")
    for ok, what in ((early <= 2e-2, "first 300 steps (20-step means) within 2e-2"),
                     (len(windows) >= 221, "at most 60 windows skipped for spikes"),
                     (tail <= 2e-2, "last 300 steps' mean within 2e-2"),
                     (vrel <= 2e-2, "validation loss within 2e-2"),
                     (abs(em - f32_em) <= 1.0, "exact match within one point"),
                     (c[-1] < 0.5 * c[0], "it learned")):
        print(("ok: " if ok else "FAIL: ") + f"{name}: {what}")
        bad += not ok
sys.exit(1 if bad else 0)
PY

[[ $fails -eq 0 ]] && echo "PASS" || echo "FAILED: $fails"
exit $((fails > 0))
