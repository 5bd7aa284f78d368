#!/usr/bin/env bash
# The CPU's matrix products on the training benchmarks' shapes (tools/bench/train_vs_pytorch.sh:
# L4 C256 V8192 and GPT-2 124M, B*T = 1024 rows), in one run: ours through every kernels/cpu/gemm.h
# path (OpenBLAS sgemm, oneDNN fp32, oneDNN bf16, bf16 widened to fp32), then PyTorch's torch.mm
# on the same shapes in fp32 and bf16 (the peers' venv: PyPI's 2.15 with its own oneDNN and
# MKL), and the 2048^3 rates both sides quote as the GEMM peak. Prints oneDNN's instruction set
# and whether bf16 is native here.
#
# COLD=1: both sides evict the caches before each timed call (a 512 MiB pass), so operands and
# outputs come from memory as in a training step (PyTorch's bf16 product writes a bf16 output,
# ours an fp32 one: half the bytes).
#
#   tools/bench/cpu_gemm.sh                  # 2 threads, both shapes
#   THREADS=1 SHAPE=small COLD=1 tools/bench/cpu_gemm.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
THREADS=${THREADS:-2}
SHAPE=${SHAPE:-all}
COLD=${COLD:-0}
PEER_PY=${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python
PY=${PYTHON:-$([[ -x $PEER_PY ]] && echo "$PEER_PY" || echo /usr/bin/python3)}
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== CPU flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' | sort -u | tr '\n' ' ')"
bazel build -c opt --jobs=2 //kernels/cpu:gemm_bench >/dev/null 2>&1 || bazel build -c opt --jobs=2 //kernels/cpu:gemm_bench
bazel-bin/kernels/cpu/gemm_bench --threads "$THREADS" --shape "$SHAPE" --cold "$COLD"
echo
echo "== PyTorch torch.mm on the same shapes, $THREADS threads$([[ $COLD == 1 ]] && echo ', caches evicted before each timed call')"
"$PY" - "$THREADS" "$SHAPE" "$COLD" <<'PYEOF'
import sys, time, torch
threads, shape, cold = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
junk = torch.ones(128 << 20, dtype=torch.int32) if cold else None
torch.set_num_threads(threads)
print(f"torch {torch.__version__}, mkldnn bf16 supported: {torch.backends.mkldnn.is_available()}")
def rate(m, n, k, ta, tb, dtype):
    a = torch.randn((k, m) if ta else (m, k)).to(dtype)
    b = torch.randn((n, k) if tb else (k, n)).to(dtype)
    a = a.t() if ta else a
    b = b.t() if tb else b
    for _ in range(2): torch.mm(a, b)
    ts = []
    while len(ts) < 5 or (sum(ts) < 0.3 and not cold):
        if cold: junk.add_(1)
        t0 = time.perf_counter(); torch.mm(a, b); ts.append(time.perf_counter() - t0)
    ts.sort()
    return 2.0 * m * n * k / ts[len(ts) // 2] / 1e9
shapes = []
if shape in ("small", "all"): shapes.append(("L4 C256 (small)", 256, 8192))
if shape in ("gpt2-small", "all"): shapes.append(("GPT-2 124M", 768, 50257))
print(f"{'layer':10s} {'pass':6s} {'m x n x k':21s} {'torch fp32':>10s} {'torch bf16':>10s}")
for label, c, v in shapes:
    print(f"\n{label} (C={c}, V={v}, B*T=1024)")
    for name, fin, fout in (("qkv", c, 3 * c), ("attn.proj", c, c), ("mlp.fc", c, 4 * c),
                            ("mlp.proj", 4 * c, c), ("logits", c, v)):
        for p, (m, n, k, ta, tb) in (("fwd", (1024, fout, fin, False, True)),
                                     ("dgrad", (1024, fin, fout, False, False)),
                                     ("wgrad", (fout, fin, 1024, True, False))):
            print(f"{name:10s} {p:6s} {m:5d} x {n:5d} x {k:5d} {rate(m, n, k, ta, tb, torch.float32):10.1f} "
                  f"{rate(m, n, k, ta, tb, torch.bfloat16):10.1f}")
print(f"\n2048^3: torch fp32 {rate(2048, 2048, 2048, False, False, torch.float32):.1f} GFLOP/s, "
      f"torch bf16 {rate(2048, 2048, 2048, False, False, torch.bfloat16):.1f} GFLOP/s")
PYEOF
