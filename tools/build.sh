#!/usr/bin/env bash
# Builds every target (2 jobs, shared disk cache) and copies the binaries into bin/.
set -euo pipefail
cd "$(dirname "$0")/.."

BINARIES=(
  //tools/ds_model:ds-model
  //tools/ds_data:ds-data
  //tools/ds_ckpt:ds-ckpt
  //runtime/worker:ds-worker
  //launcher/launch:ds-launch
  //launcher/agent:ds-agent
)

bazel build //... "$@"
mkdir -p bin
for target in "${BINARIES[@]}"; do
  name=${target##*:}
  path=bazel-bin/${target#//}
  path=${path/://}
  install -m 0755 "$path" "bin/$name"
done
# The CUDA backend (built where the toolkit is): ds-worker loads it from its own directory
# for device.type cuda.
if [[ -e bazel-bin/runtime/cuda/libds_cuda.so ]]; then
  install -m 0755 bazel-bin/runtime/cuda/libds_cuda.so bin/libds_cuda.so
fi
echo "build: binaries in bin/: $(cd bin && ls | tr '\n' ' ')"
