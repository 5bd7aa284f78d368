#!/usr/bin/env python3
"""The DeepSpeed side of tools/bench/moe_vs_deepspeed.sh: the GPT-2 of pytorch_gpt2.py with
DeepSpeed-MoE MLPs (deepspeed.moe.layer.MoE: TopKGate, all-to-all over the expert-parallel
group, its Experts) in blocks i where (i + 1) % expert_interval == 0, trained by DeepSpeed's
engine on CPU ranks over gloo: fp32, torch's AdamW (decay on matrices only), gradient clipping
1.0, ZeRO stage 0, 1 or 2, one thread per rank. Loss = cross-entropy + moe_loss_coeff x the sum
of the MoE layers' l_aux, as DeepSpeed's MoE users write it; the reported loss is that total,
averaged over ranks (what ds-runtime's metrics hold).

Initial weights: a safetensors file in ds-runtime's GPT-2 names (`ds-worker --export-init`):
the dense ones as pytorch_gpt2.py, and for MoE blocks h.{i}.mlp.gate.weight [E, C] (the gate's
wg), h.{i}.mlp.experts.fc.weight [E, F, C], .fc.bias [E, F], .proj.weight [E, C, F],
.proj.bias [E, C]. Rank r holds global experts (r mod ep_size) x E/ep_size + j (DeepSpeed puts
consecutive ranks in one expert-parallel group). Without --weights the model is random (timing).

Run one process per rank from a Python that has DeepSpeed (tools/bench/setup_deepspeed.sh):

  DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 python -m torch.distributed.run --redirects 1 --tee 2 \\
    --nproc_per_node 2 tools/bench/deepspeed_moe_gpt2.py --data tokens.bin --ep_size 2 ...

Rank 0 prints one line per step and a summary line the driver parses:

  deepspeed-moe: ms_per_step=... peak_rss_mib=... threads=... deepspeed=... losses=l0,l1,...
"""
import argparse
import math
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepspeed_gpt2 import use_list_allgather_if_gloo_lacks_base  # noqa: E402
from pytorch_gpt2 import load_safetensors, read_tokens  # noqa: E402


def flag(text):
    v = text.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def is_moe_block(i, a):
    return a.num_experts > 0 and (i + 1) % a.expert_interval == 0


def random_weights(a, F_):
    """GPT-2's initialisation in ds-runtime's names (only for timing runs without --weights)."""
    g = torch.Generator().manual_seed(1234)
    C, E, std = a.n_embd, a.num_experts, 0.02
    proj_std = std / math.sqrt(2 * a.n_layer)
    normal = lambda *shape, s=std: torch.randn(*shape, generator=g) * s  # noqa: E731
    w = {"wte": normal(a.vocab, C), "wpe": normal(a.seq, C),
         "ln_f.weight": torch.ones(C), "ln_f.bias": torch.zeros(C)}
    for i in range(a.n_layer):
        h = f"h.{i}."
        w.update({h + "ln_1.weight": torch.ones(C), h + "ln_1.bias": torch.zeros(C),
                  h + "attn.qkv.weight": normal(3 * C, C), h + "attn.qkv.bias": torch.zeros(3 * C),
                  h + "attn.proj.weight": normal(C, C, s=proj_std), h + "attn.proj.bias": torch.zeros(C),
                  h + "ln_2.weight": torch.ones(C), h + "ln_2.bias": torch.zeros(C)})
        if is_moe_block(i, a):
            w.update({h + "mlp.gate.weight": normal(E, C),
                      h + "mlp.experts.fc.weight": normal(E, F_, C),
                      h + "mlp.experts.fc.bias": torch.zeros(E, F_),
                      h + "mlp.experts.proj.weight": normal(E, C, F_, s=proj_std),
                      h + "mlp.experts.proj.bias": torch.zeros(E, C)})
        else:
            w.update({h + "mlp.fc.weight": normal(F_, C), h + "mlp.fc.bias": torch.zeros(F_),
                      h + "mlp.proj.weight": normal(C, F_, s=proj_std), h + "mlp.proj.bias": torch.zeros(C)})
    return w


