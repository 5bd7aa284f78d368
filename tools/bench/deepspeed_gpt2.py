#!/usr/bin/env python3
"""The DeepSpeed side of tools/bench/ddp_vs_pytorch.sh: the GPT-2 of pytorch_gpt2.py (same
module, same safetensors initial weights, same token order) trained by DeepSpeed itself with
ZeRO stage 2 (overlap_comm; --stage and --zero_json for others, as tools/bench/zeropp.sh runs
stage 3 with hpZ), fp32 (--bf16: DeepSpeed's bf16), AdamW (torch's, decay on matrices only, as
pytorch_gpt2.py and ds-runtime do) and gradient clipping 1.0, on CPU ranks over the gloo backend. Run it one
process per rank with `python -m torch.distributed.run` from a Python that has DeepSpeed
(tools/bench/setup_deepspeed.sh) and DS_ACCELERATOR=cpu. Rank 0 prints one line per step and
a summary line the driver parses:

  deepspeed: ms_per_step=... peak_rss_mib=... threads=... deepspeed=... losses=l0,l1,...
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt2 import Gpt2, load_safetensors, read_tokens  # noqa: E402


def use_list_allgather_if_gloo_lacks_base(world):
    """DeepSpeed's TorchBackend picks torch.distributed.all_gather_into_tensor whenever torch has
    the function, but torch 1.13's ProcessGroupGloo raises 'no support for _allgather_base'
    (Debian's python3-torch is 1.13). Probe it once; where it raises (on every rank alike, before
    any traffic), clear DeepSpeed's choice so ZeRO's step takes its own path for such torch
    versions: all_gather into a list of per-rank partitions, bucketed by allgather_bucket_size."""
    import deepspeed.comm.comm as ds_comm
    try:
        torch.distributed.all_gather_into_tensor(torch.zeros(world), torch.zeros(1))
        return False
    except RuntimeError:
        ds_comm.cdb.all_gather_function = None
        return True


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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--zero_json", default="{}", help="more zero_optimization keys, as JSON")
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    import deepspeed
    import deepspeed.comm as dist
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    list_allgather = use_list_allgather_if_gloo_lacks_base(world)

    model = Gpt2(load_safetensors(a.weights), a.n_layer, a.n_head)
    decay = [p for n, p in model.w.items() if p.dim() >= 2]
    no_decay = [p for n, p in model.w.items() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    config = {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        # torch_adam: torch.optim.AdamW rather than DeepSpeed's FusedAdam, which is a CUDA op.
        "optimizer": {"type": "AdamW", "params": {"lr": a.lr, "betas": [0.9, 0.95], "eps": 1e-8,
                                                   "weight_decay": 0.1, "torch_adam": True}},
        "zero_optimization": {"stage": a.stage, "overlap_comm": True, **json.loads(a.zero_json)},
        "bf16": {"enabled": a.bf16},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=groups, config=config)

    tokens = read_tokens(a.data)
    B, T = a.batch, a.seq
    pos, times, losses = 0, [], []
    for step in range(a.steps):
        # llm.c's order, as pytorch_gpt2.py: rank r reads B*T+1 tokens at pos + r*B*T.
        if pos + world * B * T + 1 > len(tokens):
            pos = 0
        start = pos + rank * B * T
        buf = torch.from_numpy(tokens[start:start + B * T + 1].astype(np.int64))
        pos += world * B * T
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        t0 = time.perf_counter()
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        dt = (time.perf_counter() - t0) * 1e3
        lv = loss.detach().clone()
        dist.all_reduce(lv)  # the global mean loss, as ds-runtime reports it
        lv /= world
        losses.append(lv.item())
        if step >= a.warmup:
            times.append(dt)
        if rank == 0:
            print(f"deepspeed step {step + 1}/{a.steps} loss {losses[-1]:.4f} {dt:.1f} ms", flush=True)
    if rank != 0:
        return
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ms = sorted(times)[len(times) // 2] if times else float("nan")
    print(f"deepspeed: ms_per_step={ms:.1f} peak_rss_mib={rss:.1f} threads={torch.get_num_threads()} "
          f"deepspeed={deepspeed.__version__} torch={torch.__version__} "
          f"allgather={'list' if list_allgather else 'into_tensor'} "
          f"losses={','.join(f'{l:.6f}' for l in losses)}", flush=True)


if __name__ == "__main__":
    main()
