#!/usr/bin/env bash
# tools/gpu-check.sh: what a GPU machine (one H200) runs for ds-runtime's CUDA code.
#
#   1. environment: GPU name (nvidia-smi), toolkit, and what is missing
#   2. build the CUDA tests and the benchmark: Bazel when present, else nvcc/g++ directly
#   3. run the tests: kernels/cuda (build, registration, gelu, conformance, optimizer),
#      runtime/cuda device and allocator, blas, attention, nccl, the CUDA backend plugin and
#      the tiny GPT trained on the GPU against the CPU curve (the last ones need Bazel)
#   4. the README's example on the GPU at ZeRO 0-3 and offload_optimizer against the CPU's
#      bf16 curve, then its 3000 steps and held-out exact match (tools/gpu_check/example.sh);
#      benchmarks (tools/gpu_check/bench.sh): bf16 GEMM 8192^3 and 4096^3 through cuBLASLt
#      beside cublasGemmEx, AdamW over 124M params (GB/s vs copy and PEAK_HBM_GBPS), flash
#      attention fwd+bwd at T 1024/4096, D 64/128 beside PyTorch's SDPA, and ds-worker
#      training the GPT-2 124M shape at ZeRO-1 (tokens/s, MFU) beside PyTorch eager and
#      torch.compile (tools/bench/gpt2_torch_gpu.py), then with the optimizer offloaded
#   5. print a table
#
# On a bare CUDA machine (no Bazel, no Debian packages): run tools/gpu-deps.sh first where
# the packages are, and carry .gpu-deps/ along with the working tree: its bundle holds every
# binary prebuilt, so nothing compiles on the GPU machine. Results: summary.txt and
# logs.tar.gz (every step's log) in GPU_CHECK_OUT.
#
# Usage: tools/gpu-check.sh [--no-bazel] [--no-bench] [--no-tests]
# Env:   CUDA_PATH          toolkit root (default /usr/local/cuda)
#        PEAK_BF16_TFLOPS   peak used for "% of peak" (default 989: H100/H200 SXM dense bf16)
#        PEAK_HBM_GBPS      nominal memory bandwidth for adamw_bench (default 4800: H200)
#        GPU_CHECK_OUT      where logs and summary.txt go (default $OUT, else a temp dir)
#        GPU_CHECK_BUDGET   seconds for the whole run (default 480): each step's time limit is
#                           cut to what is left, and steps past it are reported as not run
# Exit:  0 all ran and passed; 1 a step failed; 77 no GPU (the GPU tests were skipped).
# Every step runs under `timeout`; a timed-out step counts as failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
PEAK=${PEAK_BF16_TFLOPS:-989}
RESULTS=${GPU_CHECK_OUT:-${OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}}
USE_BAZEL=1
RUN_BENCH=1
RUN_TESTS=1
BUDGET=${GPU_CHECK_BUDGET:-480}
for arg in "$@"; do
  case "$arg" in
    --no-bazel) USE_BAZEL=0 ;;
    --no-bench) RUN_BENCH=0 ;;
    --no-tests) RUN_TESTS=0 ;;
    *) echo "usage: $0 [--no-bazel] [--no-bench] [--no-tests]" >&2; exit 2 ;;
  esac
done
mkdir -p "$RESULTS/logs"
WORK=$(mktemp -d /tmp/gpu-check-build.XXXXXX)
JOBS=$(nproc 2>/dev/null || echo 2)
FAILED=0
ROWS=()

log() { echo "gpu-check: $*"; }
row() { ROWS+=("$(printf '%-30s %-20s %s' "$1" "$2" "$3")"); }
# fail_row NAME DETAIL: the row of a step that did not succeed (status in $rc); counts as failed.
fail_row() {
  if ((rc == 125)); then row "$1" "not run" "the ${BUDGET}s budget was spent"; else row "$1" "FAIL (rc $rc)" "$2"; fi
  FAILED=1
}

# run_step NAME SECONDS CMD...: runs CMD with a time limit (cut to what is left of BUDGET),
# output to logs/NAME.log. Past the budget it runs nothing and returns 125.
run_step() {
  local name=$1 secs=$2
  shift 2
  local left=$((BUDGET - SECONDS))
  if ((left < 15)); then
    echo "(not run: the ${BUDGET}s budget of gpu-check was spent)" >"$RESULTS/logs/$name.log"
    return 125
  fi
  ((secs > left)) && secs=$left
  timeout --kill-after=10 "$secs" "$@" >"$RESULTS/logs/$name.log" 2>&1
  local rc=$?
  if ((rc == 124 || rc == 137)); then echo "(timed out after ${secs}s)" >>"$RESULTS/logs/$name.log"; fi
  return "$rc"
}

