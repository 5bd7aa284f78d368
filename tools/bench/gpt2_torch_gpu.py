#!/usr/bin/env python3
"""The PyTorch peer of tools/gpu-check.sh's GPT-2 row: the same GPT-2 124M shape (L=12,
C=768, 12 heads, V=50257, T=1024, learned positions, LayerNorm, tanh GELU, biases, tied
embeddings) trained on one GPU the way a PyTorch user does, eager or with --compile (torch.compile of
the model, default mode): fp32 parameters, bf16 autocast, F.scaled_dot_product_attention (causal), fused AdamW, gradient
clipping at 1.0, random tokens. Prints per-step lines and one summary line gpu-check parses:

  RESULT torch_gpt2 micro=B compile=0|1 tokens_per_s=... ms=... mfu=... torch=...

tokens/s and ms are medians over the steps after --warmup. MFU counts 6 N + 6 L T C FLOPs
per token (N parameters, attention's score and value products forward and backward, causal
halving included) against --peak TFLOP/s.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, n_layer, n_embd, n_head, vocab, max_seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(max_seq, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--peak", type=float, default=989.0, help="bf16 TFLOP/s of the card")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device for torch")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    L, C, H, V, T, B = 12, 768, 12, 50257, a.seq, a.micro
    model = Gpt2(L, C, H, V, T).to(dev)
    n = sum(p.numel() for p in model.parameters())
    step_model = torch.compile(model) if a.compile else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, fused=True)
    times = []
    for step in range(a.steps):
        x = torch.randint(0, V, (B, T), device=dev)
        y = torch.randint(0, V, (B, T), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
        print(f"torch step {step + 1}/{a.steps} loss {loss.item():.4f} {dt * 1e3:.1f} ms", flush=True)
    s = sorted(times)[len(times) // 2]
    tokens_per_s = B * T / s
    flops_per_token = 6 * n + 6 * L * T * C
    mfu = tokens_per_s * flops_per_token / (a.peak * 1e12)
    print(f"RESULT torch_gpt2 micro={B} compile={int(a.compile)} tokens_per_s={tokens_per_s:.0f} ms={s * 1e3:.1f} mfu={100 * mfu:.1f} "
          f"params={n} torch={torch.__version__}")


if __name__ == "__main__":
    main()
