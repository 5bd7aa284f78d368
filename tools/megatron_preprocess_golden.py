#!/usr/bin/env python3
"""The golden of `ds-data preprocess` (tools/ds_data/preprocess_test.cc): what Megatron-LM's
tools/preprocess_data.py writes for runtime/data/testdata/megatron/preprocess.jsonl with
--json-keys text --append-eod and a Hugging Face tokenizer (the tiny byte-level BPE of
runtime/generate/testdata/tokenizer.json): each line's "text" encoded by the `tokenizers`
library, the EOD id (<|endoftext|>, 0) appended to every non-empty document, blank lines
skipped, written by megatron-core's IndexedDatasetBuilder as uint16 (vocabulary < 65500).
Needs the peers' venv with megatron-core (pip install megatron-core).

  python tools/megatron_preprocess_golden.py
"""
import json
import os

import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
from tokenizers import Tokenizer

ROOT = os.path.join(os.path.dirname(__file__), "..")
DATA = os.path.join(ROOT, "runtime", "data", "testdata", "megatron")


def main():
    tok = Tokenizer.from_file(os.path.join(ROOT, "runtime", "generate", "testdata", "tokenizer.json"))
    eod = tok.token_to_id("<|endoftext|>")
    prefix = os.path.join(DATA, "preprocess_text_document")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    docs = 0
    with open(os.path.join(DATA, "preprocess.jsonl"), encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            ids = tok.encode(json.loads(line)["text"]).ids
            if ids:
                ids.append(eod)
            builder.add_document(torch.tensor(ids, dtype=torch.int64), [len(ids)])
            docs += 1
    builder.finalize(prefix + ".idx")
    print(f"{prefix}: {docs} documents, eod {eod}")


if __name__ == "__main__":
    main()
