"""transformers' side of tools/bench/generate_vs_transformers.sh.

  save DIR: writes a random-weight GPT-2 124M (GPT2Config's defaults) as a Hugging Face
            directory, which both sides load.
  time DIR --prompt_len P --new_tokens N --batches 1,8 --rounds R --threads T: greedy
            generate() with the KV cache (fp32, inference_mode), the same prompt as
            generate_bench; prefill timed as one forward over the prompt, decode as the rest of
            generate(); prints "batch B prefill X tok/s decode Y tok/s" (best of R).
"""
import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "time"])
    ap.add_argument("dir")
    ap.add_argument("--prompt_len", type=int, default=128)
    ap.add_argument("--new_tokens", type=int, default=128)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.mode == "save":
        torch.manual_seed(0)
        GPT2LMHeadModel(GPT2Config()).save_pretrained(a.dir)  # safetensors (transformers 5)
        return
    torch.set_num_threads(a.threads)
    model = GPT2LMHeadModel.from_pretrained(a.dir).eval()
    vocab = model.config.vocab_size
    prompt = [(i * 7919 + 13) % 50000 % vocab for i in range(a.prompt_len)]
    print(f"transformers threads {torch.get_num_threads()}")
    for b in [int(x) for x in a.batches.split(",")]:
        ids = torch.tensor([prompt] * b)
        best_prefill = best_decode = 0.0
        for _ in range(a.rounds):
            with torch.inference_mode():
                t0 = time.perf_counter()
                model(ids, use_cache=True)
                prefill = time.perf_counter() - t0
                t0 = time.perf_counter()
                out = model.generate(ids, attention_mask=torch.ones_like(ids),
                                     max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens,
                                     do_sample=False, pad_token_id=0)
                total = time.perf_counter() - t0
            assert out.shape[1] == a.prompt_len + a.new_tokens
            best_prefill = max(best_prefill, b * a.prompt_len / prefill)
            best_decode = max(best_decode, b * (a.new_tokens - 1) / max(total - prefill, 1e-9))
        print(f"batch {b} prefill {best_prefill:.1f} tok/s decode {best_decode:.2f} tok/s")


if __name__ == "__main__":
    main()
