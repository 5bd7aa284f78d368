#!/usr/bin/env python3
"""Writes a random-weight Hugging Face folder of a released model's shape, as the Hub stores it,
for the loading and fine-tuning benchmarks (tools/bench/hf_load.sh, hf_finetune.sh):
config.json with the released model's keys and model.safetensors (or shards of
--max_shard_size with model.safetensors.index.json), weights N(0, 0.02) (norms 1) in bf16 or
f32, streamed tensor by tensor (memory holds one tensor).

  python3 tools/bench/make_hf_model.py --shape llama-3.2-1b --out DIR [--dtype bf16]
      [--max_shard_size 5GB]

Shapes: llama-3.2-1b (meta-llama/Llama-3.2-1B's config: 16 layers, 2048 wide, 32 heads, 8 kv
heads, 8192 MLP, 128256 vocabulary, tied, llama3 RoPE; the Hub holds it as one 2.47 GB file) and
qwen2.5-0.5b (Qwen/Qwen2.5-0.5B's: 24 layers, 896 wide, 14 heads, 2 kv heads, 4864 MLP, 151936
vocabulary, tied, q/k/v biases). Needs numpy (the tools venv has it).
"""
import argparse
import json
import os
import struct

import numpy as np

SHAPES = {
    "llama-3.2-1b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False,
        "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"},
    "qwen2.5-0.5b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
        "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": True,
        "rope_theta": 1000000.0, "use_sliding_window": False, "sliding_window": 32768,
        "max_window_layers": 21, "bos_token_id": 151643, "eos_token_id": 151643,
        "torch_dtype": "bfloat16"},
}


def tensors(c):
    h, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    nh, kv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim", h // nh)
    bias = c["model_type"] == "qwen2"
    yield "model.embed_tokens.weight", [v, h]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", [h]
        yield p + "post_attention_layernorm.weight", [h]
        for name, rows in (("q", nh * d), ("k", kv * d), ("v", kv * d)):
            yield p + f"self_attn.{name}_proj.weight", [rows, h]
            if bias:
                yield p + f"self_attn.{name}_proj.bias", [rows]
        yield p + "self_attn.o_proj.weight", [h, nh * d]
        yield p + "mlp.gate_proj.weight", [f, h]
        yield p + "mlp.up_proj.weight", [f, h]
        yield p + "mlp.down_proj.weight", [h, f]
    yield "model.norm.weight", [h]


def values(name, shape, rng, dtype):
    n = int(np.prod(shape))
    x = np.ones(n, np.float32) if "norm" in name else rng.normal(0, 0.02, n).astype(np.float32)
    if dtype == "F32":
        return x.tobytes()
    bits = x.view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()


def write_shard(path, entries, rng, dtype):
    header, at = {"__metadata__": {"format": "pt"}}, 0
    size = 2 if dtype == "BF16" else 4
    for name, shape in entries:
        n = int(np.prod(shape)) * size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape in entries:
            f.write(values(name, shape, rng, dtype))
    os.replace(path + ".tmp", path)
    return at


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--max_shard_size", type=float, default=5e9, help="bytes")
    a = ap.parse_args()
    c = dict(SHAPES[a.shape])
    dtype = "BF16" if a.dtype == "bf16" else "F32"
    c["torch_dtype"] = "bfloat16" if a.dtype == "bf16" else "float32"
    os.makedirs(a.out, exist_ok=True)
    size = 2 if dtype == "BF16" else 4
    shards, cur, used = [], [], 0
    for name, shape in tensors(c):
        n = int(np.prod(shape)) * size
        if cur and used + n > a.max_shard_size:
            shards.append(cur)
            cur, used = [], 0
        cur.append((name, shape))
        used += n
    shards.append(cur)
    rng = np.random.default_rng(0)
    if len(shards) == 1:
        total = write_shard(os.path.join(a.out, "model.safetensors"), shards[0], rng, dtype)
    else:
        weight_map, total = {}, 0
        for i, entries in enumerate(shards):
            file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            total += write_shard(os.path.join(a.out, file), entries, rng, dtype)
            weight_map.update({name: file for name, _ in entries})
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    print(f"{a.out}: {a.shape}, {total / 1e9:.2f} GB of {a.dtype} in {len(shards)} file(s)")


if __name__ == "__main__":
    main()
