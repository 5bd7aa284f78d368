#!/usr/bin/env python3
"""Prints every scalar of the TensorBoard event files under DIR as `tag step value`, read with
TensorBoard's own EventAccumulator (the tensorboard package from PyPI; tools/setup.sh installs it
in the tools venv). Used by tests/integration/monitor_test.sh to read back what ds-worker wrote.

    $DS_TOOLS_VENV/bin/python tools/read_tensorboard.py runs/tb/run
"""
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: read_tensorboard.py DIR")
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
    acc.Reload()
    for tag in sorted(acc.Tags()["scalars"]):
        for event in acc.Scalars(tag):
            print(f"{tag} {event.step} {event.value!r}")


if __name__ == "__main__":
    main()
