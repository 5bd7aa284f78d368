#!/usr/bin/env python3
"""The PyTorch side of tools/bench/tp_vs_pytorch.sh: the same GPT-2 as ds-runtime's generator
(learned positions, LayerNorm, tanh GELU, biases, tied embeddings) loaded from the safetensors
file `ds-worker --export-init` wrote, trained tensor-parallel over gloo (torchrun, one process
per tp rank, every rank reading the same batch), AdamW with clipping at 1.0.

  --mode dtensor   torch.distributed.tensor.parallel: ColwiseParallel for q, k, v and the MLP's
                   fc, RowwiseParallel for both projections, a vocab-parallel embedding
                   (RowwiseParallel, replicated input) and head (ColwiseParallel, Shard(-1)
                   logits) with loss_parallel(), scaled_dot_product_attention (causal)
  --mode megatron  the same split written by hand: Megatron's f / g autograd functions over
                   torch.distributed.all_reduce, the vocab-parallel cross-entropy with its three
                   all-reduces; also times the all-reduces (comm_ms in the summary)

Prints one line per step and a summary line the driver parses:
  pytorch-tp: mode=... ms_per_step=... comm_ms=... threads=... torch=... losses=l0,l1,...
"""
import argparse
import contextlib
import math
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pytorch_gpt2 import load_safetensors, read_tokens  # the same file formats, one reader

COMM_MS = [0.0]


def timed_all_reduce(t, op=dist.ReduceOp.SUM):
    t0 = time.perf_counter()
    dist.all_reduce(t, op=op)
    COMM_MS[0] += (time.perf_counter() - t0) * 1e3
    return t


class CopyToTp(torch.autograd.Function):  # Megatron's f: identity forward, all-reduce backward
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return timed_all_reduce(g.contiguous())


class ReduceFromTp(torch.autograd.Function):  # Megatron's g: all-reduce forward, identity backward
    @staticmethod
    def forward(ctx, x):
        return timed_all_reduce(x.contiguous())

    @staticmethod
    def backward(ctx, g):
        return g


class VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, start):
        m = logits.max(dim=-1).values
        timed_all_reduce(m, dist.ReduceOp.MAX)
        e = torch.exp(logits - m.unsqueeze(-1))
        local = target - start
        inside = (local >= 0) & (local < logits.shape[-1])
        picked = torch.where(inside, logits.gather(-1, local.clamp(0, logits.shape[-1] - 1).unsqueeze(-1)).squeeze(-1),
                             torch.zeros_like(m))
        stats = torch.stack([e.sum(-1), picked], dim=-1)
        timed_all_reduce(stats)
        lse = m + stats[..., 0].log()
        ctx.save_for_backward(e, stats, local, inside)
        return (lse - stats[..., 1]).mean()

    @staticmethod
    def backward(ctx, g):
        e, stats, local, inside = ctx.saved_tensors
        grad = e / stats[..., 0:1]
        onehot = torch.zeros_like(grad)
        onehot.scatter_(-1, local.clamp(0, grad.shape[-1] - 1).unsqueeze(-1), inside.unsqueeze(-1).to(grad.dtype))
        n = local.numel()
        return (grad - onehot) * (g / n), None, None


class Block(torch.nn.Module):
    def __init__(self, C, H, tp):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.q, self.k, self.v = (torch.nn.Linear(C, C) for _ in range(3))
        self.proj = torch.nn.Linear(C, C)
        self.fc = torch.nn.Linear(C, 4 * C)
        self.mlp_proj = torch.nn.Linear(4 * C, C)
        self.heads = H // tp  # the rank's heads (the linears' outputs are local shards)
        self.megatron = False

    def forward(self, x):
        B, T, _ = x.shape
        y = self.ln_1(x)
        if self.megatron:
            y = CopyToTp.apply(y)
        q, k, v = (m(y).view(B, T, self.heads, -1).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1)
        x = x + self._row(self.proj, y)
        y = self.ln_2(x)
        if self.megatron:
            y = CopyToTp.apply(y)
        return x + self._row(self.mlp_proj, F.gelu(self.fc(y), approximate="tanh"))

    def _row(self, lin, y):
        if not self.megatron:
            return lin(y)
        return ReduceFromTp.apply(F.linear(y, lin.weight)) + lin.bias


class Gpt2(torch.nn.Module):
    def __init__(self, w, L, H, tp):
        super().__init__()
        V, C = w["wte"].shape
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Parameter(w["wpe"].clone())
        self.h = torch.nn.ModuleList(Block(C, H, tp) for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)
        self.head = torch.nn.Linear(C, V, bias=False)
        with torch.no_grad():
            self.wte.weight.copy_(w["wte"])
            for i, b in enumerate(self.h):
                p = f"h.{i}."
                for n in ("ln_1", "ln_2"):
                    getattr(b, n).weight.copy_(w[p + n + ".weight"])
                    getattr(b, n).bias.copy_(w[p + n + ".bias"])
                for j, m in enumerate((b.q, b.k, b.v)):
                    m.weight.copy_(w[p + "attn.qkv.weight"][j * C:(j + 1) * C])
                    m.bias.copy_(w[p + "attn.qkv.bias"][j * C:(j + 1) * C])
                for m, n in ((b.proj, "attn.proj"), (b.fc, "mlp.fc"), (b.mlp_proj, "mlp.proj")):
                    m.weight.copy_(w[p + n + ".weight"])
                    m.bias.copy_(w[p + n + ".bias"])
            self.ln_f.weight.copy_(w["ln_f.weight"])
            self.ln_f.bias.copy_(w["ln_f.bias"])
        self.head.weight = self.wte.weight  # tied
        self.megatron, self.start = False, 0

    def forward(self, idx, targets):
        T = idx.shape[1]
        if self.megatron:
            local = idx - self.start
            inside = (local >= 0) & (local < self.wte.weight.shape[0])
            x = F.embedding(local.clamp(0, self.wte.weight.shape[0] - 1), self.wte.weight) * inside.unsqueeze(-1)
            x = ReduceFromTp.apply(x)
        else:
            x = self.wte(idx)
        x = x + self.wpe[:T]
        for b in self.h:
            x = b(x)
        x = self.ln_f(x)
        if self.megatron:
            logits = F.linear(CopyToTp.apply(x), self.wte.weight)
            return VocabParallelCE.apply(logits, targets, self.start)
        # Vocab-parallel: called inside loss_parallel() (main), backward included.
        return F.cross_entropy(self.head(x).flatten(0, 1), targets.flatten())


