#!/usr/bin/env python3
"""Goldens for runtime/data's GPTDataset port: megatron-core's own GPTDataset (0.16.1) built
by BlendedMegatronDatasetBuilder over runtime/data/testdata/megatron/gpt_docs (400 sequences
of 3-60 tokens, each ending in EOD 0, written here by its IndexedDatasetBuilder), split
"90,8,2" (every split non-empty: megatron-core loops forever on an empty one), seed 1234, and a 0.3 / 0.7 blend of it with gpt_docs_b (300 sequences), for three cases:
seq_len 16 with 1500 train samples (several epochs, a
separate final epoch), seq_len 64 with 20 (one epoch), and the blend at seq_len 16 with 100
and the same two unweighted (weighed by their sizes, each dataset one epoch): each blend's
first 40 samples after a line "blend 16 100 LENGTH". And the job a training test runs
(blend_job_golden.txt): a 0.3 / 0.7 blend of gpt_blend_a (1200 sequences) and gpt_blend_b
(900), split "969,30,1", seq_len 16, 200 train, 20 validation and 4 test samples, seeds 1234
and 42: every train sample and the validation ones, after lines "job SEED SPLIT LENGTH".
For each case: the train split's
document, sample and shuffle indices and its first 40 samples' tokens (seq_len + 1 each), in
gpt_golden.txt: per case a line "case SEQ_LEN SAMPLES LENGTH", then lines "NAME COUNT v1 v2 ..."
for document_index, sample_index (flattened pairs), shuffle_index and each item.
Needs the peers' venv with megatron-core.

  python tools/megatron_gpt_golden.py
"""
import os
import tempfile
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder  # noqa: E402
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig  # noqa: E402
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "runtime", "data", "testdata", "megatron")


class Tokenizer:
    eod = 0
    pad = -1
    vocab_size = 500
    unique_identifiers = {"class": "Tokenizer"}


def write_docs(prefix, count, seed):
    rng = np.random.RandomState(seed)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for _ in range(count):
        n = int(rng.randint(2, 60))
        builder.add_document(torch.tensor(list(rng.randint(1, 500, n)) + [0]), [n + 1])
    builder.finalize(prefix + ".idx")


def blend_case(prefix, prefix_b, weights):
    """A blend of the two datasets (weights, or None: weighed by their one-epoch sizes),
    seq_len 16, 100 train samples: its length and first 40 samples."""
    if not torch.distributed.is_initialized():  # BlendedDataset asks for the rank
        torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:29531",
                                             rank=0, world_size=1)
    cfg = GPTDatasetConfig(random_seed=1234, sequence_length=16,
                           blend=([prefix, prefix_b], weights), split="90,8,2",
                           tokenizer=Tokenizer(), reset_position_ids=False,
                           reset_attention_mask=False, eod_mask_loss=False,
                           path_to_cache=tempfile.mkdtemp())
    train = BlendedMegatronDatasetBuilder(GPTDataset, [100, 4, 2], lambda: True, cfg).build()[0]
    return len(train), [train[k]["tokens"].tolist() + train[k]["labels"][-1:].tolist()
                        for k in range(40)]


def job_golden(prefix_a, prefix_b):
    """The blend tests/integration/megatron_data_launch_test.sh trains on, for two seeds."""
    with open(os.path.join(DATA, "blend_job_golden.txt"), "w") as f:
        f.write("# megatron-core 0.16.1 BlendedDataset (tools/megatron_gpt_golden.py)\n")
        for seed in (1234, 42):
            cfg = GPTDatasetConfig(random_seed=seed, sequence_length=16,
                                   blend=([prefix_a, prefix_b], [0.3, 0.7]), split="969,30,1",
                                   tokenizer=Tokenizer(), reset_position_ids=False,
                                   reset_attention_mask=False, eod_mask_loss=False,
                                   path_to_cache=tempfile.mkdtemp())
            splits = BlendedMegatronDatasetBuilder(GPTDataset, [200, 20, 4], lambda: True,
                                                   cfg).build()
            for name, d in (("train", splits[0]), ("validation", splits[1])):
                f.write(f"job {seed} {name} {len(d)}\n")
                for k in range(len(d)):
                    item = d[k]["tokens"].tolist() + d[k]["labels"][-1:].tolist()
                    f.write(f"item {len(item)} {' '.join(map(str, item))}\n")


def main():
    prefix, prefix_b = os.path.join(DATA, "gpt_docs"), os.path.join(DATA, "gpt_docs_b")
    write_docs(prefix, 400, 7)
    write_docs(prefix_b, 300, 8)
    blend_a, blend_b = os.path.join(DATA, "gpt_blend_a"), os.path.join(DATA, "gpt_blend_b")
    write_docs(blend_a, 1200, 9)
    write_docs(blend_b, 900, 10)
    cases = []
    for seq_len, samples in ((16, 1500), (64, 20)):
        cfg = GPTDatasetConfig(random_seed=1234, sequence_length=seq_len, blend=([prefix], None),
                               split="90,8,2", tokenizer=Tokenizer(), reset_position_ids=False,
                               reset_attention_mask=False, eod_mask_loss=False, path_to_cache=tempfile.mkdtemp())
        train = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 4, 2], lambda: True, cfg).build()[0]
        cases.append({
            "seq_len": seq_len, "samples": samples, "split": "90,8,2", "seed": 1234,
            "length": len(train),
            "document_index": train.document_index.tolist(),
            "sample_index": train.sample_index.tolist(),
            "shuffle_index": train.shuffle_index.tolist(),
            "items": [train[k]["tokens"].tolist() + train[k]["labels"][-1:].tolist() for k in range(40)],
        })
        print(f"seq_len {seq_len}: {len(train)} samples, {len(train.document_index)} document entries")
    with open(os.path.join(DATA, "gpt_golden.txt"), "w") as f:
        f.write("# megatron-core 0.16.1 GPTDataset (tools/megatron_gpt_golden.py)\n")
        for c in cases:
            f.write(f"case {c['seq_len']} {c['samples']} {c['length']}\n")
            pairs = [v for row in c["sample_index"] for v in row]
            for name, values in (("document_index", c["document_index"]), ("sample_index", pairs),
                                 ("shuffle_index", c["shuffle_index"])):
                f.write(f"{name} {len(values)} {' '.join(map(str, values))}\n")
            for item in c["items"]:
                f.write(f"item {len(item)} {' '.join(map(str, item))}\n")
        for weights in ([0.3, 0.7], None):
            length, items = blend_case(prefix, prefix_b, weights)
            f.write(f"blend 16 100 {length}\n")
            for item in items:
                f.write(f"item {len(item)} {' '.join(map(str, item))}\n")
    job_golden(blend_a, blend_b)


if __name__ == "__main__":
    main()
