#!/usr/bin/env python3
"""Goldens for runtime/data's Megatron indexed datasets, written by megatron-core's own
IndexedDatasetBuilder (needs megatron-core and PyTorch: the peers' venv plus
`pip install megatron-core`). Writes, under runtime/data/testdata/megatron/:

  doc3_uint16.{bin,idx}    the reference's worked example: [5,6,7,0], [8,9,0], [10..14,0]
  mixed_int32.{bin,idx}    ids above 65535 (int32, as preprocess_data.py picks for a large
                           vocabulary), an empty document, a one-token one
  manifest.json            each dataset's documents and megatron-core's version

  python tools/megatron_indexed_golden.py
"""
import json
import os

import numpy as np
import torch
from megatron.core import __version__ as mcore_version
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

OUT = os.path.join(os.path.dirname(__file__), "..", "runtime", "data", "testdata", "megatron")

DATASETS = {
    "doc3_uint16": (np.uint16, [[5, 6, 7, 0], [8, 9, 0], [10, 11, 12, 13, 14, 0]]),
    "mixed_int32": (np.int32, [[70000, 1, 65535, 65536, 128255], [], [3], [128000, 9, 9, 9, 2]]),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = {"megatron_core": mcore_version, "datasets": {}}
    for name, (dtype, docs) in DATASETS.items():
        prefix = os.path.join(OUT, name)
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for d in docs:
            builder.add_document(torch.tensor(d, dtype=torch.int64), [len(d)])
        builder.finalize(prefix + ".idx")
        ds = IndexedDataset(prefix)
        assert [list(map(int, ds[i])) for i in range(len(ds))] == docs
        manifest["datasets"][name] = {"dtype": np.dtype(dtype).name, "documents": docs}
        print(f"{prefix}: {len(docs)} documents, .idx {os.path.getsize(prefix + '.idx')} bytes")
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