# --- 1. environment -----------------------------------------------------------------
log "results in $RESULTS"
GPU_NAME="none"
if command -v nvidia-smi >/dev/null; then
  if smi=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total \
             --format=csv,noheader 2>&1); then
    GPU_NAME=$(head -1 <<<"$smi" | cut -d, -f1)
    row "gpu (nvidia-smi)" "$GPU_NAME" "$(head -1 <<<"$smi" | cut -d, -f2- | sed 's/^ *//')"
  else
    row "gpu (nvidia-smi)" "ERROR" "$(head -1 <<<"$smi")"
  fi
else
  row "gpu (nvidia-smi)" "missing" "nvidia-smi not installed"
fi

missing=()
for cmd in g++ ldd readelf timeout; do command -v "$cmd" >/dev/null || missing+=("command:$cmd"); done
command -v bazel >/dev/null || missing+=("command:bazel (falls back to nvcc/g++)")
for f in bin/nvcc include/cuda_runtime.h include/cublasLt.h lib64/libcudart.so.13 \
         lib64/libcublas.so.13 lib64/libcublasLt.so.13; do
  [[ -e "$CUDA_PATH/$f" ]] || missing+=("$CUDA_PATH/$f")
done
# A bare CUDA image lacks Catch2 and OpenBLAS: tools/gpu-deps.sh gathers them into .gpu-deps/
# on a machine that has them, and that folder travels with the working tree.
DEPS_INC=() DEPS_LIB=() BUNDLE=""
[[ -d .gpu-deps/include ]] && DEPS_INC=(-I"$PWD/.gpu-deps/include")
if [[ -e .gpu-deps/bundle.tar.xz ]]; then
  if tar -xJf .gpu-deps/bundle.tar.xz -C "$WORK" 2>"$RESULTS/logs/bundle.log"; then
    BUNDLE=$WORK/bundle
    # shellcheck disable=SC2054  # -Wl,-rpath,DIR is one argument
    DEPS_LIB=(-L"$BUNDLE/lib" -Wl,-rpath,"$BUNDLE/lib")
  else
    log "could not unpack .gpu-deps/bundle.tar.xz (logs/bundle.log)"
  fi
fi
HAVE_CATCH=0
[[ -e /usr/include/catch2/catch.hpp || -e .gpu-deps/include/catch2/catch.hpp ]] && HAVE_CATCH=1
((HAVE_CATCH)) || missing+=("catch2/catch.hpp (tests cannot build without Bazel; run tools/gpu-deps.sh where it is and carry .gpu-deps)")
if command -v dpkg-query >/dev/null; then
  for p in bazel-bootstrap g++ catch2; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("debian-package:$p")
  done
