#!/bin/bash
# Runs the ds-ckpt binary end to end on Hugging Face GPT-2 and Llama files of distinct random
# values: import, export (f32 and bf16) checked value by value, inspect, and the failure exits.
set -euo pipefail
BIN="$1"
OUT="${TEST_TMPDIR:-/tmp}/ds_ckpt_cli"
rm -rf "$OUT" && mkdir -p "$OUT"

fail() { echo "FAIL: $*" >&2; exit 1; }

# GPT-2 (one block) and Llama (one block, 2 query heads sharing 1 key/value head) in Hugging
# Face's layout, every value distinct (roundtrip_check.py), imported and exported back: our
# layout must hold each value where the rules put it (Conv1D transposed, q, k, v stacked), and
# the export must give back every value (f32: equal; bf16: the nearest bf16), so a transpose or
# a swapped q / k fails.
CHECK="python3 $(dirname "$0")/roundtrip_check.py"
$CHECK write "$OUT" || fail "writing the HF files"
for family in gpt2 llama; do
  "$BIN" import --family $family --input "$OUT/$family.safetensors" \
    --output "$OUT/${family}_ours.safetensors" || fail "$family import"
  $CHECK ours $family "$OUT" || fail "$family import values"
  for dtype in f32 bf16; do
    "$BIN" export --family $family --input "$OUT/${family}_ours.safetensors" \
      --output "$OUT/${family}_back_$dtype.safetensors" --dtype $dtype || fail "$family export $dtype"
    $CHECK back $family "$OUT" $dtype || fail "$family export $dtype values"
  done
done
# Export as the Hub shards a folder (--max_shard_size, transformers' layout), imported back from
# the folder: every value where the rules put it again.
for family in gpt2 llama; do
  mkdir -p "$OUT/sharded_$family"
  cp "$OUT/$family.safetensors" "$OUT/sharded_$family/"
  "$BIN" export --family $family --input "$OUT/${family}_ours.safetensors" \
    --output "$OUT/hub_$family" --max_shard_size 300B || fail "$family sharded export"
  [[ -f $OUT/hub_$family/model.safetensors.index.json &&
     -f $OUT/hub_$family/model-00002-of-0000$(ls "$OUT/hub_$family" | grep -c '^model-').safetensors ]] ||
    fail "$family: no shards and index in $(ls "$OUT/hub_$family")"
  "$BIN" import --family $family --input "$OUT/hub_$family" \
    --output "$OUT/sharded_$family/${family}_ours.safetensors" || fail "$family import of the shards"
  $CHECK ours $family "$OUT/sharded_$family" || fail "$family sharded round trip values"
done
if "$BIN" export --family gpt2 --input "$OUT/gpt2_ours.safetensors" --output "$OUT/x" \
     --max_shard_size 5XB 2>"$OUT/err"; then fail "a bad --max_shard_size accepted"; fi
grep -q 'max_shard_size "5XB"' "$OUT/err" || fail "bad --max_shard_size: $(cat "$OUT/err")"
cp "$OUT/gpt2.safetensors" "$OUT/hf.safetensors"
"$BIN" inspect "$OUT/gpt2_ours.safetensors" | grep -q "wte  f32 \[7, 4\]" || fail "inspect ours"
"$BIN" inspect "$OUT/gpt2_back_f32.safetensors" | grep -q "metadata: format = pt" || fail "format pt"
"$BIN" inspect "$OUT/gpt2_back_bf16.safetensors" | grep -q "transformer.wte.weight  bf16" || fail "bf16"

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
