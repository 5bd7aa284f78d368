#!/usr/bin/env bash
# ds-data preprocess beside the `tokenizers` library + megatron-core's builder on the same
# JSON lines (20000 documents of 180 words, 23 MB) and tokenizer, 1 and 2 threads each, and
# the two outputs compared byte for byte. Needs the peers' venv with megatron-core.
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
    for i in range(20000):
        f.write(json.dumps({'text': ' '.join(random.choice(words) for _ in range(180))}) + '\n')"
for t in 1 2; do
  echo "ds-data preprocess --workers $t:"
  bin/ds-data preprocess --input "$WORK/in.jsonl" --tokenizer "$TOK" --output-prefix "$WORK/ds$t" \
    --append-eod --workers $t --log-interval 1000000 2>&1 | tr '\r' '\n' | grep 'docs/s' | tail -1
  echo "tokenizers + megatron-core, RAYON_NUM_THREADS=$t:"
  RAYON_NUM_THREADS=$t "$PEER" tools/bench/preprocess_peer.py "$WORK/in.jsonl" "$TOK" "$WORK/peer$t" 2>/dev/null
done
cmp "$WORK/ds1_text_document.bin" "$WORK/peer1.bin" && cmp "$WORK/ds1_text_document.idx" "$WORK/peer1.idx" &&
  echo "outputs: byte for byte the same"