fi
if ((${#missing[@]})); then
  for m in "${missing[@]}"; do log "missing: $m"; done
else
  log "nothing missing"
fi
[[ -x "$CUDA_PATH/bin/nvcc" ]] && log "$("$CUDA_PATH/bin/nvcc" --version | tail -1)"

# --- 2. build -------------------------------------------------------------------------
declare -A BIN=()
BUILT_BY=""

# GPU tests and benchmarks: "name package". The other engineers' targets join when their
# package defines them (a plain grep of the BUILD file, so no Bazel query is needed).
TESTS=(device_test:runtime/cuda cuda_build_test:kernels/cuda cuda_registration_test:kernels/cuda
       gelu_gpu_test:kernels/cuda conformance_gpu_test:kernels/cuda optimizer_gpu_test:kernels/cuda
       linear_gpu_test:kernels/cuda/blas attention_gpu_test:kernels/cuda/attention
       allocator_gpu_test:runtime/cuda nccl_gpu_test:parallel/comm/nccl cuda_loader_test:runtime/exec
       device_states_gpu_test:zero trainer_gpu_test:runtime/worker)
BENCHES=(gemm_bench:kernels/cuda adamw_bench:kernels/cuda attention_bench:kernels/cuda/attention
         ds-worker:runtime/worker ds-data:tools/ds_data)
defined() { grep -q "name = \"$1\"" "$2/BUILD.bazel" 2>/dev/null; }
WANT=()
for tp in "${TESTS[@]}" "${BENCHES[@]}"; do
  defined "${tp%%:*}" "${tp#*:}" && WANT+=("$tp")
done

build_with_bazel() {
  local targets=() tp
  for tp in "${WANT[@]}"; do targets+=("//${tp#*:}:${tp%%:*}"); done
  run_step bazel_build 420 bazel build --jobs="$JOBS" "${targets[@]}" || return 1
  local out
  out=$(bazel info bazel-bin 2>/dev/null) || return 1
  for tp in "${WANT[@]}"; do BIN[${tp%%:*}]=$out/${tp#*:}/${tp%%:*}; done
  BUILT_BY="bazel"
}

# The same sources and flags as the BUILD files and tools/bazel/cuda.bzl, by hand: every
# .cu of kernels/cuda (and blas/, attention/ when present) and the .cc libraries the GPU
# tests link. Registration objects are linked as objects, never archives, so their static
# initializers stay (Bazel's alwayslink). Only this directory's tests, the kernel tests of
# blas/, attention/ and the benchmarks are built here; the allocator (spdlog), NCCL, plugin
# and training tests and ds-worker need Bazel and the Debian libraries.
build_direct() {
  # The ops with no CUDA kernel yet, as BUILD.bazel lists them for the registration tests.
  local PENDING
  PENDING=$(sed -n 's/^PENDING_CUDA_OPS = "\(.*\)"$/\1/p' kernels/cuda/BUILD.bazel)
  local nvcc="$CUDA_PATH/bin/nvcc" o="$WORK/obj" b="$WORK/bin"
  local cxx=(g++ -std=c++17 -O2 -march=x86-64-v3 -fPIC -fopenmp -I. -I"$CUDA_PATH/include" "${DEPS_INC[@]}"
             -DDS_HAVE_CUDA=1 "-DDS_CUDA_PENDING_OPS=\"$PENDING\"")
  # shellcheck disable=SC2054  # -Wl,-rpath,DIR is one argument
  local libs=(-L"$CUDA_PATH/lib64" -Wl,-rpath,"$CUDA_PATH/lib64" "${DEPS_LIB[@]}" -lcublas -lcublasLt -lcudart
              -l:libopenblas.so.0 -l:libdnnl.so.2 -fopenmp -pthread)
  mkdir -p "$o" "$b"
  printf '#define CATCH_CONFIG_MAIN\n#include <catch2/catch.hpp>\n' >"$o/catch_main.cc"
  local cu=(kernels/cuda/*.cu kernels/cuda/blas/*.cu)
  [[ -e kernels/cuda/attention/BUILD.bazel ]] && cu+=(kernels/cuda/attention/*.cu)
  local lib_cc=(runtime/base/status.cc runtime/cuda/cuda_status.cc runtime/cuda/device.cc
                runtime/cuda/stream.cc runtime/core/dtype.cc runtime/core/tensor.cc
                kernels/registry.cc kernels/shape_check.cc kernels/cuda/gemm.cc
                runtime/core/device.cc runtime/cuda/stream_context.cc)
  local ops_cc=(kernels/cuda/cuda_kernels.cc)
  local f
  for f in kernels/ops/*.cc kernels/cpu/*.cc; do
    [[ $f == *_test.cc || $f == *_bench.cc || $f == *op_test_util.cc ]] || ops_cc+=("$f")
  done
  for f in kernels/cuda/blas/*.cc kernels/cuda/attention/*.cc; do
    [[ -e $f && $f != *_test.cc && $f != *_bench.cc ]] && ops_cc+=("$f")
  done
  local tests_cc=("$o/catch_main.cc" tests/testing/gpu_test_main.cc runtime/cuda/device_test.cc)
  for f in kernels/cuda/*_test.cc kernels/cuda/blas/*_gpu_test.cc kernels/cuda/attention/*_gpu_test.cc; do
    [[ -e $f ]] && tests_cc+=("$f")
  done
  ((HAVE_CATCH)) || tests_cc=()
  # Compile in parallel, at most JOBS at a time; each compile bounded. Objects are named
  # after their path so equal basenames in different directories do not collide.
  obj() {
    if [[ $1 == "$o"/* ]]; then echo "${1%.*}.o"; return; fi
    local x=${1//\//_}
    echo "$o/${x%.*}.o"
  }
  local src running=0 ok=1
  for src in "${cu[@]}"; do
    timeout 300 "$nvcc" -std=c++17 -O3 -c -Xcompiler -fPIC -I. \
      -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
      -gencode arch=compute_90,code=compute_90 "$src" -o "$(obj "$src")" &
    if ((++running >= JOBS)); then wait -n || ok=0; ((running--)); fi
  done
  for src in "${lib_cc[@]}" "${ops_cc[@]}" "${tests_cc[@]}"; do
    timeout 300 "${cxx[@]}" -c "$src" -o "$(obj "$src")" &
    if ((++running >= JOBS)); then wait -n || ok=0; ((running--)); fi
  done
  while ((running > 0)); do wait -n || ok=0; ((running--)); done
  ((ok)) || echo "some compiles failed; linking what built"
  local lib=() t
  for src in "${cu[@]}" "${lib_cc[@]}" "${ops_cc[@]}"; do lib+=("$(obj "$src")"); done
  if ((${#tests_cc[@]})); then
    for src in "${tests_cc[@]:2}"; do
      t=$(basename "$src" .cc)
      # GPU tests share the skipping main (tests/testing/gpu_test_main.cc).
      local main=("$o/catch_main.o")
      [[ $t == *_gpu_test ]] && main=("$(obj tests/testing/gpu_test_main.cc)")
      timeout 120 g++ "$(obj "$src")" "${main[@]}" "${lib[@]}" "${libs[@]}" -o "$b/$t" &&
        BIN[$t]=$b/$t
    done
  fi
  timeout 300 g++ -std=c++17 -O2 -I"$CUDA_PATH/include" kernels/cuda/gemm_bench.cc \
    "${libs[@]}" -o "$b/gemm_bench" && BIN[gemm_bench]=$b/gemm_bench
  timeout 300 g++ -std=c++17 -O2 -I. -I"$CUDA_PATH/include" kernels/cuda/adamw_bench.cc \
    "$(obj kernels/cuda/optimizer.cu)" "${libs[@]}" -o "$b/adamw_bench" && BIN[adamw_bench]=$b/adamw_bench
  if [[ -e kernels/cuda/attention/attention_bench.cc ]]; then
    timeout 300 g++ -std=c++17 -O2 -fopenmp -I. -I"$CUDA_PATH/include" -DDS_HAVE_CUDA=1 \
      kernels/cuda/attention/attention_bench.cc "${lib[@]}" "${libs[@]}" -o "$b/attention_bench" &&
      BIN[attention_bench]=$b/attention_bench
  fi
  BUILT_BY="nvcc+g++"
}

# A bundle that holds every wanted binary (tools/gpu-deps.sh builds them all) needs no build
# here at all: the device's minutes go to running, not compiling.
bundle_complete() {
  [[ -n "$BUNDLE" ]] || return 1
  local tp
  for tp in "${WANT[@]}"; do [[ -x "$BUNDLE/bin/${tp%%:*}" ]] || return 1; done
}
if ((USE_BAZEL)) && command -v bazel >/dev/null; then
  log "building with bazel (--jobs=$JOBS)"
  if ! build_with_bazel; then
    log "bazel build failed (logs/bazel_build.log); falling back to nvcc/g++"
    tail -5 "$RESULTS/logs/bazel_build.log"
    BIN=()
  fi
fi
if [[ -z "$BUILT_BY" ]] && bundle_complete; then
  log "every binary comes prebuilt from .gpu-deps/bundle.tar.xz"
  BUILT_BY="bundle"
fi
if [[ -z "$BUILT_BY" ]]; then
  log "building with nvcc/g++ in $WORK"
  # A shell function cannot run under `timeout`: each command inside is bounded instead.
  build_direct >"$RESULTS/logs/direct_build.log" 2>&1 || log "direct build failed (logs/direct_build.log)"
  BUILT_BY="nvcc+g++"
fi
# Without Bazel, the binaries that need it come from tools/gpu-deps.sh's prebuilt bundle when
# it was carried along (.gpu-deps/bundle.tar.xz), with its libraries and the CUDA toolkit's.
if [[ $BUILT_BY != bazel && -n "$BUNDLE" ]]; then
  export LD_LIBRARY_PATH="$BUNDLE/lib:$CUDA_PATH/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for t in "$BUNDLE"/bin/*; do
    [[ -x $t && $t != *.so ]] && BIN[$(basename "$t")]=$t
  done
  log "using the prebuilt bundle for: $(ls "$BUNDLE/bin" | tr '\n' ' ')"
fi
# CUDA's libraries where the toolkit lacks them: NCCL (libnccl.so.2) often comes only with
# PyTorch's wheels (site-packages/nvidia/*/lib), and so may cuBLAS. Each one found is named.
find_cuda_libs() {
  local lib dir found=() sp
  sp=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    [[ -e "$CUDA_PATH/lib64/$lib" ]] && continue
    ldconfig -p 2>/dev/null | grep -q " $lib " && continue
    # shellcheck disable=SC2086  # several site-packages folders
    dir=$(timeout 30 find $sp /usr/lib /usr/local -name "$lib" -print -quit 2>/dev/null | xargs -r dirname)
    if [[ -n $dir ]]; then
      export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      found+=("$lib from $dir")
    else
      found+=("$lib MISSING")
    fi
  done
  ((${#found[@]})) && row "libraries" "found" "$(IFS=';'; echo "${found[*]}")"
  return 0
}
find_cuda_libs
# Otherwise the kernels, their tests and the benchmarks are built by hand; the rest needs Bazel.
NEEDS_BAZEL=" allocator_gpu_test nccl_gpu_test cuda_loader_test device_states_gpu_test trainer_gpu_test ds-worker ds-data "
NOT_BUILT=()
for tp in "${WANT[@]}"; do
  t=${tp%%:*}
  [[ $BUILT_BY == "nvcc+g++" && $NEEDS_BAZEL == *" $t "* && -z "${BIN[$t]:-}" ]] && continue
  [[ -n "${BIN[$t]:-}" ]] || NOT_BUILT+=("$t")
done
if ((${#NOT_BUILT[@]} == 0)); then
  row "build" "ok" "$BUILT_BY: ${#BIN[@]} binaries"
else
  row "build" "FAILED" "$BUILT_BY: not built: ${NOT_BUILT[*]} (see logs/)"
  FAILED=1
fi
if ((${#BIN[@]})); then
  if run_step no_libcuda 60 kernels/cuda/no_libcuda_test.sh "${BIN[@]}"; then
    row "no -lcuda (ldd)" "ok" "${#BIN[@]} binaries"
  else
    row "no -lcuda (ldd)" "FAILED" "logs/no_libcuda.log"
    FAILED=1
  fi
fi

# --- 3. tests -------------------------------------------------------------------------
SKIPPED=0
((RUN_TESTS)) || TESTS=()
for tp in "${TESTS[@]}"; do
  t=${tp%%:*}
  if ! defined "$t" "${tp#*:}"; then
    row "test $t" "not defined yet" "${tp#*:} has no such target"
    continue
  fi
  if [[ -z "${BIN[$t]:-}" && $BUILT_BY != bazel && $NEEDS_BAZEL == *" $t "* ]]; then
    row "test $t" "not run" "needs Bazel (//${tp#*:}:$t)"
    continue
  fi
  if [[ -z "${BIN[$t]:-}" ]]; then
    row "test $t" "NOT BUILT" ""
    FAILED=1
    continue
  fi
  run_step "$t" 120 "${BIN[$t]}"
  rc=$?
  summary=$(grep -E '^(SKIPPED|FAILED|All tests passed|test cases:)' "$RESULTS/logs/$t.log" | tail -1)
  case $rc in
    0) row "test $t" "PASS" "$summary" ;;
    77) row "test $t" "SKIPPED" "$summary"; SKIPPED=1 ;;
    124|137) row "test $t" "TIMEOUT" "logs/$t.log"; FAILED=1 ;;
    125) row "test $t" "not run" "the ${BUDGET}s budget was spent"; FAILED=1 ;;
    *) row "test $t" "FAIL (rc $rc)" "$summary"; FAILED=1 ;;
  esac
done

# --- 4. the example on the GPU against the CPU, and the benchmarks ---------------------
# shellcheck source=tools/gpu_check/example.sh
source tools/gpu_check/example.sh
example_rows
# shellcheck source=tools/gpu_check/bench.sh
source tools/gpu_check/bench.sh
example_full_rows

# --- 5. table -------------------------------------------------------------------------
{
  echo
  echo "gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "assumed peak: $PEAK TFLOP/s dense bf16 (H100/H200 SXM); set PEAK_BF16_TFLOPS for other cards"
  [[ "$GPU_NAME" == *H100* || "$GPU_NAME" == *H200* || "$GPU_NAME" == none ]] ||
    echo "note: $GPU_NAME is not an H100/H200; the assumed peak may not apply"
  printf '%-30s %-20s %s\n' "check" "result" "detail"
  printf '%-30s %-20s %s\n' "-----" "------" "------"
  printf '%s\n' "${ROWS[@]}"
} | tee "$RESULTS/summary.txt"

# The logs as one archive beside summary.txt (the device tool brings back only a few files).
tar -czf "$RESULTS/logs.tar.gz" -C "$RESULTS" logs && rm -rf "$RESULTS/logs"
rm -rf "$WORK"
if ((FAILED)); then exit 1; fi
if ((SKIPPED)); then exit 77; fi
exit 0
