#!/usr/bin/env bash
# Opt-in: DeepSpeed as users install it today, for the CPU columns of the benchmarks
# (ddp_vs_pytorch.sh, pipeline_vs_deepspeed.sh, moe_vs_deepspeed.sh, cpu_adam_vs_torch.sh).
# Idempotent; prints the venv's python on its last line.
#   tools/bench/setup_deepspeed.sh
# The peers' venv (tools/setup.sh with DS_PEERS=1: PyTorch 2.15 from PyPI) at $PEER_VENV, default
# ~/.cache/ds-runtime/peer-venv, with DeepSpeed $DEEPSPEED_VERSION (0.19.8) from PyPI, pure Python
# (DS_BUILD_OPS=0). DeepSpeed's CPU accelerator uses gloo when oneCCL's bindings are absent, and
# JIT-builds its shared-memory all-reduce op at init, which needs ninja and a C++ compiler (the
# torch wheel carries its headers): the op is built here once into the torch extensions cache so
# that no benchmark run compiles.
set -euo pipefail
VERSION=${DEEPSPEED_VERSION:-0.19.8}
VENV=${PEER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv}

if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup_deepspeed: no PyTorch in $VENV: run DS_PEERS=1 tools/setup.sh first" >&2
  exit 1
fi
export DS_BUILD_OPS=0 DS_ACCELERATOR=cpu
if ! "$VENV/bin/python" -c "import deepspeed, sys; sys.exit(deepspeed.__version__ != '$VERSION')" 2>/dev/null; then
  echo "setup_deepspeed: deepspeed==$VERSION into $VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check "deepspeed==$VERSION" >&2
fi
if ! "$VENV/bin/python" -c "import ninja" 2>/dev/null && ! command -v ninja >/dev/null; then
  "$VENV/bin/pip" install -q --disable-pip-version-check ninja >&2
fi
PATH="$VENV/bin:$PATH" "$VENV/bin/python" - >&2 <<'PY'
from deepspeed.accelerator import get_accelerator
accel = get_accelerator()
assert accel.device_name() == "cpu", accel.device_name()
assert accel.communication_backend_name() == "gloo", accel.communication_backend_name()
accel.create_op_builder("ShareMemCommBuilder").load(verbose=False)
PY
echo "$VENV/bin/python"
