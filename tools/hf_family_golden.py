#!/usr/bin/env python3
"""Golden data for Hugging Face decoder families, made with transformers.

For each case (llama with linear / dynamic / llama3 / yarn RoPE, bf16 Llama, mistral, qwen2, qwen3,
phi3, opt pre- and post-LN, gpt_neox parallel and sequential, gemma, gemma2) this builds a tiny
random-weight model, saves it as a Hugging Face model directory <out>/<case>/ (config.json,
generation_config.json, model.safetensors, or model-0000k-of-0000n.safetensors plus
model.safetensors.index.json for the sharded cases), and writes <out>/<case>/golden.json:

  case, model_type, seed, dtype (of the saved weights), sharded, files (the weight files),
  transformers, torch,
  prompt          11 token ids,
  logits          fp32 logits of one forward over the prompt, one row of vocab_size per position,
  max_new_tokens  12,
  greedy          the new tokens of generate(prompt, do_sample=False, use_cache=True),
  greedy_no_cache the same with use_cache=False (differs from greedy only for dynamic RoPE),
  min_margin      the smallest top-1 minus top-2 logit gap over the greedy steps.

Weights are drawn wider than transformers' init (matrices and embeddings std 0.3, biases 0.1;
norm weights 1 + 0.1 N(0,1), or 0.1 N(0,1) for Gemma's (1 + w) norms, whose stored weight is an
offset) so that each greedy choice wins by a clear margin; a case whose seed gives a step with a
margin below 1e-3 (with or without the cache), or fewer than 3 distinct greedy tokens, moves on to
the next seed, and golden.json records the seed used. eos_token_id is None so generate never
stops early. The golden values are computed from the model as reloaded
from the saved directory in fp32 (so the bf16 case uses the bf16-rounded weights).

  OMP_NUM_THREADS=1 ~/.cache/ds-runtime/peer-venv/bin/python tools/hf_family_golden.py \\
      runtime/generate/testdata/families [case ...]

(the peers' venv, DS_PEERS=1 tools/setup.sh: torch, transformers, safetensors and numpy
from PyPI; golden.json records the versions). Tests read only the files: transformers is not
needed to run them.
"""
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import (AutoModelForCausalLM, Gemma2Config, GemmaConfig, GPTNeoXConfig, LlamaConfig,
                          MistralConfig, OPTConfig, Phi3Config, Qwen2Config, Qwen3Config)

PROMPT = [1, 60, 7, 33, 12, 9, 50, 2, 41, 19, 26]
NEW_TOKENS = 12
MIN_MARGIN = 1e-3
SEED_TRIES = 200
MIN_DISTINCT = 3  # greedy tokens: a run stuck on one token would test little of the cache

# Common tiny sizes.
V, H, L, NH, NKV, FFN, POS, EPS = 64, 32, 2, 4, 2, 64, 64, 1e-5


def llama_like(cls, **kw):
    args = dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=NH,
                num_key_value_heads=NKV, intermediate_size=FFN, max_position_embeddings=POS,
                rms_norm_eps=EPS, attention_dropout=0.0, tie_word_embeddings=False,
                bos_token_id=1, eos_token_id=None, pad_token_id=None)
    args.update(kw)
    return cls(**args)


def rope(rope_type="default", theta=10000.0, **kw):
    return dict(rope_type=rope_type, rope_theta=theta, **kw)


