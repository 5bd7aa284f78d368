#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the examples need.
# Idempotent and non-interactive: packages already present are skipped.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-rules-java
  g++ python3 python3-numpy python3-yaml
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev catch2 nlohmann-json3-dev
  libopenblas-dev libopenblas0-pthread libdnnl-dev libgloo-dev liburing-dev libaio-dev zlib1g-dev libicu-dev libsentencepiece-dev
  openssh-server openssh-client openssl procps clang-format
  gdb elfutils  # ds-agent's thread-stack captures for hang reports (gdb, eu-stack)
  slurmctld slurmd slurm-client munge python3-venv python3-matplotlib
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# The tools venv: Python packages from PyPI that tests and tools read with (tensorboard: the
# monitor test reads our event files back with TensorBoard's own reader). tools/test.sh passes
# its path to the tests as DS_TOOLS_VENV.
TOOLS_VENV=${DS_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/tools-venv}
if ! "$TOOLS_VENV/bin/python" -c "import tensorboard" 2>/dev/null; then
  echo "setup: making the tools venv at $TOOLS_VENV (tensorboard from PyPI)"
  python3 -m venv "$TOOLS_VENV"
  "$TOOLS_VENV/bin/pip" install -q --disable-pip-version-check "tensorboard==2.21.0"
fi

# The peers' venv, on request (DS_PEERS=1): PyTorch, transformers, PEFT and megatron-core from
# PyPI, what the golden scripts (tools/hf_family_golden.py, tools/hf_train_golden.py,
# tools/lora_golden.py, tools/megatron_*_golden.py) and the checks against transformers run with. tools/test.sh hands
# its python to the tests as DS_PEER_PYTHON.
PEER_VENV=${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv
if [[ ${DS_PEERS:-0} == 1 ]] && ! "$PEER_VENV/bin/python" -c "import torch, transformers" 2>/dev/null; then
  echo "setup: making the peers' venv at $PEER_VENV (torch 2.15.0, transformers 5.25.0 from PyPI)"
  python3 -m venv "$PEER_VENV"
  "$PEER_VENV/bin/pip" install -q --disable-pip-version-check "torch==2.15.0" \
    "transformers==5.25.0" "safetensors" "numpy"
fi
if [[ ${DS_PEERS:-0} == 1 ]] && ! "$PEER_VENV/bin/python" -c "import peft" 2>/dev/null; then
  "$PEER_VENV/bin/pip" install -q --disable-pip-version-check "peft==0.21.2"  # tools/lora_golden.py
fi
if [[ ${DS_PEERS:-0} == 1 ]] && ! "$PEER_VENV/bin/python" -c "import megatron.core" 2>/dev/null; then
  "$PEER_VENV/bin/pip" install -q --disable-pip-version-check --no-deps "megatron-core==0.16.1"
fi
