#!/usr/bin/env python3
"""The least work a ZeRO-3 rank's load of a bf16 Hugging Face folder has to do, as a floor for
tools/bench/hf_load.sh: read this rank's half of every tensor's values (the flat order of the
file, split in `world` equal parts) from the memory-mapped safetensors files and create its
states from them: an fp32 master (converted) and a bf16 parameter shard (copied), both fresh
memory as a training process has to make them. One thread, chunks of 16M values so no
whole-tensor temporaries exist. Prints one line:

  floor rank R: W.WWM values, S.SS s (read + fp32 master + bf16 shard), peak RSS X.XX GiB
"""
import json
import mmap
import os
import resource
import struct
import sys
import time

import numpy as np

CHUNK = 1 << 24


def tensors(folder):
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    for name in files:
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        for key, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            if t["dtype"] != "BF16":
                raise SystemExit(f"{path}: {key} is {t['dtype']}; this floor reads bf16 folders")
            begin, end = t["data_offsets"]
            yield path, 8 + n + begin, (end - begin) // 2


def main():
    folder, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    start = time.perf_counter()
    parts = list(tensors(folder))
    total = sum(p[2] for p in parts)
    lo, hi = rank * total // world, (rank + 1) * total // world
    master = np.empty(hi - lo, dtype=np.float32)
    shard = np.empty(hi - lo, dtype=np.uint16)
    maps, flat = {}, 0
    for path, offset, count in parts:
        a, b = max(lo, flat), min(hi, flat + count)
        if a < b:
            if path not in maps:
                with open(path, "rb") as f:
                    maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            values = np.frombuffer(maps[path], dtype=np.uint16, count=count, offset=offset)
            for c in range(a, b, CHUNK):
                e = min(b, c + CHUNK)
                raw = values[c - flat:e - flat]
                shard[c - lo:e - lo] = raw
                np.left_shift(raw, 16, out=master[c - lo:e - lo].view(np.uint32), dtype=np.uint32)
        flat += count
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)
    print(f"floor rank {rank}: {(hi - lo) / 1e6:.2f}M values, {seconds:.2f} s "
          f"(read + fp32 master + bf16 shard), peak RSS {rss:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
