#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the examples need.
# Idempotent and non-interactive: packages already present are skipped.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-rules-java
  g++ python3 python3-numpy
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev catch2 nlohmann-json3-dev
  libopenblas-dev libopenblas0-pthread libgloo-dev liburing-dev libaio-dev
  openssh-server openssh-client openssl procps clang-format
  slurmctld slurmd slurm-client munge
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
