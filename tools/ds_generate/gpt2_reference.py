"""Greedy decoding of a GPT-2 from our consolidated weights (ds-ckpt consolidate), written out
plainly in Python (stdlib only): the golden that ds-generate's KV-cache decoding must equal.

  gpt2_reference.py WEIGHTS.safetensors N_HEAD PROMPT_IDS NEW_TOKENS
prints "[prompt] -> [new tokens]" as ds-generate does, then the smallest gap between the
chosen logit and the runner-up over the steps (a near tie would make the golden fragile).
Our layout: Linear weights [out, in]; attn.qkv rows are q, k, v; the head ties to wte;
layernorm eps 1e-5; GELU's tanh approximation.
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import safetensors_io  # noqa: E402  (tools/)


def load(path):
    out = {}
    for name, dtype, shape, raw in safetensors_io.read(path):
        if dtype != "F32":
            sys.exit(f"{path}: {name} is {dtype}, expected F32")
        flat = safetensors_io.floats(dtype, raw)
        out[name] = [flat[r * shape[1]:(r + 1) * shape[1]] for r in range(shape[0])] \
            if len(shape) == 2 else flat
    return out


def layernorm(x, g, b):
    mean = sum(x) / len(x)
    var = sum((v - mean) ** 2 for v in x) / len(x)
    r = 1.0 / math.sqrt(var + 1e-5)
    return [(v - mean) * r * gi + bi for v, gi, bi in zip(x, g, b)]


def linear(x, w, b=None):
    y = [sum(xi * wi for xi, wi in zip(x, row)) for row in w]
    return [yi + bi for yi, bi in zip(y, b)] if b is not None else y


def gelu(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def forward(w, ids, n_head):
    c = len(w["wte"][0])
    d = c // n_head
    xs = [[a + p for a, p in zip(w["wte"][t], w["wpe"][i])] for i, t in enumerate(ids)]
    layer = 0
    while f"h.{layer}.ln_1.weight" in w:
        p = f"h.{layer}."
        qkv = [linear(layernorm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"]), w[p + "attn.qkv.weight"],
                      w[p + "attn.qkv.bias"]) for x in xs]
        att = []
        for i in range(len(xs)):
            out = []
            for h in range(n_head):
                q = qkv[i][h * d:(h + 1) * d]
                scores = [sum(a * b for a, b in zip(q, qkv[j][c + h * d:c + (h + 1) * d])) / math.sqrt(d)
                          for j in range(i + 1)]
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                total = sum(e)
                out += [sum(e[j] / total * qkv[j][2 * c + h * d + k] for j in range(i + 1))
                        for k in range(d)]
            att.append(out)
        xs = [[a + b for a, b in zip(x, linear(o, w[p + "attn.proj.weight"], w[p + "attn.proj.bias"]))]
              for x, o in zip(xs, att)]
        for i, x in enumerate(xs):
            hdn = [gelu(v) for v in linear(layernorm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"]),
                                             w[p + "mlp.fc.weight"], w[p + "mlp.fc.bias"])]
            xs[i] = [a + b for a, b in zip(x, linear(hdn, w[p + "mlp.proj.weight"], w[p + "mlp.proj.bias"]))]
        layer += 1
    last = layernorm(xs[-1], w["ln_f.weight"], w["ln_f.bias"])
    return linear(last, w["wte"])


def main():
    w = load(sys.argv[1])
    n_head, prompt, steps = int(sys.argv[2]), [int(t) for t in sys.argv[3].split(",")], int(sys.argv[4])
    ids, gap = list(prompt), math.inf
    for _ in range(steps):
        logits = forward(w, ids, n_head)
        order = sorted(range(len(logits)), key=lambda k: -logits[k])
        gap = min(gap, logits[order[0]] - logits[order[1]])
        ids.append(order[0])
    print("[%s] -> [%s]" % (",".join(map(str, prompt)), ",".join(map(str, ids[len(prompt):]))))
    print(f"smallest top-2 gap {gap:.6f}")


if __name__ == "__main__":
    main()
