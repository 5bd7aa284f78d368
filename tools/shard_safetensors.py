"""Splits a Hugging Face folder's model.safetensors into shards with an index, as transformers'
save_pretrained(max_shard_size=...) lays them out: model-00001-of-0000N.safetensors ... and
model.safetensors.index.json ({"metadata": {"total_size": bytes}, "weight_map": {tensor: shard}}),
tensors in file order, a new shard when the next tensor would pass the size. The other files of
the folder (config.json, ...) are copied. Stdlib only.

  shard_safetensors.py IN_DIR OUT_DIR MAX_SHARD_BYTES
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import read, write  # noqa: E402


def main():
    src, dst, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name != "model.safetensors" and os.path.isfile(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), dst)
    shards, size = [[]], 0
    for t in read(os.path.join(src, "model.safetensors")):
        if shards[-1] and size + len(t[3]) > limit:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += len(t[3])
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write(os.path.join(dst, name), tensors, {"format": "pt"})
        for t in tensors:
            weight_map[t[0]] = name
            total += len(t[3])
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    print(f"{len(weight_map)} tensors in {len(shards)} shards")


if __name__ == "__main__":
    main()
