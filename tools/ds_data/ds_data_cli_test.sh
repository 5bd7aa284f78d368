#!/bin/bash
# Runs the ds-data binary end to end: help text, addition, tokenize, info, bad flags.
set -euo pipefail
BIN="$1"
OUT="${TEST_TMPDIR:-/tmp}/ds_data_cli"
rm -rf "$OUT" && mkdir -p "$OUT"

fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" addition --help | grep -q "end of example" || fail "addition --help lacks the vocabulary"

"$BIN" addition --digits 2 --train_examples 500 --val_examples 50 --seed 3 --output_dir "$OUT/add"
for f in train.tok val.tok val_problems.txt task.json; do
  [[ -s "$OUT/add/$f" ]] || fail "missing $f"
done
[[ $(wc -l < "$OUT/add/val_problems.txt") -eq 50 ]] || fail "val_problems.txt lines"
# 500 examples x 10 tokens x 2 bytes + 32-byte header
[[ $(stat -c %s "$OUT/add/train.tok") -eq 10032 ]] || fail "train.tok size"
"$BIN" info --input "$OUT/add/train.tok" | grep -q "5000 tokens, vocab 14" || fail "info"

printf 'hello world\n%.0s' {1..50} > "$OUT/text.txt"
"$BIN" tokenize --input "$OUT/text.txt" --output "$OUT/t.tok" --val_fraction 0.1 \
  --val_output "$OUT/v.tok"
"$BIN" info --input "$OUT/v.tok" | grep -q "60 tokens, vocab 256" || fail "tokenize split"

if "$BIN" addition --digits 2 2>/dev/null; then fail "missing --output_dir accepted"; fi
if "$BIN" tokenize --input "$OUT/nope" --output "$OUT/x.tok" 2>/dev/null; then
  fail "missing input accepted"
fi
# samples: the first blended sample of megatron-core's 0.3 / 0.7 blend (testdata golden).
M=runtime/data/testdata/megatron
first=$("$BIN" samples --data-path 0.3 $M/gpt_docs 0.7 $M/gpt_docs_b --split 90,8,2 \
  --seq-length 16 --train-samples 100 --count 1 | tr -d '[],')
want=$(sed -n '/^blend/{n;p;q}' $M/gpt_golden.txt | cut -d' ' -f3-)
[[ -n "$want" && "$first" == "$want" ]] || fail "samples: got '$first', megatron-core '$want'"
if "$BIN" samples --data-path $M/gpt_docs --split 100,0,0 --split-index 2 --seq-length 16 \
     --train-samples 10 2>/dev/null; then fail "an empty split accepted"; fi
# samples --config: what a job's data.path trains on (and evaluates on: split 1) equals
# megatron-core's BlendedDataset for the same job, seeds 1234 and 42 (blend_job_golden.txt);
# the job's global batch 4 is 2 micro x 2 ranks (--dp 2), 50 steps: 200 samples.
for seed in 1234 42; do
  cat > "$OUT/job.yaml" <<YAML
train_batch_size: 4
train_micro_batch_size_per_gpu: 2
optimizer: {type: AdamW, params: {lr: 0.001}}
model: {family: gpt2, n_layer: 1, n_embd: 16, n_head: 2, vocab_size: 512, max_seq_len: 16}
data: {path: [0.3, $M/gpt_blend_a, 0.7, $M/gpt_blend_b], split: "969,30,1", seed: $seed}
training: {train_iters: 50}
monitor: {eval_iters: 5}
YAML
  for split in train:0:200 validation:1:20; do
    IFS=: read -r name index count <<< "$split"
    "$BIN" samples --config "$OUT/job.yaml" --dp 2 --split-index "$index" --count "$count" |
      tr -d '[],' > "$OUT/got"
    awk -v s="$seed" -v n="$name" '$1 == "job" { on = ($2 == s && $3 == n) }
      on && $1 == "item" { $1 = ""; $2 = ""; sub(/^  /, ""); print }' \
      $M/blend_job_golden.txt > "$OUT/want"
    [[ $(wc -l < "$OUT/want") == "$count" ]] && cmp -s "$OUT/got" "$OUT/want" ||
      fail "samples --config, seed $seed, $name: differs from megatron-core"
  done
done
if "$BIN" samples --config "$OUT/job.yaml" --dp 2 --count 201 2>/dev/null; then
  fail "sample 200 of a 200-sample job printed"
fi
if "$BIN" 2>/dev/null; then fail "no subcommand accepted"; fi
echo "ds-data CLI: ok"
