#!/usr/bin/env python3
"""DeepSpeed 0.19.8's ZeRO-3 load of a Hugging Face folder (tools/bench/hf_load.sh's peer):
transformers' from_pretrained under HfDeepSpeedConfig (zero.Init partitions each parameter as it
is made), then deepspeed.initialize (the fp32 master; DeepSpeed makes Adam's states at the first
step), on Gloo over CPU ranks. One process per rank, RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
in the environment, DS_ACCELERATOR=cpu.
"""
import os, resource, sys, time
import torch, deepspeed
from transformers import AutoModelForCausalLM
from transformers.integrations import HfDeepSpeedConfig
cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": int(os.environ["WORLD_SIZE"]),
       "bf16": {"enabled": True}, "zero_optimization": {"stage": 3},
       "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}}}
deepspeed.init_distributed(dist_backend="gloo")
keep = HfDeepSpeedConfig(cfg)
t0 = time.time()
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
t1 = time.time()
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
engine, *_ = deepspeed.initialize(model=model, config=cfg, model_parameters=model.parameters())
t2 = time.time()
print(f"deepspeed rank {os.environ['RANK']}: from_pretrained under zero.Init {t1 - t0:.2f} s "
      f"(peak RSS {rss1:.2f} GiB), initialize {t2 - t1:.2f} s, peak RSS "
      f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB", flush=True)
