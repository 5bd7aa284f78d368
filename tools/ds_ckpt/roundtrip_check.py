"""Writes Hugging Face GPT-2 and Llama (grouped-query) safetensors files of distinct random
values, and checks ds-ckpt's import and export of them value by value (stdlib only).

  roundtrip_check.py write DIR        writes DIR/gpt2.safetensors and DIR/llama.safetensors
  roundtrip_check.py ours FAMILY DIR  checks DIR/FAMILY_ours.safetensors (ds-ckpt import) against
                                      the layout rules: GPT-2's Conv1D weights transposed,
                                      Llama's q, k, v stacked into one qkv
  roundtrip_check.py back FAMILY DIR DTYPE
                                      checks DIR/FAMILY_back_DTYPE.safetensors (ds-ckpt export of
                                      the import) against the original, every value: equal in
                                      f32, the nearest bf16 (ties to even) in bf16
Exit 1 with the first differing tensor and element named.
"""
import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import safetensors_io  # noqa: E402  (tools/)

C, V, T, F = 4, 7, 5, 12  # width, vocabulary, positions, MLP width
Q, K = 4, 2  # Llama: 2 query heads and 1 key/value head of 2


def gpt2_shapes():
    p = "transformer.h.0."
    return {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [T, C],
            p + "ln_1.weight": [C], p + "ln_1.bias": [C],
            p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
            p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
            p + "ln_2.weight": [C], p + "ln_2.bias": [C],
            p + "mlp.c_fc.weight": [C, F], p + "mlp.c_fc.bias": [F],
            p + "mlp.c_proj.weight": [F, C], p + "mlp.c_proj.bias": [C],
            "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}


def llama_shapes():
    p = "model.layers.0."
    return {"model.embed_tokens.weight": [V, C], p + "input_layernorm.weight": [C],
            p + "self_attn.q_proj.weight": [Q, C], p + "self_attn.k_proj.weight": [K, C],
            p + "self_attn.v_proj.weight": [K, C], p + "self_attn.o_proj.weight": [C, Q],
            p + "post_attention_layernorm.weight": [C], p + "mlp.gate_proj.weight": [F, C],
            p + "mlp.up_proj.weight": [F, C], p + "mlp.down_proj.weight": [C, F],
            "model.norm.weight": [C], "lm_head.weight": [V, C]}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def write(path, tensors):  # tensors: name -> (shape, list of floats), written as F32
    safetensors_io.write(path, [(name, "F32", shape, struct.pack("<%df" % len(values), *values))
                                for name, (shape, values) in tensors.items()])


def read(path):  # name -> (dtype, shape, list of floats)
    out = {}
    for name, dtype, shape, raw in safetensors_io.read(path):
        if dtype not in ("F32", "BF16"):
            sys.exit(f"{path}: {name} has dtype {dtype}")
        out[name] = (dtype, shape, safetensors_io.floats(dtype, raw))
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16(x):  # round to nearest even, as our export and torch do
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def originals(family, directory):
    return {k: v[2] for k, v in read(f"{directory}/{family}.safetensors").items()}


def transpose(values, rows, cols):  # [rows, cols] -> [cols, rows]
    return [values[r * cols + c] for c in range(cols) for r in range(rows)]


def expected_ours(family, hf):
    if family == "gpt2":
        ours = {}
        for name, values in hf.items():
            short = name.replace("transformer.", "")
            for a, b in (("attn.c_attn", "attn.qkv"), ("attn.c_proj", "attn.proj"),
                         ("mlp.c_fc", "mlp.fc"), ("mlp.c_proj", "mlp.proj")):
                short = short.replace(a, b)
            if short in ("wte.weight", "wpe.weight"):
                short = short[:3]
            shape = gpt2_shapes()[name]
            conv1d = name.endswith(".weight") and ("c_attn" in name or "c_proj" in name or "c_fc" in name)
            ours[short] = transpose(values, *shape) if conv1d else values
        return ours
    p, o = "model.layers.0.", "layers.0."
    ours = {"embed_tokens": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"],
            "lm_head.weight": hf["lm_head.weight"],
            o + "attn.qkv.weight": hf[p + "self_attn.q_proj.weight"] + hf[p + "self_attn.k_proj.weight"]
            + hf[p + "self_attn.v_proj.weight"],
            o + "attn.o_proj.weight": hf[p + "self_attn.o_proj.weight"]}
    for part in ("input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
                 "mlp.up_proj.weight", "mlp.down_proj.weight"):
        ours[o + part] = hf[p + part]
    return ours


def compare(label, got, want, rounding):
    if sorted(got) != sorted(want):
        sys.exit(f"{label}: tensors {sorted(got)}, expected {sorted(want)}")
    for name in want:
        g = got[name]
        if len(g) != len(want[name]):
            sys.exit(f"{label}: {name} has {len(g)} values, expected {len(want[name])}")
        for i, (a, b) in enumerate(zip(g, want[name])):
            if a != rounding(b):
                sys.exit(f"{label}: {name}[{i}] is {a}, expected {rounding(b)}")
    print(f"{label}: {len(want)} tensors, {sum(len(v) for v in want.values())} values equal")


def main():
    cmd = sys.argv[1]
    if cmd == "write":
        rng = random.Random(5)
        for family, shapes in (("gpt2", gpt2_shapes()), ("llama", llama_shapes())):
            values = rng.sample(range(1, 1_000_000), sum(numel(s) for s in shapes.values()))
            tensors, at = {}, 0
            for name, shape in shapes.items():  # distinct values, each exact in f32
                n = numel(shape)
                tensors[name] = (shape, [f32((v - 500_000) / 123_457.0) for v in values[at:at + n]])
                at += n
            write(f"{sys.argv[2]}/{family}.safetensors", tensors)
    elif cmd == "ours":
        family, directory = sys.argv[2], sys.argv[3]
        got = {k: v[2] for k, v in read(f"{directory}/{family}_ours.safetensors").items()}
        compare(f"{family} import", got, expected_ours(family, originals(family, directory)), f32)
    elif cmd == "back":
        family, directory, dtype = sys.argv[2], sys.argv[3], sys.argv[4]
        got = {k: v[2] for k, v in read(f"{directory}/{family}_back_{dtype}.safetensors").items()}
        compare(f"{family} export {dtype}", got, originals(family, directory),
                f32 if dtype == "f32" else bf16)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
