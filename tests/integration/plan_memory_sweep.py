"""Every layout the planner accepts for the default example's model, run through ds-launch: each
rank's measured memory against its plan (issue: the planner picks the layout from exact memory).

For world W (one loopback node of W slots), `ds-launch plan --auto --json` lists every layout
that fits (tensor x pipeline x data, ZeRO stage, micro-batch x accumulation for the global batch,
recompute). Each runs one step under DS_MEMORY_PROFILE=1, where every rank prints the peak
resident bytes of its model states (sampled after every instruction) and its executors'
activation and activation-gradient arenas, each beside the plan's figure for that rank. Both
must be within TOLERANCE of the plan on every rank of every layout.

The search tries recompute only where a layout does not fit without it, which this model always
does; --recompute adds, for the first layout of every tensor x pipeline split, the same layout
with selective and with full recompute (their shared recompute arena is planned too).

  plan_memory_sweep.py --launch L --worker W --agent A --data DIR --work DIR --world 2 [--bf16]
                       [--recompute]
Prints one line per layout and a summary; exit 1 on any layout outside the tolerance or failing.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

TOLERANCE = 0.05
LINE = re.compile(
    r"^\[rank (\d+)\] memory \(rank \d+\): .*model states peak ([0-9.]+) MiB .*planned ([0-9.]+) "
    r"MiB; activations ([0-9.]+) MiB, activation gradients ([0-9.]+) MiB, planned ([0-9.]+) "
    r"and ([0-9.]+) MiB$")


def job_yaml(a, layout):
    """The default example's model and batch; `layout` None: parallel auto, else written out."""
    lines = [
        "train_batch_size: 128",
        "gradient_clipping: 1.0",
        "optimizer: {type: AdamW, params: {lr: 0.001, weight_decay: 0.01}}",
        "model: {family: gpt2, n_layer: 3, n_embd: 128, n_head: 4, vocab_size: 16, "
        "max_seq_len: 13}",
        f"data: {{train: {a.data}/train.tok, seq_len: 13, shuffle: true}}",
        "device: {threads: 1}",
    ]
    if a.bf16:
        lines.append("bf16: {enabled: true}")
    if layout is None:
        lines += ["parallel: auto", "train_micro_batch_size_per_gpu: auto",
                  "gradient_accumulation_steps: auto", "training: {train_iters: 1}"]
    else:
        lines += [
            f"parallel: {{tensor: {layout['tp']}, pipeline: {layout['pp']}}}",
            f"zero_optimization: {{stage: {layout['zero_stage']}}}",
            f"train_micro_batch_size_per_gpu: {layout['micro_batch']}",
            f"gradient_accumulation_steps: {layout['gradient_accumulation_steps']}",
            f"training: {{train_iters: 1, recompute: {layout['recompute']}}}",
        ]
    return "\n".join(lines) + "\n"


def accepted_layouts(a, hosts):
    path = os.path.join(a.work, "auto.yaml")
    with open(path, "w") as f:
        f.write(job_yaml(a, None))
    out = subprocess.run([a.launch, "plan", path, "--hostfile", hosts, "--auto", "--json",
                          "--top", "100000"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"FAIL: ds-launch plan --auto: {out.stderr.strip()}")
    j = json.loads(out.stdout)
    return j["layouts"], j


def deviation(measured, planned):
    return abs(measured / planned - 1.0) if planned > 0 else (0.0 if measured == 0 else 1.0)


def run_layout(a, hosts, index, layout):
    """Returns (worst model-state deviation, worst activation deviation, problems)."""
    path = os.path.join(a.work, f"layout{index}.yaml")
    with open(path, "w") as f:
        f.write(job_yaml(a, layout))
    env = dict(os.environ, DS_MEMORY_PROFILE="1")
    out = subprocess.run([a.launch, path, "--hostfile", hosts, "--worker", a.worker, "--agent",
                          a.agent, "--heartbeat", "0.5"], capture_output=True, text=True,
                         timeout=240, env=env)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        return 1.0, 1.0, ["ds-launch failed: " + " | ".join(text.strip().splitlines()[-4:])]
    ranks = {}
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m:
            ranks[int(m.group(1))] = [float(x) for x in m.groups()[1:]]
    problems = []
    if sorted(ranks) != list(range(a.world)):
        problems.append(f"memory lines from ranks {sorted(ranks)}, expected 0..{a.world - 1}")
    worst_states = worst_acts = 0.0
    for rank, (states, planned_states, acts, grads, planned_acts, planned_grads) in ranks.items():
        ds = deviation(states, planned_states)
        da = deviation(acts + grads, planned_acts + planned_grads)
        worst_states, worst_acts = max(worst_states, ds), max(worst_acts, da)
        if ds > TOLERANCE:
            problems.append(f"rank {rank}: model states {states:.2f} MiB, planned "
                            f"{planned_states:.2f} ({100 * ds:.1f}% off)")
        if da > TOLERANCE:
            problems.append(f"rank {rank}: activations {acts:.2f} + gradients {grads:.2f} MiB, "
                            f"planned {planned_acts:.2f} + {planned_grads:.2f} "
                            f"({100 * da:.1f}% off)")
    return worst_states, worst_acts, problems


def main():
    p = argparse.ArgumentParser()
    for flag in ("--launch", "--worker", "--agent", "--data", "--work"):
        p.add_argument(flag, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--recompute", action="store_true")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    hosts = os.path.join(a.work, "hosts")
    with open(hosts, "w") as f:
        f.write(f"127.0.0.1 slots={a.world}\n")
    accepted, summary = accepted_layouts(a, hosts)
    layouts = list(accepted)
    if a.recompute:
        firsts = {}
        for layout in layouts:
            firsts.setdefault((layout["tp"], layout["pp"]), layout)
        for first in firsts.values():
            for mode in ("selective", "full"):
                extra = dict(first, recompute=mode)
                extra["name"] = first["name"].replace("recompute none", "recompute " + mode)
                layouts.append(extra)
    precision = "bf16" if a.bf16 else "fp32"
    print(f"world {a.world} {precision}: {len(accepted)} layouts accepted of "
          f"{summary['planned']} planned ({summary['refused']} refused by the planner, "
          f"{summary['over_memory']} over memory); {len(layouts)} runs")
    failed, worst_states, worst_acts, start = 0, 0.0, 0.0, time.time()
    for i, layout in enumerate(layouts):
        ds, da, problems = run_layout(a, hosts, i, layout)
        worst_states, worst_acts = max(worst_states, ds), max(worst_acts, da)
        verdict = "ok" if not problems else "FAIL"
        print(f"{verdict}: {layout['name']}: model states within {100 * ds:.2f}%, activations "
              f"within {100 * da:.2f}% of the plan on every rank")
        for problem in problems:
            print(f"    {problem}")
        failed += bool(problems)
    print(f"world {a.world} {precision}: {len(layouts) - failed}/{len(layouts)} layouts within "
          f"{100 * TOLERANCE:.0f}% of the plan; largest deviation: model states "
          f"{100 * worst_states:.2f}%, activations {100 * worst_acts:.2f}% "
          f"({time.time() - start:.0f} s)")
    return 1 if failed or not layouts else 0


if __name__ == "__main__":
    sys.exit(main())
