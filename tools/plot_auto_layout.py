#!/usr/bin/python3
"""Draws tools/bench/auto_layout.sh's CSV (world, layout, predicted_ms, measured_ms, error): each
measured layout's predicted step time against its measured one, one colour per world, the
diagonal and +-20% around it, the layout the planner chose ringed. Needs matplotlib (Debian's
python3-matplotlib, which tools/setup.sh installs).

    tools/plot_auto_layout.py auto_layout.csv -o docs/images/auto_layout.png
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("-o", "--output", default="auto_layout.png")
    p.add_argument("--title", default="parallel: auto: predicted against measured step time")
    a = p.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "predicted_ms" not in rows[0]:
        sys.exit(f"plot_auto_layout: {a.csv} is not auto_layout.sh's CSV")
    fig, ax = plt.subplots(figsize=(6.5, 6))
    hi = 0
    for world, colour in zip(sorted({r["world"] for r in rows}, key=int), ("tab:blue", "tab:orange",
                                                                          "tab:green", "tab:red")):
        mine = [r for r in rows if r["world"] == world]
        x = [float(r["measured_ms"]) for r in mine]
        y = [float(r["predicted_ms"]) for r in mine]
        hi = max(hi, max(x), max(y))
        ax.scatter(x, y, s=14, color=colour, label=f"world {world} ({len(mine)} layouts)")
        ax.scatter(x[:1], y[:1], s=120, facecolors="none", edgecolors=colour, linewidths=1.5)
    line = [0, hi * 1.05]
    ax.plot(line, line, color="black", linewidth=0.8, label="predicted = measured")
    ax.plot(line, [v * 1.2 for v in line], color="grey", linewidth=0.6, linestyle="--",
            label="+-20%")
    ax.plot(line, [v * 0.8 for v in line], color="grey", linewidth=0.6, linestyle="--")
    ax.set_xlim(0, hi * 1.05)
    ax.set_ylim(0, hi * 1.05)
    ax.set_xlabel("measured ms per step (median, through ds-launch)")
    ax.set_ylabel("predicted ms per step (cost model)")
    ax.set_title(a.title + "\n(ringed: the layout the planner chose)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print(f"plot_auto_layout: wrote {a.output}")


if __name__ == "__main__":
    main()
