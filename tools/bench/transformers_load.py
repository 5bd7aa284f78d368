#!/usr/bin/env python3
"""transformers' from_pretrained of a Hugging Face folder (tools/bench/hf_load.sh's peer): the
time and this process's peak RSS, for the dtype given (bfloat16 keeps the weights as views of
the mapped file until touched; float32 converts them).

  python transformers_load.py DIR bfloat16|float32
"""
import resource
import sys
import time

import torch
from transformers import AutoModelForCausalLM

t0 = time.time()
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=getattr(torch, sys.argv[2]))
print(f"transformers from_pretrained {sys.argv[2]}: {time.time() - t0:.2f} s, peak RSS "
      f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
