#!/usr/bin/env python3
"""LoRA goldens: PEFT adapters on transformers' models, trained 10 steps by PyTorch's AdamW.

For each case this wraps a tiny Hugging Face model with peft.get_peft_model(LoraConfig(...)),
saves the untrained adapter (A drawn by PEFT, B zero) as <out>/<case>/adapter_init/, trains it
the way a ds-runtime job with `model: {hf: DIR, lora: {..., adapter: adapter_init}}` and
`data: {shuffle: false}` does (tests/integration/lora_test.sh writes that job), and writes

  adapter_final/   PEFT's save_pretrained after the steps (adapter_model.safetensors,
                   adapter_config.json)
  golden.json      case, base (the model folder, relative to the repository), lora (r, alpha,
                   target_modules, use_rslora), losses, grad_norms (of the adapters, before
                   clipping), prompt, logits (fp32, the trained PeftModel over the prompt), the
                   versions of torch, transformers and peft

Training: batches in llm.c's order over runtime/generate/testdata/families/train_tokens.bin (step
s reads B*T+1 tokens from s*B*T), the mean cross-entropy, AdamW(lr 5e-3, betas (0.9, 0.95),
eps 1e-8) with weight decay 0.1 on the adapters (all matrices), global clipping at 1.0, dropout 0.

Cases: qwen2 (PEFT's default targets q_proj, v_proj: rows of our fused qkv, with biases), opt
(all-linear: every attention and MLP projection and OPT's project_in / project_out), gpt2 (a
tiny GPT-2 made here, saved as <out>/gpt2/base/: c_attn, GPT-2's Conv1D, with rsLoRA's scale).

  OMP_NUM_THREADS=1 ~/.cache/ds-runtime/peer-venv/bin/python tools/lora_golden.py \\
      runtime/worker/testdata/lora [case ...]

(the peers' venv of DS_PEERS=1 tools/setup.sh, with peft; the test reads only the files).
"""
import json
import os
import shutil
import sys

import numpy as np
import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

import hf_train_golden  # the same batches, loss, AdamW groups and clipping
from hf_train_golden import B, BETAS, CLIP, EPS, STEPS, T, WD

LR = 5e-3
FAMILIES = "runtime/generate/testdata/families"
PROMPT = [1, 60, 7, 33, 12, 9, 50, 2, 41, 19, 26]

CASES = {
    "qwen2": dict(base=FAMILIES + "/qwen2", r=4, alpha=8, targets=None, rslora=False),
    "opt": dict(base=FAMILIES + "/opt", r=4, alpha=16, targets="all-linear", rslora=False),
    "gpt2": dict(base=None, r=4, alpha=8, targets=None, rslora=True),
}


def make_gpt2(folder):
    torch.manual_seed(7)
    cfg = GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1,
                     eos_token_id=None)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
    model.save_pretrained(folder)


def run(out, case, spec, tokens):
    folder = os.path.join(out, case)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    base = spec["base"]
    if base is None:
        base = os.path.join(folder, "base")
        make_gpt2(base)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32,
                                                 attn_implementation="eager")
    config = LoraConfig(r=spec["r"], lora_alpha=spec["alpha"], lora_dropout=0.0,
                        target_modules=spec["targets"], use_rslora=spec["rslora"],
                        task_type="CAUSAL_LM")
    model = get_peft_model(model, config)
    model.save_pretrained(os.path.join(folder, "adapter_init"))
    model.train()
    losses, norms = hf_train_golden.train_steps(model, tokens, LR)
    model.save_pretrained(os.path.join(folder, "adapter_final"))
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([PROMPT])).logits[0]
    targets = sorted(model.peft_config["default"].target_modules)
    golden = {"case": case, "base": base, "lora": {"r": spec["r"], "alpha": spec["alpha"],
                                                   "target_modules": targets,
                                                   "use_rslora": spec["rslora"]},
              "B": B, "T": T, "steps": STEPS, "lr": LR, "betas": list(BETAS), "eps": EPS,
              "weight_decay": WD, "gradient_clipping": CLIP, "losses": losses,
              "grad_norms": norms, "prompt": PROMPT, "logits": logits.tolist(),
              "torch": torch.__version__, "transformers": transformers.__version__,
              "peft": peft.__version__}
    with open(os.path.join(folder, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"{case}: targets {targets}, loss {losses[0]:.6f} -> {losses[-1]:.6f}")


def main():
    out = sys.argv[1]
    wanted = sys.argv[2:]
    tokens = np.fromfile(os.path.join(FAMILIES, "train_tokens.bin"), dtype=np.uint16)
    for case, spec in CASES.items():
        if not wanted or case in wanted:
            run(out, case, spec, tokens)


if __name__ == "__main__":
    main()
