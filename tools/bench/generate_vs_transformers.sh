#!/usr/bin/env bash
# Generation on this machine's CPU, GPT-2 124M fp32 (random weights, the same Hugging Face
# directory for both), greedy with the KV cache, one prompt of PROMPT tokens, NEW new tokens:
#   ds-runtime   runtime/generate:generate_bench (Generator: prefill, decode steps)
#   transformers generate() (the peers' venv: PyTorch 2.15 and transformers 5 from PyPI,
#                DS_PEERS=1 tools/setup.sh, or $HF_VENV; HF=0 skips it)
# at batch 1 and 8, the same threads (THREADS, default all cores), best of ROUNDS. Prints prefill
# and decode tokens/s, ds-runtime / transformers, and decode beside the memory-bandwidth bound:
# the machine's read bandwidth (the faster of a vectorized OpenMP sum and a BLAS GEMV streaming
# 1 GiB of huge pages, as the weights are) / bytes a decode step reads (every parameter in fp32
# and the KV cache so far). Targets (issue 17): >= 2x transformers at batch 1,
# >= 60% of the bound.
#   tools/bench/generate_vs_transformers.sh       (PROMPT=128 NEW=128 ROUNDS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
PROMPT=${PROMPT:-128}; NEW=${NEW:-128}; ROUNDS=${ROUNDS:-3}; THREADS=${THREADS:-$(nproc)}
if [[ -z "${OPENBLAS_CORETYPE:-}" ]] && grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi
VENV=${HF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv}  # PyTorch 2.15, transformers 5
if ! "$VENV/bin/python" -c "import transformers" 2>/dev/null; then
  echo "generate_vs_transformers: no transformers in $VENV: run DS_PEERS=1 tools/setup.sh" >&2
  exit 1
fi
echo "== PyTorch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'), transformers $("$VENV/bin/python" -c 'import transformers; print(transformers.__version__)')"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
bazel build -c opt --jobs=2 //runtime/generate:generate_bench >/dev/null 2>&1
"$VENV/bin/python" tools/bench/transformers_generate.py save "$W/gpt2"
echo "== GPT-2 124M fp32, prompt $PROMPT, $NEW new tokens, greedy, $THREADS threads, best of $ROUNDS;" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}, $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
OMP_NUM_THREADS=$THREADS bazel-bin/runtime/generate/generate_bench --hf "$W/gpt2" \
  --prompt_len "$PROMPT" --new_tokens "$NEW" --batches 1,8 --rounds "$ROUNDS" | tee "$W/ours.txt"
if [[ "${HF:-1}" != 0 ]]; then
  "$VENV/bin/python" tools/bench/transformers_generate.py time "$W/gpt2" --prompt_len "$PROMPT" \
    --new_tokens "$NEW" --batches 1,8 --rounds "$ROUNDS" --threads "$THREADS" | tee "$W/hf.txt"
else
  echo "transformers: skipped (HF=0)" > "$W/hf.txt"
fi
/usr/bin/python3 - "$W/ours.txt" "$W/hf.txt" <<'PYEOF'
import re, sys
def rows(path):
    out = {}
    for line in open(path):
        m = re.match(r"batch (\d+) prefill ([\d.]+) tok/s decode ([\d.]+) tok/s(?: bound ([\d.]+))?", line)
        if m: out[int(m[1])] = tuple(float(x) if x else None for x in m.groups()[1:])
    return out
ours, hf = rows(sys.argv[1]), rows(sys.argv[2])
for b, (pre, dec, bound) in sorted(ours.items()):
    line = f"batch {b}: ds-runtime decode {dec:.2f} tok/s = {100 * dec / bound:.1f}% of the bound {bound:.2f}"
    if b in hf:
        line += f"; transformers decode {hf[b][1]:.2f} tok/s, ratio {dec / hf[b][1]:.2f}x;"
        line += f" prefill {pre:.1f} vs {hf[b][0]:.1f} tok/s ({pre / hf[b][0]:.2f}x)"
    print(line)
PYEOF
