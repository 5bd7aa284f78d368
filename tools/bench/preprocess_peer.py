#!/usr/bin/env python3
"""The peer of `ds-data preprocess` for tools/bench/preprocess.sh: what Megatron-LM's
preprocess_data.py does per line with a Hugging Face tokenizer (json.loads, the `tokenizers`
library's encode, EOD appended, megatron-core's IndexedDatasetBuilder), here with
encode_batch over chunks of lines on RAYON_NUM_THREADS threads, which is faster than
preprocess_data.py's one encode per line in a multiprocessing pool.

  preprocess_peer.py INPUT.jsonl TOKENIZER.json OUTPUT_PREFIX
"""
import json
import sys
import time

import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
from tokenizers import Tokenizer


def main():
    path, tok_path, prefix = sys.argv[1:4]
    start = time.perf_counter()
    tok = Tokenizer.from_file(tok_path)
    eod = tok.token_to_id("<|endoftext|>")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    docs = tokens = 0
    with open(path, encoding="utf-8") as f:
        while True:
            lines = [l for l in (f.readline() for _ in range(4096)) if l]
            if not lines:
                break
            texts = [json.loads(l)["text"] for l in lines if l.strip()]
            for enc in tok.encode_batch(texts):
                ids = enc.ids + [eod] if enc.ids else []
                builder.add_document(torch.tensor(ids, dtype=torch.int64), [len(ids)])
                docs += 1
                tokens += len(ids)
    builder.finalize(prefix + ".idx")
    s = time.perf_counter() - start
    print(f"peer: {docs} documents, {tokens} tokens in {s:.2f} s: {docs / s:.0f} docs/s, "
          f"{tokens / s:.0f} tokens/s")


if __name__ == "__main__":
    main()
