#!/usr/bin/python3
"""Draws a run's curves from its metrics CSV (monitor.csv: step, loss, lr, grad_norm, tokens_per_s,
..., val_loss) into one PNG: training and validation loss, learning rate, throughput and
gradient norm against the optimizer step. Needs matplotlib (Debian's python3-matplotlib, which
tools/setup.sh installs).

    tools/plot_metrics.py runs/addition/metrics.csv               # writes runs/addition/metrics.png
    tools/plot_metrics.py RUN_DIR/metrics.csv -o curves.png --title "addition, 3 digits"
"""
import argparse
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "step" not in rows[0] or "loss" not in rows[0]:
        sys.exit(f"plot_metrics: {path} is not a metrics CSV (no step and loss columns)")

    def column(name):
        out = []
        for r in rows:
            v = r.get(name, "")
            out.append(float(v) if v not in ("", None) else math.nan)
        return out

    return {k: column(k) for k in rows[0].keys()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("-o", "--output", help="PNG to write (default: beside the CSV)")
    p.add_argument("--title", default="")
    a = p.parse_args()
    m = read(a.csv)
    out = a.output or os.path.splitext(a.csv)[0] + ".png"
    step = m["step"]
    fig, ax = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    loss = ax[0][0]
    loss.plot(step, m["loss"], lw=1, label="train loss")
    if "val_loss" in m:
        pts = [(s, v) for s, v in zip(step, m["val_loss"]) if not math.isnan(v)]
        if pts:
            loss.plot(*zip(*pts), "o-", ms=3, label="validation loss")
    loss.set_xlabel("step")
    loss.set_ylabel("loss")
    loss.legend()
    for axis, key, label in ((ax[0][1], "lr", "learning rate"),
                             (ax[1][0], "tokens_per_s", "tokens / s"),
                             (ax[1][1], "grad_norm", "gradient norm (before clipping)")):
        if key in m:
            axis.plot(step, m[key], lw=1)
        axis.set_xlabel("step")
        axis.set_ylabel(label)
    if a.title:
        fig.suptitle(a.title)
    fig.savefig(out, dpi=110)
    print(f"plot_metrics: wrote {out} ({len(step)} steps)")


if __name__ == "__main__":
    main()