# name: (config factory, what it exercises, sharded, save dtype, gemma-style (1 + w) norms)
CASES = {
    "llama-linear": (lambda: llama_like(LlamaConfig, rope_parameters=rope("linear", factor=2.0)),
                     "linear RoPE scaling, factor 2", True, torch.float32, False),
    "llama-dynamic": (lambda: llama_like(LlamaConfig, max_position_embeddings=8,
                                         rope_parameters=rope("dynamic", factor=2.0)),
                      "dynamic NTK RoPE, factor 2, prompt and generation past max_position_embeddings 8",
                      False, torch.float32, False),
    "llama3-tied": (lambda: llama_like(LlamaConfig, hidden_size=64, intermediate_size=128,
                                       max_position_embeddings=256, tie_word_embeddings=True,
                                       rope_parameters=rope("llama3", 500000.0, factor=8.0, low_freq_factor=1.0,
                                                            high_freq_factor=4.0,
                                                            original_max_position_embeddings=64)),
                    "llama3 RoPE (theta 5e5, factor 8, low 1, high 4, original 64), tied lm_head",
                    True, torch.float32, False),
    "llama-yarn": (lambda: llama_like(LlamaConfig, hidden_size=64, intermediate_size=128,
                                      max_position_embeddings=128,
                                      rope_parameters=rope("yarn", factor=4.0, original_max_position_embeddings=32)),
                   "yarn RoPE, factor 4, original 32 (attention factor 1 + 0.1 ln 4)", False, torch.float32, False),
    "llama-bf16": (lambda: llama_like(LlamaConfig, rope_parameters=rope()),
                   "bf16 safetensors; golden computed in fp32 from the bf16 weights", True, torch.bfloat16, False),
    "mistral": (lambda: llama_like(MistralConfig, head_dim=8, sliding_window=4, rope_parameters=rope()),
                "sliding window 4 on every layer (prompt of 11 exceeds it)", False, torch.float32, False),
    "qwen2": (lambda: llama_like(Qwen2Config, tie_word_embeddings=True, use_sliding_window=False,
                                 bos_token_id=None, rope_parameters=rope(theta=1e6)),
              "q/k/v biases, tied lm_head, theta 1e6", False, torch.float32, False),
    "qwen3": (lambda: llama_like(Qwen3Config, head_dim=16, rope_parameters=rope()),
              "per-head q_norm/k_norm before RoPE, head_dim 16 (heads x head_dim 64 != hidden 32)",
              True, torch.float32, False),
    "phi3": (lambda: llama_like(Phi3Config, original_max_position_embeddings=POS, sliding_window=None,
                                resid_pdrop=0.0, embd_pdrop=0.0,
                                rope_parameters=rope(partial_rotary_factor=1.0)),
             "fused qkv_proj and gate_up_proj", False, torch.float32, False),
    "opt": (lambda: OPTConfig(vocab_size=V, hidden_size=H, ffn_dim=FFN, num_hidden_layers=L, num_attention_heads=NH,
                              max_position_embeddings=POS, word_embed_proj_dim=16, do_layer_norm_before=True,
                              dropout=0.0, attention_dropout=0.0, layerdrop=0.0, tie_word_embeddings=True,
                              bos_token_id=2, eos_token_id=None, pad_token_id=None),
            "pre-LN OPT, learned positions (+2 offset), project_in/project_out (word_embed_proj_dim 16), tied",
            True, torch.float32, False),
    "opt-post": (lambda: OPTConfig(vocab_size=V, hidden_size=H, ffn_dim=FFN, num_hidden_layers=L,
                                   num_attention_heads=NH, max_position_embeddings=POS, word_embed_proj_dim=H,
                                   do_layer_norm_before=False, dropout=0.0, attention_dropout=0.0, layerdrop=0.0,
                                   tie_word_embeddings=True, bos_token_id=2, eos_token_id=None, pad_token_id=None),
                 "post-LN OPT (opt-350m form), no final decoder norm, tied", False, torch.float32, False),
    "gpt_neox": (lambda: GPTNeoXConfig(vocab_size=V, hidden_size=64, num_hidden_layers=L, num_attention_heads=NH,
                                       intermediate_size=128, max_position_embeddings=POS, layer_norm_eps=EPS,
                                       hidden_act="gelu", use_parallel_residual=True, attention_bias=True,
                                       attention_dropout=0.0, hidden_dropout=0.0, tie_word_embeddings=False,
                                       rope_parameters=rope(partial_rotary_factor=0.25),
                                       bos_token_id=0, eos_token_id=None, pad_token_id=None),
                 "parallel residual, per-head fused query_key_value, partial RoPE 0.25, biases",
                 False, torch.float32, False),
    "gpt_neox-seq": (lambda: GPTNeoXConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=NH,
                                           intermediate_size=128, max_position_embeddings=POS, layer_norm_eps=EPS,
                                           hidden_act="gelu", use_parallel_residual=False, attention_bias=True,
                                           attention_dropout=0.0, hidden_dropout=0.0, tie_word_embeddings=False,
                                           rope_parameters=rope(partial_rotary_factor=0.25),
                                           bos_token_id=0, eos_token_id=None, pad_token_id=None),
                     "sequential residual, partial RoPE 0.25 (2 of 8 head dims)", False, torch.float32, False),
    "gemma": (lambda: llama_like(GemmaConfig, num_key_value_heads=1, head_dim=16, hidden_act="gelu_pytorch_tanh",
                                 tie_word_embeddings=True, bos_token_id=2, rope_parameters=rope()),
              "(1 + w) RMSNorm, embeddings x sqrt(hidden), MQA, head_dim 16 != 32/4, gelu-tanh, tied",
              False, torch.float32, True),
    "gemma2": (lambda: llama_like(Gemma2Config, num_hidden_layers=3, head_dim=16,
                                  hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24,
                                  attn_logit_softcapping=5.0, final_logit_softcapping=3.0, sliding_window=4,
                                  tie_word_embeddings=True, bos_token_id=2, rope_parameters=rope()),
               "4 norms per layer, query_pre_attn_scalar 24, softcaps 5 / 3, alternating sliding window 4",
               True, torch.float32, True),
}