def shard_megatron(model, rank, tp):
    """Keeps this rank's slices of every split parameter (Megatron's layout)."""
    def rows(t):
        n = t.shape[0] // tp
        p = torch.nn.Parameter(t.detach()[rank * n:(rank + 1) * n].clone())
        p.tp_split = True
        return p

    def cols(t):
        n = t.shape[1] // tp
        p = torch.nn.Parameter(t.detach()[:, rank * n:(rank + 1) * n].clone())
        p.tp_split = True
        return p

    V = model.wte.weight.shape[0]
    model.start = rank * V // tp
    model.wte.weight = rows(model.wte.weight)
    model.head.weight = model.wte.weight
    for b in model.h:
        b.megatron = True
        for m in (b.q, b.k, b.v, b.fc):
            m.weight, m.bias = rows(m.weight), rows(m.bias)
        for m in (b.proj, b.mlp_proj):
            m.weight = cols(m.weight)
    model.megatron = True


def shard_dtensor(model, tp):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    mesh = init_device_mesh("cpu", (tp,))
    plan = {"wte": RowwiseParallel(input_layouts=Replicate()),
            "head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
    for i in range(len(model.h)):
        for n in ("q", "k", "v", "fc"):
            plan[f"h.{i}.{n}"] = ColwiseParallel()
        for n in ("proj", "mlp_proj"):
            plan[f"h.{i}.{n}"] = RowwiseParallel()
    parallelize_module(model, mesh, plan)


def clip_grad_norm(params, max_norm):
    """Megatron's clipping: the squares of split parameters summed over the tp ranks, the
    replicated ones counted once (their gradients are equal on every rank)."""
    split = torch.zeros(())
    whole = torch.zeros(())
    for p in params:
        if p.grad is None:
            continue
        g = p.grad
        if hasattr(g, "to_local"):  # DTensor
            sharded = any(pl.is_shard() for pl in g.placements)
            g = g.to_local()
        else:
            sharded = getattr(p, "tp_split", False)
        sq = g.detach().double().pow(2).sum()
        if sharded:
            split += sq
        else:
            whole += sq
    timed_all_reduce(split)
    norm = float((split + whole).sqrt())
    coef = max_norm / (norm + 1e-6)
    if coef < 1:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef)
    return norm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["dtensor", "megatron"], default="dtensor")
    ap.add_argument("--weights", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--n_layer", type=int, required=True)
    ap.add_argument("--n_head", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, tp = dist.get_rank(), dist.get_world_size()
    model = Gpt2(load_safetensors(a.weights), a.n_layer, a.n_head, tp)
    if a.mode == "megatron":
        shard_megatron(model, rank, tp)
    else:
        shard_dtensor(model, tp)
        model.head.weight = model.wte.weight  # parallelize_module made two DTensors: tie again
    params = list(dict.fromkeys(model.parameters()))  # the tied weight once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    parallel_loss = contextlib.nullcontext
    if a.mode == "dtensor":
        from torch.distributed.tensor.parallel import loss_parallel as parallel_loss
    tokens = read_tokens(a.data)
    B, T = a.batch, a.seq
    pos, times, comms, losses = 0, [], [], []
    for step in range(a.steps):
        if pos + B * T + 1 > len(tokens):  # llm.c's order; every tp rank reads the same batch
            pos = 0
        buf = torch.from_numpy(tokens[pos:pos + B * T + 1].astype(np.int64))
        pos += B * T
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        COMM_MS[0] = 0.0
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with parallel_loss():
            loss = model(x, y)
            loss.backward()
        clip_grad_norm(params, 1.0)
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        losses.append(float(loss.full_tensor() if hasattr(loss, "full_tensor") else loss))
        if step >= a.warmup:
            times.append(dt)
            comms.append(COMM_MS[0])
        if rank == 0:
            print(f"pytorch-tp step {step + 1}/{a.steps} loss {losses[-1]:.4f} {dt:.1f} ms", flush=True)
    if rank == 0:
        ms = sorted(times)[len(times) // 2] if times else float("nan")
        comm = sorted(comms)[len(comms) // 2] if comms and a.mode == "megatron" else float("nan")
        print(f"pytorch-tp: mode={a.mode} ms_per_step={ms:.1f} comm_ms={comm:.1f} threads={torch.get_num_threads()} "
              f"torch={torch.__version__} losses={','.join(f'{l:.6f}' for l in losses)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
