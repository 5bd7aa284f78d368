#!/usr/bin/env bash
# Each argument is a binary; fails if it, or any library it loads, needs libcuda.so (the
# driver). Binaries must link only cudart and the CUDA libraries, which load the driver
# lazily, so they start (and report "no GPU") on machines without one.
set -euo pipefail
status=0
for bin in "$@"; do
  if ! deps=$(ldd "$bin" 2>&1); then
    echo "FAIL: ldd $bin: $deps"
    status=1
    continue
  fi
  if grep -E '(^|[[:space:]/])libcuda\.so' <<<"$deps"; then
    echo "FAIL: $bin needs the driver library (libcuda)"
    status=1
  elif grep -q 'not found' <<<"$deps"; then
    echo "FAIL: $bin has unresolved libraries:"
    grep 'not found' <<<"$deps"
    status=1
  else
    echo "ok: $bin ($(grep -cE 'libcu(dart|blas|blasLt)' <<<"$deps") CUDA libraries, no libcuda)"
  fi
done
exit "$status"
