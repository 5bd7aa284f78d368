#!/usr/bin/env bash
# Builds every target (2 jobs, shared disk cache) and copies the binaries into bin/.
set -euo pipefail
cd "$(dirname "$0")/.."

BINARIES=(
  //tools/ds_model:ds-model
  //tools/ds_data:ds-data
  //tools/ds_ckpt:ds-ckpt
  //tools/ds_generate:ds-generate
  //tools/ds_chat:ds-chat
  //runtime/worker:ds-worker
  //launcher/launch:ds-launch
  //launcher/agent:ds-agent
  //zero/aio:ds-io-bench
)

bazel build //... "$@"
mkdir -p bin
for target in "${BINARIES[@]}"; do
  name=${target##*:}
  path=bazel-bin/${target#//}
  path=${path/://}
  install -m 0755 "$path" "bin/$name"
done
# The SentencePiece tokenizer plugin (runtime/generate/tokenizer.cc dlopens it from beside the binary).
install -m 0755 bazel-bin/runtime/generate/libds_sentencepiece.so bin/libds_sentencepiece.so
# The CUDA plugins (built where the toolkit is): ds-worker loads them from its own directory
# for device.type cuda (libds_cuda.so) and its data-parallel group over NCCL (libds_nccl.so).
for plugin in runtime/cuda/libds_cuda.so parallel/comm/nccl/libds_nccl.so; do
  if [[ -e bazel-bin/$plugin ]]; then
    install -m 0755 "bazel-bin/$plugin" "bin/${plugin##*/}"
  fi
done
echo "build: binaries in bin/: $(cd bin && ls | tr '\n' ' ')"
