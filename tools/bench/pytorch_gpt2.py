#!/usr/bin/env python3
"""The PyTorch side of tools/bench/train_vs_pytorch.sh: the same GPT-2 as ds-runtime's
generator (learned positions, LayerNorm, tanh GELU, biases, tied embeddings), loaded from
the safetensors file that `ds-worker --export-init` wrote, trained with torch.optim.AdamW
on the same token file read in llm.c's order (shuffle: false). Prints one line per step
and a summary line the driver parses:

  pytorch: ms_per_step=... peak_rss_mib=... threads=... losses=l0,l1,...
"""
import argparse
import contextlib
import json
import math
import os
import resource
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{path}: {name} is {info['dtype']}"
        b, e = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype=np.float32).copy()).view(info["shape"])
    return out


def read_tokens(path):
    raw = open(path, "rb").read()
    if raw[:8] == b"DSTOKENS":
        version, dtype, count = struct.unpack("<IIQ", raw[8:24])
        assert dtype == 2, "benchmark token files are uint16"
        return np.frombuffer(raw[32:32 + 2 * count], dtype=np.uint16)
    return np.frombuffer(raw, dtype=np.uint16)


class Gpt2(torch.nn.Module):
    def __init__(self, w, n_layer, n_head):
        super().__init__()
        self.w = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(v) for k, v in w.items()})
        self.n_layer, self.n_head = n_layer, n_head

    def p(self, name):
        return self.w[name.replace(".", "__")]

    def forward(self, idx, targets):
        B, T = idx.shape
        C = self.p("wte").shape[1]
        H = self.n_head
        x = F.embedding(idx, self.p("wte")) + self.p("wpe")[:T]
        for i in range(self.n_layer):
            h = f"h.{i}."
            y = F.layer_norm(x, (C,), self.p(h + "ln_1.weight"), self.p(h + "ln_1.bias"), 1e-5)
            qkv = F.linear(y, self.p(h + "attn.qkv.weight"), self.p(h + "attn.qkv.bias"))
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, H, C // H).transpose(1, 2)
            k = k.view(B, T, H, C // H).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + F.linear(y, self.p(h + "attn.proj.weight"), self.p(h + "attn.proj.bias"))
            y = F.layer_norm(x, (C,), self.p(h + "ln_2.weight"), self.p(h + "ln_2.bias"), 1e-5)
            y = F.gelu(F.linear(y, self.p(h + "mlp.fc.weight"), self.p(h + "mlp.fc.bias")), approximate="tanh")
            x = x + F.linear(y, self.p(h + "mlp.proj.weight"), self.p(h + "mlp.proj.bias"))
        x = F.layer_norm(x, (C,), self.p("ln_f.weight"), self.p("ln_f.bias"), 1e-5)
        logits = F.linear(x, self.p("wte"))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--n_layer", type=int, required=True)
    ap.add_argument("--n_head", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel over gloo (torchrun)")
    ap.add_argument("--bf16", action="store_true", help="forward under torch.autocast('cpu', bfloat16)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rank, world = 0, 1
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    model = Gpt2(load_safetensors(a.weights), a.n_layer, a.n_head)
    net = model
    if a.ddp:
        net = torch.nn.parallel.DistributedDataParallel(model)
    if a.compile:  # the first steps compile; the warm-up steps are not timed
        net = torch.compile(net)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.bf16 else contextlib.nullcontext
    decay = [p for n, p in model.w.items() if p.dim() >= 2]
    no_decay = [p for n, p in model.w.items() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    tokens = read_tokens(a.data)
    B, T = a.batch, a.seq
    pos, times, losses = 0, [], []
    for step in range(a.steps):
        # llm.c's order: rank r reads B*T+1 tokens at pos + r*B*T; pos advances world*B*T.
        if pos + world * B * T + 1 > len(tokens):
            pos = 0
        start = pos + rank * B * T
        buf = torch.from_numpy(tokens[start:start + B * T + 1].astype(np.int64))
        pos += world * B * T
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = net(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        lv = loss.detach().clone()
        if a.ddp:  # the global mean loss, as ds-runtime reports it
            dist.all_reduce(lv)
            lv /= world
        losses.append(lv.item())
        if step >= a.warmup:
            times.append(dt)
        if rank == 0:
            print(f"pytorch step {step + 1}/{a.steps} loss {losses[-1]:.4f} {dt:.1f} ms", flush=True)
    if rank != 0:
        return
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ms = sorted(times)[len(times) // 2] if times else float("nan")
    print(f"pytorch: ms_per_step={ms:.1f} peak_rss_mib={rss:.1f} threads={torch.get_num_threads()} "
          f"torch={torch.__version__} bf16={int(a.bf16)} compile={int(a.compile)} losses={','.join(f'{l:.6f}' for l in losses)}")


if __name__ == "__main__":
    main()
