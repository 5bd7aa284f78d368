#!/usr/bin/env bash
# Opt-in: installs DeepSpeed for the CPU column of tools/bench/ddp_vs_pytorch.sh. Idempotent.
#   tools/bench/setup_deepspeed.sh         prints the venv's python on its last line
# A venv over Debian's python3-torch (1.13, --system-site-packages, so DeepSpeed trains with the
# same torch as the DDP column) at $DEEPSPEED_VENV, default ~/.cache/ds-runtime/deepspeed-venv,
# with DeepSpeed $DEEPSPEED_VERSION from PyPI, pure Python (DS_BUILD_OPS=0; built with
# --no-build-isolation against that torch, not a PyPI one). 0.14.4: the CPU accelerator falls
# back to gloo when oneCCL's bindings are absent from 0.14.1 on. Its TorchBackend JIT-builds the
# shared-memory all-reduce op at init on the CPU accelerator, which needs torch's C++ headers
# (libtorch-dev) and pybind11-dev; the op is built here once (~2 min on 2 cores) into the torch
# extensions cache so that no benchmark run compiles.
set -euo pipefail
VERSION=${DEEPSPEED_VERSION:-0.14.4}
VENV=${DEEPSPEED_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/deepspeed-venv}

PACKAGES=(python3-torch python3-venv python3-dev libtorch-dev pybind11-dev ninja-build g++)
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup_deepspeed: installing ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

export DS_BUILD_OPS=0 DS_ACCELERATOR=cpu
if ! "$VENV/bin/python" -c "import deepspeed, sys; sys.exit(deepspeed.__version__ != '$VERSION')" 2>/dev/null; then
  echo "setup_deepspeed: deepspeed==$VERSION into $VENV" >&2
  /usr/bin/python3 -m venv --system-site-packages "$VENV" >&2
  "$VENV/bin/pip" install -q --no-build-isolation "deepspeed==$VERSION" >&2
fi
"$VENV/bin/python" - >&2 <<'PY'
from deepspeed.accelerator import get_accelerator
accel = get_accelerator()
assert accel.device_name() == "cpu", accel.device_name()
assert accel.communication_backend_name() == "gloo", accel.communication_backend_name()
accel.create_op_builder("ShareMemCommBuilder").load(verbose=False)
PY
echo "$VENV/bin/python"
