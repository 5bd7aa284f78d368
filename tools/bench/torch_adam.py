"""The AdamW step of torch.optim.AdamW (foreach off and on; fused where the installed torch
has a CPU one) and of DeepSpeed's DeepSpeedCPUAdam (when importable) on N fp32 parameters, one
flat tensor, fp32 gradients: the median step time over --steps steps after one warm-up.
Printed lines: "<name>: <ms> ms <Gparam/s> Gparam/s" or "<name>: skipped: <why>"."""
import argparse
import statistics
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=100_000_000)
ap.add_argument("--steps", type=int, default=7)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--deepspeed", action="store_true")
a = ap.parse_args()
torch.set_num_threads(a.threads)


def run(name, make):
    p = torch.nn.Parameter(torch.full((a.n,), 0.5))
    p.grad = torch.full((a.n,), 1e-3)
    try:
        opt = make([p])
    except Exception as e:  # an optimizer this torch or DeepSpeed lacks
        print(f"{name}: skipped: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        return
    opt.step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    print(f"{name}: {s * 1e3:.1f} ms {a.n / s / 1e9:.2f} Gparam/s")


kw = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
if a.deepspeed:
    try:
        # DeepSpeed 0.14's cpu_adam sources need C++17; torch 1.13's extension builder passes
        # -std=c++14, so the op is built with C++17 added (a later -std wins).
        from deepspeed.accelerator import get_accelerator
        builder = type(get_accelerator().create_op_builder("CPUAdamBuilder"))
        base_args = builder.cxx_args
        builder.cxx_args = lambda self: base_args(self) + ["-std=c++17"]
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        run("DeepSpeedCPUAdam (adamw_mode)", lambda ps: DeepSpeedCPUAdam(ps, adamw_mode=True, **kw))
    except Exception as e:
        print(f"DeepSpeedCPUAdam (adamw_mode): skipped: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
else:
    print(f"torch {torch.__version__}")
    run("torch.optim.AdamW foreach=False", lambda ps: torch.optim.AdamW(ps, foreach=False, **kw))
    run("torch.optim.AdamW foreach=True", lambda ps: torch.optim.AdamW(ps, foreach=True, **kw))
    run("torch.optim.AdamW fused=True", lambda ps: torch.optim.AdamW(ps, fused=True, **kw))
