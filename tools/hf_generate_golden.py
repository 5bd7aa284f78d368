#!/usr/bin/env python3
"""Golden files for runtime/generate/hf_golden_test.cc, from Hugging Face transformers.

Builds random-weight GPT-2 and Llama (grouped-query attention: 4 heads, 2 key/value heads)
models, saves each as a Hugging Face directory (<family>/config.json, model.safetensors), and
records greedy
generate() output for fixed prompts: each prompt alone, and all of them as one left-padded
batch (attention_mask, pad_token_id 0), plus the first step's logits of each prompt alone.
Weights are drawn wider than transformers' init (std 0.3) so that every greedy choice wins by
a clear margin (checked here: at least 1e-3), and no float rounding can flip it.

  ~/.cache/ds-runtime/hf-venv/bin/python tools/hf_generate_golden.py runtime/generate/testdata

(a venv with --system-site-packages over Debian's python3-torch and transformers 4.40.2 from
PyPI; the test reads the files only, transformers is not needed to run it).
"""
import json
import os
import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

VOCAB, LAYERS, WIDTH, HEADS, KV_HEADS, FFN, POSITIONS = 64, 2, 32, 4, 2, 64, 64
NEW_TOKENS = 12
PROMPTS = [[5], [17, 3, 42, 8, 29], [1, 60, 7, 33, 12, 9, 50, 2, 41, 19, 26]]


def widen(model):
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name or "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen) if p.dim() == 1 and "weight" in name
                        else 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    return model


def build(family):
    if family == "gpt2":
        cfg = GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=WIDTH, n_layer=LAYERS,
                         n_head=HEADS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         layer_norm_epsilon=1e-5)
        return widen(GPT2LMHeadModel(cfg)).eval()
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      num_key_value_heads=KV_HEADS, max_position_embeddings=POSITIONS,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    return widen(LlamaForCausalLM(cfg)).eval()


def greedy(model, prompts):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                             pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    for step in out.scores:  # every choice by a clear margin
        top = torch.topk(step, 2, dim=-1).values
        assert (top[:, 0] - top[:, 1]).min() > 1e-3, "a near tie: change the seed"
    return out.sequences[:, width:].tolist(), out.scores[0]


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    golden = {"transformers": transformers.__version__, "torch": torch.__version__,
              "new_tokens": NEW_TOKENS, "prompts": PROMPTS}
    for family in ("gpt2", "llama"):
        model = build(family)
        # A Hugging Face model directory (config.json, model.safetensors), as ds-generate --hf
        # and the importer read it.
        model.save_pretrained(os.path.join(out_dir, family), safe_serialization=True)
        weights = f"{family}/model.safetensors"
        alone, first = [], []
        for p in PROMPTS:
            tokens, scores = greedy(model, [p])
            alone.append(tokens[0])
            first.append([round(float(x), 7) for x in scores[0]])
        batched, _ = greedy(model, PROMPTS)
        golden[family] = {
            "weights": weights, "n_layer": LAYERS, "n_embd": WIDTH, "n_head": HEADS,
            "n_kv_head": KV_HEADS if family == "llama" else HEADS, "ffn_hidden": FFN if family == "llama" else 4 * WIDTH,
            "vocab_size": VOCAB, "max_seq_len": POSITIONS,
            "alone": alone, "batched": batched, "first_logits": first}
    with open(os.path.join(out_dir, "hf_golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {out_dir}/hf_golden.json, gpt2/ and llama/")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runtime/generate/testdata")
