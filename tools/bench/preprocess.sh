#!/usr/bin/env bash
# ds-data preprocess beside two peers on the same JSON lines (DOCS documents of 180 words:
# 20000 make 23 MB, 175000 make 200 MB) and tokenizer, 1 and 2 workers each: the `tokenizers`
# library's batch encode into megatron-core's builder, and a process pool shaped as Megatron-LM's
# preprocess_data.py (one encode per line); the outputs compared byte for byte. Needs the
# peers' venv with megatron-core.
set -uo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-/tmp/ds-preprocess-bench}
PEER=${DS_PEER_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python}
TOK=runtime/generate/testdata/tokenizer.json
[[ -x bin/ds-data ]] || tools/build.sh
mkdir -p "$WORK"
python3 -c "
import json, random
random.seed(0)
words = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'data', 'model', 'train',
         'token', 'layer', 'rank', 'zero', 'pipeline', 'tensor', 'parallel', '12345', \"isn't\",
         'émoji', '🙂']
with open('$WORK/in.jsonl', 'w') as f:
    for i in range(${DOCS:-20000}):
        f.write(json.dumps({'text': ' '.join(random.choice(words) for _ in range(180))}) + '\n')"
for t in 1 2; do
  echo "ds-data preprocess --workers $t:"
  bin/ds-data preprocess --input "$WORK/in.jsonl" --tokenizer "$TOK" --output-prefix "$WORK/ds$t" \
    --append-eod --workers $t --log-interval 1000000 2>&1 | tr '\r' '\n' | grep 'docs/s' | tail -1
  echo "tokenizers + megatron-core, RAYON_NUM_THREADS=$t:"
  RAYON_NUM_THREADS=$t "$PEER" tools/bench/preprocess_peer.py "$WORK/in.jsonl" "$TOK" "$WORK/peer$t" 2>/dev/null
  echo "preprocess_data.py-shaped pool, $t workers:"
  RAYON_NUM_THREADS=1 "$PEER" tools/bench/preprocess_pool_peer.py "$WORK/in.jsonl" "$TOK" "$WORK/pool$t" $t 2>/dev/null
done
cmp "$WORK/ds1_text_document.bin" "$WORK/peer1.bin" && cmp "$WORK/ds1_text_document.idx" "$WORK/peer1.idx" &&
  cmp "$WORK/ds2_text_document.bin" "$WORK/pool2.bin" && cmp "$WORK/ds2_text_document.idx" "$WORK/pool2.idx" &&
  echo "outputs: byte for byte the same"
