#!/usr/bin/env python3
"""Writes runtime/rlhf/testdata/ppo_golden.json: PPO's arithmetic as DeepSpeed-Chat's step 3
defines it, computed here with numpy in its tensor form (whole-batch slices and a reversed GAE
loop), independently of the C++ in runtime/rlhf/ppo_math.cc, on fixed random inputs.

  /usr/bin/python3 tools/ppo_golden.py            # rewrites the golden file

Inputs: B sequences of T logprob positions; positions [start, T) are the answer, `mask` 1 on
its real tokens (a right-padded answer: 1s then 0s; one row empty, one full). Outputs: the
per-token rewards (KL penalty, clipped score on the last real answer token, 0 after it), GAE
advantages and returns (values after the answer's end count as 0), the clipped-surrogate actor
loss and the clipped value loss, under non-default settings so every constant matters.
"""
import json
import os
import sys

import numpy as np

SETTINGS = dict(kl_ctl=0.1, clip_reward_value=5.0, cliprange=0.2, cliprange_value=0.2,
                gamma=0.98, lam=0.9)


def rewards_of(logp, ref_logp, scores, mask, start, s):
    rewards = -s["kl_ctl"] * (logp - ref_logp)
    rewards[:, :start] = 0.0
    n = mask[:, start:].sum(1).astype(int)
    ends = start + n  # one past the last real answer token
    clipped = np.clip(scores, -s["clip_reward_value"], s["clip_reward_value"])
    for j in range(rewards.shape[0]):
        rewards[j, ends[j]:] = 0.0
        if n[j] > 0:
            rewards[j, ends[j] - 1] += clipped[j]
    return rewards, ends


def gae(values, rewards, ends, start, s):
    values = values.copy()
    for j in range(values.shape[0]):
        values[j, ends[j]:] = 0.0
    length = rewards.shape[1]
    last = np.zeros(rewards.shape[0])
    out = []
    for t in reversed(range(start, length)):
        nxt = values[:, t + 1] if t < length - 1 else 0.0
        delta = rewards[:, t] + s["gamma"] * nxt - values[:, t]
        last = delta + s["gamma"] * s["lam"] * last
        out.append(last)
    adv = np.stack(out[::-1], axis=1)
    ret = adv + values[:, start:]
    full_adv = np.zeros_like(rewards)
    full_ret = np.zeros_like(rewards)
    full_adv[:, start:] = adv
    full_ret[:, start:] = ret
    return full_adv, full_ret


def actor_loss(logp, old_logp, adv, mask, start, s):
    lp, olp, a, m = logp[:, start:], old_logp[:, start:], adv[:, start:], mask[:, start:]
    ratio = np.exp((lp - olp) * m)
    l1 = -a * ratio
    l2 = -a * np.clip(ratio, 1.0 - s["cliprange"], 1.0 + s["cliprange"])
    return float(np.sum(np.maximum(l1, l2) * m) / m.sum())


def critic_loss(values, old_values, returns, mask, start, s):
    v, ov, r, m = values[:, start:], old_values[:, start:], returns[:, start:], mask[:, start:]
    vc = np.clip(v, ov - s["cliprange_value"], ov + s["cliprange_value"])
    return float(0.5 * np.sum(np.maximum((v - r) ** 2, (vc - r) ** 2) * m) / m.sum())


def main():
    rng = np.random.default_rng(20261203)
    B, T, start = 4, 9, 3
    f32 = lambda x: np.asarray(x, dtype=np.float32).astype(np.float64)
    logp = f32(rng.uniform(-4, -0.1, (B, T)))
    ref_logp = f32(logp + rng.normal(0, 0.3, (B, T)))
    old_logp = f32(logp + rng.normal(0, 0.2, (B, T)))
    values = f32(rng.normal(0, 1, (B, T)))
    old_values = f32(values + rng.normal(0, 0.3, (B, T)))
    scores = f32([7.5, -1.25, 0.5, -9.0])  # two beyond the clip
    lengths = [4, 0, 6, 2]  # real answer tokens per row (of T - start = 6)
    mask = np.zeros((B, T))
    for j, n in enumerate(lengths):
        mask[j, start:start + n] = 1.0
    s = SETTINGS
    rewards, ends = rewards_of(logp, ref_logp, scores, mask, start, s)
    adv, ret = gae(values, rewards, ends, start, s)
    out = dict(
        settings=s, batch=B, seq=T, start=start,
        inputs=dict(logprobs=logp.ravel().tolist(), ref_logprobs=ref_logp.ravel().tolist(),
                    old_logprobs=old_logp.ravel().tolist(), values=values.ravel().tolist(),
                    old_values=old_values.ravel().tolist(), scores=scores.tolist(),
                    mask=mask.ravel().tolist()),
        expected=dict(rewards=rewards.ravel().tolist(), advantages=adv.ravel().tolist(),
                      returns=ret.ravel().tolist(),
                      actor_loss=actor_loss(logp, old_logp, adv, mask, start, s),
                      critic_loss=critic_loss(values, old_values, ret, mask, start, s)))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "rlhf",
                        "testdata", "ppo_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.normpath(path)}", file=sys.stderr)


if __name__ == "__main__":
    main()
