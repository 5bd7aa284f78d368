#!/usr/bin/env python3
"""The PyTorch side of tools/bench/hf_finetune.sh: transformers' model of a Hugging Face folder
trained the way ds-worker trains `model: {hf: DIR}` with `data: {shuffle: false}`: llm.c's batch
order over a uint16 token file, mean cross-entropy, torch.optim.AdamW (weight decay on rank >= 2
parameters), gradient clipping 1.0, in fp32 or under bf16 autocast, eager or torch.compile.
Prints one line per step and a summary the driver parses:

  pytorch: ms_per_step=... tokens_per_s=... peak_rss_mib=... losses=l0,l1,...

  python transformers_finetune.py --model DIR --data TOKENS --batch B --seq T --steps N
      [--threads 2] [--bf16] [--compile] [--lora R --lora-alpha A --lora-targets all-linear]

With --lora the model is PEFT's get_peft_model(LoraConfig(r, lora_alpha, target_modules)) and
only the adapters train (tools/bench/lora_finetune.sh).
"""
import argparse
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--lora", type=int, default=0, help="PEFT LoRA rank (0: full fine-tuning)")
    ap.add_argument("--lora-alpha", type=float, default=16)
    ap.add_argument("--lora-targets", default="all-linear")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    if a.lora:
        from peft import LoraConfig, get_peft_model
        targets = a.lora_targets if a.lora_targets == "all-linear" else a.lora_targets.split(",")
        model = get_peft_model(model, LoraConfig(r=a.lora, lora_alpha=a.lora_alpha,
                                                 target_modules=targets, lora_dropout=0.0))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    net = torch.compile(model) if a.compile else model
    tokens = np.fromfile(a.data, dtype=np.uint16)
    B, T = a.batch, a.seq
    times, losses = [], []
    for step in range(a.steps):
        start = (step * B * T) % (len(tokens) - B * T - 1)
        buf = torch.from_numpy(tokens[start:start + B * T + 1].astype(np.int64))
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = net(input_ids=x).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        losses.append(float(loss))
        print(f"step {step + 1}: loss {losses[-1]:.4f} {ms:.0f} ms", flush=True)
        if step >= a.warmup:
            times.append(ms)
    ms = sorted(times)[len(times) // 2]
    print(f"pytorch: ms_per_step={ms:.1f} tokens_per_s={B * T / (ms / 1e3):.1f} "
          f"peak_rss_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
          f"losses={','.join(f'{l:.6f}' for l in losses)}")


if __name__ == "__main__":
    main()
