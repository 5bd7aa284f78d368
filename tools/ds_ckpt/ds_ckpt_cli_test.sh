#!/bin/bash
# Runs the ds-ckpt binary end to end on a hand-made HF GPT-2 file (no blocks: wte, wpe,
# ln_f): import, export (f32 and bf16), inspect, and the failure exits.
set -euo pipefail
BIN="$1"
OUT="${TEST_TMPDIR:-/tmp}/ds_ckpt_cli"
rm -rf "$OUT" && mkdir -p "$OUT"

fail() { echo "FAIL: $*" >&2; exit 1; }

# Header: wte [3,2], wpe [2,2], ln_f.weight [2], ln_f.bias [2], all F32 (64 data bytes).
header='{"transformer.wte.weight":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},'
header+='"transformer.wpe.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[24,40]},'
header+='"transformer.ln_f.weight":{"dtype":"F32","shape":[2],"data_offsets":[40,48]},'
header+='"transformer.ln_f.bias":{"dtype":"F32","shape":[2],"data_offsets":[48,56]}}'
while (( ${#header} % 8 )); do header+=' '; done
len=${#header}
printf "$(printf '\\x%02x' $((len & 255)) $((len >> 8)))\\x00\\x00\\x00\\x00\\x00\\x00" \
  > "$OUT/hf.safetensors"
printf '%s' "$header" >> "$OUT/hf.safetensors"
# 14 floats of 1.0f (0x3f800000, little-endian).
for _ in $(seq 14); do printf '\x00\x00\x80\x3f' >> "$OUT/hf.safetensors"; done

"$BIN" import --family gpt2 --input "$OUT/hf.safetensors" --output "$OUT/ours.safetensors"
"$BIN" inspect "$OUT/ours.safetensors" | grep -q "wte  f32 \[3, 2\]" || fail "inspect ours"
"$BIN" export --family gpt2 --input "$OUT/ours.safetensors" --output "$OUT/hf2.safetensors"
"$BIN" inspect "$OUT/hf2.safetensors" | grep -q "metadata: format = pt" || fail "format pt"
"$BIN" export --family gpt2 --input "$OUT/ours.safetensors" --output "$OUT/hf16.safetensors" \
  --dtype bf16
"$BIN" inspect "$OUT/hf16.safetensors" | grep -q "transformer.wte.weight  bf16" || fail "bf16"

if "$BIN" import --family llama --input "$OUT/hf.safetensors" --output "$OUT/x" 2>"$OUT/err"; then
  fail "gpt2 file imported as llama"
fi
grep -q "missing tensor model.embed_tokens.weight" "$OUT/err" || fail "llama error text"
if "$BIN" verify "$OUT" 2>/dev/null; then fail "verify of a non-checkpoint succeeded"; fi
if "$BIN" consolidate "$OUT" "$OUT/c" 2>"$OUT/err"; then
  fail "consolidate of a non-checkpoint succeeded"
fi
grep -q "$OUT" "$OUT/err" || fail "consolidate error does not name the input"
[[ ! -e "$OUT/c" ]] || fail "consolidate left a file behind"
if "$BIN" consolidate "$OUT" 2>/dev/null; then fail "consolidate without an output"; fi
if "$BIN" import --family bert --input a --output b 2>/dev/null; then fail "bad family"; fi
if "$BIN" 2>/dev/null; then fail "no subcommand accepted"; fi
echo "ds-ckpt CLI: ok"
