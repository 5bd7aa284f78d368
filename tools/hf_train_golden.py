#!/usr/bin/env python3
"""Training goldens for runtime/hf's families: 10 AdamW steps of transformers' own model.

For each case folder of runtime/generate/testdata/families (tools/hf_family_golden.py), this
loads the saved model with transformers in fp32 (eager attention, dropout 0 as saved) and trains
it for STEPS steps the way a ds-runtime job with `model: {hf: DIR}` and `data: {shuffle: false}`
does (tests/integration/hf_train_test.sh writes that job):

  batches    llm.c's order over the uint16 token file train_tokens.bin (written here): step s
             reads B*T+1 tokens from s*B*T, inputs the first B*T, targets the next
  loss       the mean cross-entropy over the B*T targets
  optimizer  torch.optim.AdamW(lr 1e-3, betas (0.9, 0.95), eps 1e-8), weight decay 0.1 on
             parameters of rank >= 2 only (the runtime's rule), global gradient clipping at 1.0

and writes <case>/train_golden.json: {"losses": [...], "grad_norms": [...] (before clipping),
"B", "T", "steps", "lr", ...}.

  OMP_NUM_THREADS=1 ~/.cache/ds-runtime/peer-venv/bin/python tools/hf_train_golden.py \\
      runtime/generate/testdata/families [case ...]

(the peers' venv of DS_PEERS=1 tools/setup.sh; the test reads only the files).
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM

B, T, STEPS, LR, BETAS, EPS, WD, CLIP = 2, 16, 10, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
TOKENS = "train_tokens.bin"


def make_tokens(root, vocab):
    rng = np.random.default_rng(1234)
    tokens = rng.integers(0, vocab, size=STEPS * B * T + 1, dtype=np.uint16)
    tokens.tofile(os.path.join(root, TOKENS))
    return tokens


def train(folder, tokens):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.train()
    return train_steps(model, tokens, LR)


def train_steps(model, tokens, lr):
    """STEPS steps of the parameters that require grad (tools/lora_golden.py's adapters too)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=BETAS, eps=EPS)
    losses, norms = [], []
    for step in range(STEPS):
        buf = torch.from_numpy(tokens[step * B * T: step * B * T + B * T + 1].astype(np.int64))
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        losses.append(float(loss))
        norms.append(float(norm))
    return losses, norms


def main():
    root = sys.argv[1]
    wanted = sys.argv[2:]
    cases = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "config.json")))
    vocab = min(json.load(open(os.path.join(root, c, "config.json")))["vocab_size"] for c in cases)
    tokens = make_tokens(root, vocab)
    for case in cases:
        if wanted and case not in wanted:
            continue
        losses, norms = train(os.path.join(root, case), tokens)
        out = {"case": case, "transformers": transformers.__version__, "torch": torch.__version__,
               "B": B, "T": T, "steps": STEPS, "lr": LR, "betas": list(BETAS), "eps": EPS,
               "weight_decay": WD, "gradient_clipping": CLIP, "tokens": TOKENS,
               "losses": losses, "grad_norms": norms}
        with open(os.path.join(root, case, "train_golden.json"), "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print(f"{case}: loss {losses[0]:.6f} -> {losses[-1]:.6f}")


if __name__ == "__main__":
    main()