def widen(model, seed, offset_norms):
    """Redraws every parameter, wider than the library init, from a generator seeded per case."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied weights appear once
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "bias":
                value = 0.1 * noise
            elif "norm" in name and p.dim() == 1:
                value = 0.1 * noise if offset_norms else 1.0 + 0.1 * noise
            else:  # matrices, token and position embeddings
                value = 0.3 * noise
            p.copy_(value)
    return model


def shard_files(path):
    return sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))


def save(model, path, sharded, dtype):
    if os.path.isdir(path):
        shutil.rmtree(path)
    if dtype != torch.float32:
        model = model.to(dtype)
    total = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    # About three shards when sharded; one file otherwise.
    limit = total // 3 + 1 if sharded else 10 * total + 10**6
    model.save_pretrained(path, max_shard_size=limit)
    files = shard_files(path)
    index = os.path.join(path, "model.safetensors.index.json")
    if sharded:
        assert len(files) >= 2 and os.path.exists(index), (path, files)
    else:
        assert files == ["model.safetensors"] and not os.path.exists(index), (path, files)
    return files


def stored_tensor_names(path):
    from safetensors import safe_open
    names = []
    for f in shard_files(path):
        with safe_open(os.path.join(path, f), "pt") as g:
            names += list(g.keys())
    return sorted(names)


def load(path):
    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), (path, info)
    return model.eval()


def run_case(path):
    """The golden values, from fresh loads of the saved directory (no state left over between runs)."""
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = load(path)(ids).logits[0].float()
        outs = {}
        for use_cache in (True, False):
            out = load(path).generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=NEW_TOKENS, use_cache=use_cache,
                                      eos_token_id=None, pad_token_id=0, output_logits=True,
                                      return_dict_in_generate=True)
            tokens = out.sequences[0, len(PROMPT):].tolist()
            assert len(tokens) == NEW_TOKENS, tokens
            top = torch.stack([torch.topk(s[0].float(), 2).values for s in out.logits])
            outs[use_cache] = tokens, float((top[:, 0] - top[:, 1]).min())
    return logits, outs


def fmt_row(row):
    return "[" + ", ".join(repr(float(x)) for x in row) + "]"


def write_golden(path, golden, logits):
    lines = ["{"]
    for k, v in golden.items():
        lines.append(f" {json.dumps(k)}: {json.dumps(v)},")
    lines.append(' "logits": [')
    lines.append(",\n".join("  " + fmt_row(r) for r in logits.tolist()))
    lines.append(" ]")
    lines.append("}")
    with open(os.path.join(path, "golden.json"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(path, "golden.json")) as f:  # well-formed, and fp32 survives the round trip
        back = json.load(f)
    assert torch.equal(torch.tensor(back["logits"], dtype=torch.float32), logits)


def make(out_dir, index, name):
    factory, _, sharded, dtype, offset_norms = CASES[name]
    path = os.path.join(out_dir, name)
    for seed in range(1000 * (index + 1), 1000 * (index + 1) + SEED_TRIES):
        torch.manual_seed(seed)
        cfg = factory()
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
        model = widen(model, seed, offset_norms).eval()
        files = save(model, path, sharded, dtype)
        logits, outs = run_case(path)
        greedy, margin = outs[True]
        if min(margin, outs[False][1]) < MIN_MARGIN or len(set(greedy)) < MIN_DISTINCT:
            continue
        if cfg.tie_word_embeddings:
            assert not any("lm_head" in n or "embed_out" in n for n in stored_tensor_names(path)), name
        golden = {"case": name, "model_type": cfg.model_type, "seed": seed,
                  "dtype": str(dtype).replace("torch.", ""), "sharded": sharded, "files": files,
                  "transformers": transformers.__version__, "torch": torch.__version__,
                  "prompt": PROMPT, "max_new_tokens": NEW_TOKENS, "greedy": greedy,
                  "greedy_no_cache": outs[False][0], "min_margin": margin}
        write_golden(path, golden, logits)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        print(f"{name}: seed {seed}, {len(files)} weight file(s), {size} bytes, min margin {margin:.4f}, "
              f"greedy {greedy}{'' if greedy == outs[False][0] else ' (no cache: %s)' % outs[False][0]}")
        return
    raise SystemExit(f"{name}: no seed in {SEED_TRIES} tries gives margins >= {MIN_MARGIN} and {MIN_DISTINCT} distinct tokens")


def main(out_dir, only=None):
    os.makedirs(out_dir, exist_ok=True)
    for i, name in enumerate(CASES):
        if only is None or name in only:
            make(out_dir, i, name)


if __name__ == "__main__":
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    main(sys.argv[1] if len(sys.argv) > 1 else "runtime/generate/testdata/families", sys.argv[2:] or None)
