"""Reads and writes safetensors files with the standard library only, for the tools and tests
that check our files from outside (roundtrip_check.py, gpt2_reference.py, shard_safetensors.py).

  read(path)  -> [(name, dtype, shape, raw bytes)] in data order ("__metadata__" left out)
  write(path, [(name, dtype, shape, raw bytes)], metadata=None)
  floats(dtype, raw) -> list of Python floats (F32, BF16)
"""
import json
import struct


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    body = raw[8 + n:]
    order = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    return [(k, header[k]["dtype"], header[k]["shape"],
             body[header[k]["data_offsets"][0]:header[k]["data_offsets"][1]]) for k in order]


def write(path, tensors, metadata=None):
    header, body = ({"__metadata__": metadata} if metadata else {}), b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


def floats(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    if dtype == "BF16":
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                for h in struct.unpack("<%dH" % (len(raw) // 2), raw)]
    raise ValueError(f"dtype {dtype} is not F32 or BF16")
