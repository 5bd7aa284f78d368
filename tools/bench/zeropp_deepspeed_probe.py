#!/usr/bin/env python3
"""Which parts of ZeRO++ DeepSpeed's CPU path runs (tools/bench/zeropp.sh): a two-layer MLP under
ZeRO-3 over gloo, three steps with plain ZeRO-3 or one part (hpz, qwz, qgz). Run one process per
rank from the peers' venv with DeepSpeed (tools/bench/setup_deepspeed.sh):

  DS_ACCELERATOR=cpu python -m torch.distributed.run --nproc_per_node 4 \\
      tools/bench/zeropp_deepspeed_probe.py qwz

Rank 0 prints "<part> step <i> loss <x>" per step; a part the CPU path lacks raises there.
"""
import sys

import deepspeed
import torch


def main():
    part = sys.argv[1]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256))
    zero = {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0}
    if part == "hpz":
        zero["zero_hpz_partition_size"] = 2
    elif part == "qwz":
        zero["zero_quantized_weights"] = True
    elif part == "qgz":
        zero["zero_quantized_gradients"] = True
    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
              "zero_optimization": zero,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    for step in range(3):
        loss = engine(torch.randn(2, 256)).pow(2).mean()
        engine.backward(loss)
        engine.step()
        if engine.global_rank == 0:
            print(f"{part} step {step} loss {loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
