#!/usr/bin/env bash
# The data loader's share of a GPT-2-small step: ds-worker trains GPT-2 124M (T 1024, micro
# 4) on a Megatron blend (two datasets of ~1.5 M random tokens in documents of 20-2000
# tokens, split 969,30,1) for STEPS steps with wall_clock_breakdown, once plain and once
# with packed documents' masks (reset_position_ids, reset_attention_mask, eod_mask_loss), and
# prints the breakdown line: "data" is the LOAD_MICROBATCH instructions (reading the samples
# and making the masks), beside the whole step. Target: data below 1% of the step.
set -uo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-/tmp/ds-data-loading-bench}
STEPS=${STEPS:-6}
[[ -x bin/ds-worker ]] || tools/build.sh
mkdir -p "$WORK"
python3 - "$WORK" <<'PY'
import os, struct, sys, random
random.seed(1)
for name in ("a", "b"):
    lengths, tokens = [], bytearray()
    total = 0
    while total < 1_500_000:
        n = random.randint(20, 2000)
        doc = [random.randrange(1, 50257) for _ in range(n - 1)] + [0]
        tokens += struct.pack(f"<{n}H", *doc)
        lengths.append(n)
        total += n
    prefix = os.path.join(sys.argv[1], name)
    open(prefix + ".bin", "wb").write(tokens)
    s = len(lengths)
    with open(prefix + ".idx", "wb") as f:  # megatron-core's MMIDIDX layout, uint16 (code 8)
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + bytes([8]) + struct.pack("<QQ", s, s + 1))
        f.write(struct.pack(f"<{s}i", *lengths))
        offsets, at = [], 0
        for n in lengths:
            offsets.append(at)
            at += 2 * n
        f.write(struct.pack(f"<{s}q", *offsets))
        f.write(struct.pack(f"<{s + 1}q", *range(s + 1)))
PY
run() {  # run NAME EXTRA_DATA_KEYS
  cat > "$WORK/$1.yaml" <<YAML
train_batch_size: 4
train_micro_batch_size_per_gpu: 4
wall_clock_breakdown: true
steps_per_print: $STEPS
optimizer: {type: AdamW, params: {lr: 0.0003}}
model: {family: gpt2, n_layer: 12, n_embd: 768, n_head: 12, vocab_size: 50257, max_seq_len: 1024}
data: {path: [0.3, $WORK/a, 0.7, $WORK/b], split: "969,30,1", seq_len: 1024$2}
training: {train_iters: $STEPS}
YAML
  echo "$1:"
  bin/ds-worker --config "$WORK/$1.yaml" 2>&1 | grep -E "time \(ms\)" |
    awk -F'|' '{ print; t = 0; for (i = 2; i <= NF; i++) { split($i, kv, ":"); v = kv[2] + 0; t += v
                   if ($i ~ /data/) d = v } printf "  data %.2f ms of %.2f ms: %.3g%% of the step\n", d, t, 100 * d / t }'
}
run plain ""
run packed ", reset_position_ids: true, reset_attention_mask: true, eod_mask_loss: true, eod_token: 0"
