#!/usr/bin/env bash
# ds-ckpt export for jobs trained from a Hugging Face folder (model: {hf: DIR}), every family of
# runtime/generate/testdata/families (saved by transformers 5.25):
#  - the weights a job starts from (ds-worker --export-init), exported, are the folder
#    transformers saved, tensor for tensor and byte for byte (names, shapes, dtypes, values;
#    bf16 for the bf16 folder), with its config.json and generation_config.json copied as they
#    are, in shards of --max_shard_size with their index;
#  - a model trained 3 steps and checkpointed, exported, generates through ds-generate --hf
#    exactly what the checkpoint generates through ds-generate --config;
#  - with transformers at hand (DS_PEER_PYTHON: a Python with torch and transformers, as
#    tools/hf_family_golden.py uses), the trained export loads in transformers and its logits
#    equal ds-generate's; without one that case is reported skipped.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
WORKER=$R/runtime/worker/ds-worker
CKPT=$R/tools/ds_ckpt/ds-ckpt
GEN=$R/tools/ds_generate/ds-generate
FAM=$R/runtime/generate/testdata/families
IO_DIR=$R/tools
T=${TEST_TMPDIR:-$(mktemp -d)}/hf_export
rm -rf "$T"; mkdir -p "$T"
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

job() {  # job FILE DIR STEPS CKPT_DIR
  cat > "$1" <<YAML
train_micro_batch_size_per_gpu: 2
optimizer: {type: AdamW, params: {lr: 1.0e-3, weight_decay: 0.1}}
model: {hf: $2}
data: {train: $FAM/train_tokens.bin, format: uint16, seq_len: 16, shuffle: false}
training: {train_iters: $3}
checkpoint: {dir: $4}
device: {threads: 2}
YAML
}

# same_folder A B: every tensor of folder A is in B with the same dtype, shape and bytes, and
# B has no other.
same_folder() {
  PYTHONPATH=$IO_DIR python3 - "$1" "$2" <<'PY'
import glob, os, sys
import safetensors_io as io
def load(d):
    out = {}
    for f in glob.glob(os.path.join(d, "*.safetensors")):
        for name, dtype, shape, raw in io.read(f):
            out[name] = (dtype, shape, raw)
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = sorted(set(a) ^ set(b)) + [n for n in a if n in b and a[n] != b[n]]
print(f"{len(a)} tensors" if not bad else "differ: " + ", ".join(bad[:4]))
sys.exit(1 if bad else 0)
PY
}

for dir in "$FAM"/*/; do
  name=$(basename "$dir")
  dtype=f32; grep -q '"dtype": "bfloat16"' "$dir/config.json" && dtype=bf16
  job "$T/$name.yaml" "$dir" 1 "$T/ck_$name"
  out=$T/out_$name
  if ! "$WORKER" --config "$T/$name.yaml" --export-init "$T/$name.init.safetensors" >/dev/null 2>&1 ||
      ! "$CKPT" export --config "$T/$name.yaml" --input "$T/$name.init.safetensors" \
        --output "$out" --dtype "$dtype" --max_shard_size 20KB >/dev/null 2>&1; then
    fail "$name: export-init or export failed"; continue
  fi
  if why=$(same_folder "$dir" "$out") && cmp -s "$dir/config.json" "$out/config.json" &&
      cmp -s "$dir/generation_config.json" "$out/generation_config.json" &&
      [[ -f $out/model.safetensors.index.json ]]; then
    pass "$name: the export of its start is the folder transformers saved ($why, $dtype, sharded)"
  else
    fail "$name: $why"
  fi
done

# Trained 3 steps, checkpointed, exported: the same greedy tokens through the export.
for name in llama3-tied qwen2 opt gpt_neox gemma2 phi3; do
  job "$T/tr_$name.yaml" "$FAM/$name" 3 "$T/tr_ck_$name"
  if ! "$WORKER" --config "$T/tr_$name.yaml" >/dev/null 2>&1 ||
      ! "$CKPT" export --config "$T/tr_$name.yaml" --input "$T/tr_ck_$name" \
        --output "$T/tr_out_$name" >/dev/null 2>&1; then
    fail "$name: training or export failed"; continue
  fi
  a=$("$GEN" --config "$T/tr_$name.yaml" --prompt_ids 5,17,3,42 --max_new_tokens 12 --jsonl 2>/dev/null | head -1)
  b=$("$GEN" --hf "$T/tr_out_$name" --prompt_ids 5,17,3,42 --max_new_tokens 12 --jsonl 2>/dev/null | head -1)
  if [[ -n $a && $a == "$b" ]] && ! same_folder "$FAM/$name" "$T/tr_out_$name" >/dev/null; then
    pass "$name: trained (its weights moved), exported, generates what its checkpoint generates"
  else
    fail "$name: checkpoint '$a' vs export '$b'"
  fi
done

if [[ -n ${DS_PEER_PYTHON:-} ]] && "$DS_PEER_PYTHON" -c "import transformers" 2>/dev/null; then
  for name in llama3-tied qwen2 opt gpt_neox gemma2 phi3; do
    want=$("$GEN" --hf "$T/tr_out_$name" --prompt_ids 5,17,3,42 --max_new_tokens 12 --jsonl 2>/dev/null |
      head -1 | python3 -c "import json, sys; print(json.load(sys.stdin)['ids'])")
    got=$("$DS_PEER_PYTHON" - "$T/tr_out_$name" 2>/dev/null <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, attn_implementation="eager")
out = m.generate(torch.tensor([[5, 17, 3, 42]]), max_new_tokens=12, do_sample=False, pad_token_id=0)
print(out[0, 4:].tolist())
PY
)
    if [[ -n $got && $got == "$want" ]]; then pass "$name: transformers loads the trained export and generates $got"
    else fail "$name: transformers '$got' vs ds-generate '$want'"; fi
  done
else
  echo "SKIPPED CASE: transformers loading the trained export (no DS_PEER_PYTHON with transformers)"
fi

echo "hf_export_test: $fails failure(s)"
[[ $fails -eq 0 ]]