class Expert(torch.nn.Module):
    """One expert: GPT-2's MLP, fc -> tanh GELU -> proj."""

    def __init__(self, C, F_):
        super().__init__()
        self.fc = torch.nn.Linear(C, F_)
        self.proj = torch.nn.Linear(F_, C)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(torch.nn.Module):
    """Attention + MLP; the MLP is a DeepSpeed MoE layer in MoE blocks."""

    def __init__(self, i, w, a, ep_rank):
        super().__init__()
        h = f"h.{i}."
        names = ["ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                 "attn.proj.bias", "ln_2.weight", "ln_2.bias"]
        self.moe = None
        if not is_moe_block(i, a):
            names += ["mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"]
        self.p = torch.nn.ParameterDict({n.replace(".", "__"): torch.nn.Parameter(w[h + n].clone())
                                         for n in names})
        self.n_head = a.n_head
        if is_moe_block(i, a):
            from deepspeed.moe.layer import MoE
            E, C = a.num_experts, a.n_embd
            fc_w = w[h + "mlp.experts.fc.weight"]
            F_ = fc_w.shape[1]
            self.moe = MoE(hidden_size=C, expert=Expert(C, F_), num_experts=E, ep_size=a.ep_size, k=a.k,
                           capacity_factor=a.capacity_factor, eval_capacity_factor=a.capacity_factor,
                           min_capacity=a.min_capacity, noisy_gate_policy=None,
                           drop_tokens=a.drop_tokens, use_rts=a.use_rts,
                           top2_2nd_expert_sampling=a.top2_2nd_expert_sampling)
            local = E // a.ep_size
            with torch.no_grad():
                self.moe.deepspeed_moe.gate.wg.weight.copy_(w[h + "mlp.gate.weight"])
                for j, ex in enumerate(self.moe.deepspeed_moe.experts.deepspeed_experts):
                    e = ep_rank * local + j  # the global expert this rank's local expert j is
                    ex.fc.weight.copy_(fc_w[e])
                    ex.fc.bias.copy_(w[h + "mlp.experts.fc.bias"][e])
                    ex.proj.weight.copy_(w[h + "mlp.experts.proj.weight"][e])
                    ex.proj.bias.copy_(w[h + "mlp.experts.proj.bias"][e])

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
        if self.moe is None:
            y = F.gelu(F.linear(y, g("mlp.fc.weight"), g("mlp.fc.bias")), approximate="tanh")
            return x + F.linear(y, g("mlp.proj.weight"), g("mlp.proj.bias")), None
        y, l_aux, _ = self.moe(y)
        return x + y, l_aux


class MoeGpt2(torch.nn.Module):
    def __init__(self, w, a, ep_rank):
        super().__init__()
        self.wte = torch.nn.Parameter(w["wte"].clone())  # tied with the LM head
        self.wpe = torch.nn.Parameter(w["wpe"].clone())
        self.ln_f_weight = torch.nn.Parameter(w["ln_f.weight"].clone())
        self.ln_f_bias = torch.nn.Parameter(w["ln_f.bias"].clone())
        self.blocks = torch.nn.ModuleList([Block(i, w, a, ep_rank) for i in range(a.n_layer)])
        self.coeff = a.moe_loss_coeff
        self.last_ce = self.last_aux = None

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = F.embedding(idx, self.wte) + self.wpe[:T]
        aux = []
        for b in self.blocks:
            x, l_aux = b(x)
            if l_aux is not None:
                aux.append(l_aux)
        x = F.layer_norm(x, (x.shape[-1],), self.ln_f_weight, self.ln_f_bias, 1e-5)
        logits = F.linear(x, self.wte)
        ce = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        aux_sum = torch.stack(aux).sum() if aux else torch.zeros(())
        self.last_ce, self.last_aux = ce.detach(), aux_sum.detach()
        return ce + self.coeff * aux_sum


def check_all_to_all_single(world):
    """DeepSpeed's _AllToAll calls torch.distributed.all_to_all_single. torch's gloo backend has
    it (alltoall_base; torch 1.13 included) but not the list form all_to_all; a torch whose gloo
    lacked it would fail inside the first MoE layer's forward, so probe it once and say so."""
    x = torch.arange(world, dtype=torch.float32)
    try:
        torch.distributed.all_to_all_single(torch.empty_like(x), x)
    except RuntimeError as e:
        raise SystemExit(f"deepspeed-moe: torch {torch.__version__}'s gloo lacks all_to_all_single, "
                         f"which DeepSpeed's MoE all-to-all needs: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="uint16 token file (raw or DSTOKENS)")
    ap.add_argument("--weights", default="", help="safetensors initial weights (ds-runtime names); "
                    "random without it")
    ap.add_argument("--n_layer", type=int, required=True)
    ap.add_argument("--n_embd", type=int, required=True)
    ap.add_argument("--n_head", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True, help="micro batch per rank")
    ap.add_argument("--ffn", type=int, default=0, help="MLP / expert hidden size (0: 4 x n_embd; "
                    "taken from --weights when given)")
    ap.add_argument("--num_experts", type=int, default=4)
    ap.add_argument("--ep_size", type=int, default=1)
    ap.add_argument("--k", type=int, default=1, choices=(1, 2))
    ap.add_argument("--capacity_factor", type=float, default=1.0)
    ap.add_argument("--min_capacity", type=int, default=4)
    ap.add_argument("--drop_tokens", type=flag, default=True)
    ap.add_argument("--use_rts", type=flag, default=True)
    ap.add_argument("--top2_2nd_expert_sampling", type=flag, default=True)
    ap.add_argument("--moe_loss_coeff", type=float, default=0.01)
    ap.add_argument("--expert_interval", type=int, default=2)
    ap.add_argument("--zero_stage", type=int, default=2, choices=(0, 1, 2))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)  # the same on every rank: RTS and top-2 sampling draws come from it

    import deepspeed
    import deepspeed.comm as dist
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer
    from deepspeed.utils import groups
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert a.num_experts % a.ep_size == 0 and world % a.ep_size == 0, \
        f"ep_size {a.ep_size} must divide num_experts {a.num_experts} and the world {world}"
    list_allgather = use_list_allgather_if_gloo_lacks_base(world)
    check_all_to_all_single(world)

    if a.weights:
        w = load_safetensors(a.weights)
        assert w["wte"].shape == (a.vocab, a.n_embd), f"{a.weights}: wte is {tuple(w['wte'].shape)}"
        moe_names = [f"h.{i}.mlp.gate.weight" for i in range(a.n_layer) if is_moe_block(i, a)]
        missing = [n for n in moe_names if n not in w]
        assert not missing, f"{a.weights} lacks {missing}: not an MoE checkpoint of this shape?"
    else:
        w = random_weights(a, a.ffn or 4 * a.n_embd)
    # DeepSpeed's E + D layout: expert-parallel groups are consecutive ranks.
    ep_rank = rank % a.ep_size
    model = MoeGpt2(w, a, ep_rank)
    del w

    # AdamW with decay on matrices only (as deepspeed_gpt2.py), then DeepSpeed's own split of the
    # expert parameters into their 'moe' groups (ZeRO reduces those over the expert-data group).
    decay = {"name": "decay", "params": [], "weight_decay": 0.1}
    no_decay = {"name": "no_decay", "params": [], "weight_decay": 0.0}
    for p in model.parameters():
        (decay if p.dim() >= 2 else no_decay)["params"].append(p)
    groups_ = split_params_into_different_moe_groups_for_optimizer([decay, no_decay])
    zero = {"stage": a.zero_stage}
    if a.zero_stage > 0:
        zero.update({"overlap_comm": True, "contiguous_gradients": True, "reduce_scatter": True})
    config = {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        # torch_adam: torch.optim.AdamW rather than DeepSpeed's FusedAdam, which is a CUDA op.
        "optimizer": {"type": "AdamW", "params": {"lr": a.lr, "betas": [0.9, 0.95], "eps": 1e-8,
                                                   "weight_decay": 0.1, "torch_adam": True}},
        "zero_optimization": zero,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=groups_, config=config)
    if a.num_experts > 0:  # the layout the weights above were sliced for
        got = groups._get_expert_parallel_rank(f"ep_size_{a.ep_size}")
        assert got == ep_rank, f"rank {rank}: DeepSpeed's expert-parallel rank {got}, expected {ep_rank}"

    tokens = read_tokens(a.data)
    B, T = a.batch, a.seq
    pos, times, losses = 0, [], []
    for step in range(a.steps):
        # llm.c's order, as deepspeed_gpt2.py: rank r reads B*T+1 tokens at pos + r*B*T.
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
        lv = torch.stack([loss.detach(), model.last_ce, model.last_aux])
        dist.all_reduce(lv)  # the global means, as ds-runtime reports them
        lv /= world
        losses.append(lv[0].item())
        if step >= a.warmup:
            times.append(dt)
        if rank == 0:
            gn = engine.get_global_grad_norm()  # before clipping, as ds-runtime's grad_norm column
            gn = float(gn) if gn is not None else float("nan")
            print(f"deepspeed-moe step {step + 1}/{a.steps} loss {losses[-1]:.4f} (ce {lv[1].item():.4f} "
                  f"aux {lv[2].item():.4f}) grad_norm {gn:.4f} {dt:.1f} ms", flush=True)
    if rank != 0:
        return
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ms = sorted(times)[len(times) // 2] if times else float("nan")
    print(f"deepspeed-moe: ms_per_step={ms:.1f} peak_rss_mib={rss:.1f} threads={torch.get_num_threads()} "
          f"deepspeed={deepspeed.__version__} torch={torch.__version__} zero={a.zero_stage} "
          f"experts={a.num_experts} ep={a.ep_size} k={a.k} "
          f"allgather={'list' if list_allgather else 'into_tensor'} "
          f"losses={','.join(f'{l:.6f}' for l in losses)}", flush=True)


if __name__ == "__main__":
    main()
