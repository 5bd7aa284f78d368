#!/usr/bin/env bash
# The default example, from a fresh machine: installs what is missing, builds, generates
# the 3-digit addition task, trains a tiny GPT on the CPU (a few minutes), and reports the
# exact-match accuracy on held-out problems.
#
#   tools/run-example.sh            # train from scratch
#   tools/run-example.sh --resume   # continue from runs/addition/ckpt
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
tools/build.sh

CONFIG=configs/examples/addition.yaml
RUN=runs/addition
if [[ "${1:-}" != "--resume" ]]; then
  rm -rf "$RUN"
  mkdir -p "$RUN"
  bin/ds-data addition --digits 3 --train_examples 50000 --val_examples 2000 --seed 1 \
    --output_dir "$RUN/data"
fi
bin/ds-worker --config "$CONFIG"
bin/ds-worker --config "$CONFIG" --eval
echo "example: metrics in $RUN/metrics.csv, checkpoints in $RUN/ckpt"
