#!/usr/bin/env python3
"""DeepSpeed's PipelineEngine on the GPT-2 of pytorch_gpt2.py (same safetensors initial weights,
same token order), the peer of ds-runtime's pipeline schedules: a PipelineModule of embedding,
blocks, final norm and the tied head (TiedLayerSpec over the embedding), partitioned by
DeepSpeed's partition_method, trained with its 1F1B TrainSchedule over gloo on CPU ranks, fp32,
ZeRO stage 0 (its pipeline refuses 2 and 3), torch's AdamW. Run one process per stage with
`python -m torch.distributed.run --redirects 1 --tee 2` (torch 1.13's launcher on Python 3.11
needs both flags) from a Python that has DeepSpeed (tools/bench/setup_deepspeed.sh) and
DS_ACCELERATOR=cpu. The last stage prints, on stderr:

  deepspeed-pipe: ms_per_step=... stages=... micro_batches=... losses=l0,l1,...
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt2 import load_safetensors, read_tokens  # noqa: E402

W = {}  # the initial weights, by our names


def param(name):
    return torch.nn.Parameter(W[name].clone())


class Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = param("wte"), param("wpe")

    def forward(self, idx):
        return F.embedding(idx, self.wte) + self.wpe[: idx.shape[1]]


def head(module, x):  # the tied embedding as the LM head
    return F.linear(x, module.wte)


class Block(torch.nn.Module):
    def __init__(self, i, n_head):
        super().__init__()
        h = f"h.{i}."
        self.n_head = n_head
        self.p = torch.nn.ParameterDict(
            {k.replace(".", "__"): param(h + k) for k in (
                "ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                "attn.proj.bias", "ln_2.weight", "ln_2.bias", "mlp.fc.weight", "mlp.fc.bias",
                "mlp.proj.weight", "mlp.proj.bias")})

    def forward(self, x):
        g = lambda k: self.p[k.replace(".", "__")]  # noqa: E731
        B, T, C = x.shape
        H = self.n_head
        y = F.layer_norm(x, (C,), g("ln_1.weight"), g("ln_1.bias"), 1e-5)
        q, k, v = F.linear(y, g("attn.qkv.weight"), g("attn.qkv.bias")).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, g("attn.proj.weight"), g("attn.proj.bias"))
        y = F.layer_norm(x, (C,), g("ln_2.weight"), g("ln_2.bias"), 1e-5)
        y = F.gelu(F.linear(y, g("mlp.fc.weight"), g("mlp.fc.bias")), approximate="tanh")
        return x + F.linear(y, g("mlp.proj.weight"), g("mlp.proj.bias"))


class FinalNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight, self.bias = param("ln_f.weight"), param("ln_f.bias")

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, 1e-5)


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--n_layer", type=int, required=True)
    ap.add_argument("--n_head", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--micro_batches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--partition", default="uniform")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    import deepspeed
    from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec
    deepspeed.init_distributed(dist_backend="gloo")
    world = torch.distributed.get_world_size()
    W.update(load_safetensors(a.weights))
    layers = [TiedLayerSpec("embed", Embed, tied_weight_attr="wte")]
    layers += [LayerSpec(Block, i, a.n_head) for i in range(a.n_layer)]
    layers += [LayerSpec(FinalNorm), TiedLayerSpec("embed", Embed, forward_fn=head,
                                                   tied_weight_attr="wte")]
    model = PipelineModule(layers=layers, num_stages=world, loss_fn=loss_fn,
                           partition_method=a.partition)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.0)
    config = {"train_micro_batch_size_per_gpu": a.batch,
              "gradient_accumulation_steps": a.micro_batches,
              "gradient_clipping": 1.0, "steps_per_print": 10 ** 9,
              "zero_optimization": {"stage": 0}}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    tokens = read_tokens(a.data).astype(np.int64)
    span = a.batch * a.seq

    def batches():  # llm.c's order: consecutive windows, targets shifted by one
        pos = 0
        while True:
            if pos + span + 1 > len(tokens):
                pos = 0
            chunk = torch.from_numpy(tokens[pos:pos + span + 1].copy())
            pos += span
            yield chunk[:-1].view(a.batch, a.seq), chunk[1:].view(a.batch, a.seq)

    it = batches()
    losses, times = [], []
    for step in range(a.steps):
        t0 = time.perf_counter()
        loss = engine.train_batch(data_iter=it)
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(loss))
    if engine.is_last_stage():
        kept = sorted(times[a.warmup:])
        print(f"deepspeed-pipe: ms_per_step={kept[len(kept) // 2]:.1f} stages={world} "
              f"micro_batches={a.micro_batches} losses={','.join(f'{x:.6f}' for x in losses)}",
              file=sys.stderr, flush=True)  # torch.distributed.run --tee 2 shows stderr


if __name__ == "__main__":
    main()
