#!/usr/bin/env python3
"""The PyTorch peer of kernels/cuda/attention/attention_bench: causal attention in bf16,
forward and backward, through F.scaled_dot_product_attention (PyTorch picks its fastest
backend: flash or cuDNN on Hopper) on the same shapes and with the same FLOP convention
(forward: QK^T and PV over the causal half, 4 B H T^2 D / 2; backward 2.5x forward).

  RESULT torch_attention T=<T> D=<D> fwd_ms=<a> bwd_ms=<b> tflops=<x> torch=<version>

Times are the mean of --iters calls after --warmup, measured with CUDA events.
"""
import argparse

import torch
import torch.nn.functional as F


def time_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def run_one(b, h, t, d, warmup, iters):
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.rand(b, h, t, d, device="cuda", generator=g, dtype=torch.bfloat16)
               .mul_(2).sub_(1).requires_grad_() for _ in range(3))
    dout = torch.rand(b, h, t, d, device="cuda", generator=g, dtype=torch.bfloat16).mul_(2).sub_(1)
    fwd_ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), warmup, iters)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def backward():
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    bwd_ms = time_ms(backward, warmup, iters)
    fwd_flops = 4.0 * b * h * t * t * d / 2
    tflops = 3.5 * fwd_flops / ((fwd_ms + bwd_ms) * 1e-3) / 1e12
    print(f"RESULT torch_attention T={t} D={d} fwd_ms={fwd_ms:.4f} bwd_ms={bwd_ms:.4f} "
          f"tflops={tflops:.1f} torch={torch.__version__}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", default="1024,4096")
    ap.add_argument("--dim", default="64,128")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device for torch")
    for d in (int(x) for x in a.dim.split(",")):
        for t in (int(x) for x in a.seq.split(",")):
            run_one(a.batch, a.heads, t, d, a.warmup, a.iters)


if __name__ == "__main__":
    main()
