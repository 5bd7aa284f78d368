"""The peer of tools/bench/recovery.sh: a PyTorch DistributedDataParallel job (gloo) under torchrun
--max-restarts that saves a checkpoint every step (model and optimizer, rank 0, written to a
temporary file and renamed) and resumes from it when torchrun restarts the workers after one
dies: torchrun's recovery path as PyTorch users have it. Rank 0 appends "start N" to --steps_log when
it begins (N: the step it resumed from) and "step N" after every step, so the benchmark sees when
a restart begins and when its first step ends.

The model is a GPT-like stack of the size of the benchmark's ds-runtime job (4 layers of 256,
vocabulary 8192, 64 tokens, micro 4)."""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn


class TinyGpt(nn.Module):
    def __init__(self, vocab, width, layers, heads, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        return self.head(self.norm(self.blocks(h, mask=self.mask, is_causal=True)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--steps_log", required=True)
    ap.add_argument("--steps", type=int, default=1000000)
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    # The store's keys of the attempt before a restart are still there, and gloo's rendezvous
    # would read the dead workers' addresses (connection refused): each attempt gets its own
    # prefix of the agent's store.
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=False)
    dist.init_process_group("gloo", store=dist.PrefixStore("attempt" + attempt, store), rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(TinyGpt(8192, 256, 4, 4, 63))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = 0
    if os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
    if rank == 0:
        with open(args.steps_log, "a") as f:
            f.write(f"start {step} {time.time():.3f}\n")
    gen = torch.Generator().manual_seed(1000 + rank)
    while step < args.steps:
        x = torch.randint(0, 8192, (args.batch, 64), generator=gen)
        loss = nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if rank == 0:
            tmp = args.ckpt + ".tmp"
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, args.ckpt)
            with open(args.steps_log, "a") as f:
                f.write(f"step {step} {time.time():.3f}\n")
        dist.barrier()  # the checkpoint of `step` is on disk before any rank goes on


if __name__ == "__main__":
    main()
