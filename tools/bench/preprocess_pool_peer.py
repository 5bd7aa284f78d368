#!/usr/bin/env python3
"""The other peer of `ds-data preprocess` for tools/bench/preprocess.sh, shaped as Megatron-LM's
tools/preprocess_data.py runs (that script is not on PyPI, megatron-core's wheel lacks it): a
multiprocessing pool of WORKERS processes, each loading the tokenizer once in its initializer,
maps lines in chunks of 32 to (json.loads, one encode per document, EOD appended); the parent
appends each document to megatron-core's IndexedDatasetBuilder in line order.

  preprocess_pool_peer.py INPUT.jsonl TOKENIZER.json OUTPUT_PREFIX WORKERS
"""
import json
import multiprocessing
import sys
import time

import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
from tokenizers import Tokenizer

_tok = None
_eod = None


def _load(path):
    global _tok, _eod
    _tok = Tokenizer.from_file(path)
    _eod = _tok.token_to_id("<|endoftext|>")


def _encode(line):
    text = json.loads(line)["text"]
    ids = _tok.encode(text).ids
    return ids + [_eod] if ids else [], len(line)


def main():
    path, tok_path, prefix, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    start = time.perf_counter()
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    docs = tokens = 0
    with open(path, encoding="utf-8") as f, \
            multiprocessing.Pool(workers, initializer=_load, initargs=(tok_path,)) as pool:
        for ids, _ in pool.imap(_encode, (l for l in f if l.strip()), 32):
            builder.add_document(torch.tensor(ids, dtype=torch.int64), [len(ids)])
            docs += 1
            tokens += len(ids)
    builder.finalize(prefix + ".idx")
    s = time.perf_counter() - start
    print(f"pool peer: {docs} documents, {tokens} tokens in {s:.2f} s: {docs / s:.0f} docs/s, "
          f"{tokens / s:.0f} tokens/s")


if __name__ == "__main__":
    main()
