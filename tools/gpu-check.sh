#!/usr/bin/env bash
# tools/gpu-check.sh: what a GPU machine (one H200) runs for ds-runtime's CUDA code.
#
#   1. environment: GPU name (nvidia-smi), toolkit, and what is missing
#   2. build the CUDA tests and the benchmark: Bazel when present, else nvcc/g++ directly
#   3. run the tests: kernels/cuda (build, registration, gelu, conformance, optimizer),
#      runtime/cuda device and allocator, blas, attention, nccl, the CUDA backend plugin and
#      the tiny GPT trained on the GPU against the CPU curve (the last ones need Bazel)
#   4. benchmarks: bf16 GEMM 8192^3 (cuBLASLt), AdamW over 124M params (GB/s vs copy and
#      PEAK_HBM_GBPS), attention fwd+bwd at T=1024 and 4096, and ds-worker training the
#      GPT-2 124M shape at ZeRO-1 on the GPU, the optimizer on the GPU and offloaded
#      (tokens/s, MFU; needs Bazel), beside PyTorch eager on the same shape when python3 has
#      torch with CUDA (tools/bench/gpt2_torch_gpu.py)
#   5. print a table
#
# On a bare CUDA machine (no Bazel, no Debian packages): run tools/gpu-deps.sh first where
# the packages are, and carry .gpu-deps/ (Catch2, OpenBLAS) along with the working tree.
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
       allocator_gpu_test:runtime/cuda nccl_gpu_test:parallel/nccl cuda_loader_test:runtime/exec
       device_states_gpu_test:zero trainer_gpu_test:runtime/worker)
BENCHES=(gemm_bench:kernels/cuda adamw_bench:kernels/cuda attention_bench:kernels/cuda/attention
         ds-worker:runtime/worker)
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
  local nvcc="$CUDA_PATH/bin/nvcc" o="$WORK/obj" b="$WORK/bin"
  local cxx=(g++ -std=c++17 -O2 -march=x86-64-v3 -fPIC -fopenmp -I. -I"$CUDA_PATH/include" "${DEPS_INC[@]}"
             -DDS_HAVE_CUDA=1 -DDS_CUDA_PENDING_OPS='""')
  # shellcheck disable=SC2054  # -Wl,-rpath,DIR is one argument
  local libs=(-L"$CUDA_PATH/lib64" -Wl,-rpath,"$CUDA_PATH/lib64" "${DEPS_LIB[@]}" -lcublas -lcublasLt -lcudart
              -l:libopenblas.so.0 -fopenmp -pthread)
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

if ((USE_BAZEL)) && command -v bazel >/dev/null; then
  log "building with bazel (--jobs=$JOBS)"
  if ! build_with_bazel; then
    log "bazel build failed (logs/bazel_build.log); falling back to nvcc/g++"
    tail -5 "$RESULTS/logs/bazel_build.log"
    BIN=()
  fi
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
  for t in allocator_gpu_test cuda_loader_test device_states_gpu_test trainer_gpu_test ds-worker; do
    [[ -x "$BUNDLE/bin/$t" ]] && BIN[$t]=$BUNDLE/bin/$t
  done
  log "using the prebuilt bundle for: $(ls "$BUNDLE/bin" | tr '\n' ' ')"
fi
# Otherwise the kernels, their tests and the benchmarks are built by hand; the rest needs Bazel.
NEEDS_BAZEL=" allocator_gpu_test nccl_gpu_test cuda_loader_test device_states_gpu_test trainer_gpu_test ds-worker "
NOT_BUILT=()
for tp in "${WANT[@]}"; do
  t=${tp%%:*}
  [[ $BUILT_BY != bazel && $NEEDS_BAZEL == *" $t "* ]] && continue
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

# --- 4. benchmarks --------------------------------------------------------------------
if ((RUN_BENCH)) && [[ -n "${BIN[gemm_bench]:-}" ]]; then
  run_step gemm_bench 300 "${BIN[gemm_bench]}" --m 8192 --n 8192 --k 8192
  rc=$?
  result=$(grep '^RESULT gemm_bf16' "$RESULTS/logs/gemm_bench.log")
  if ((rc == 0)) && [[ -n "$result" ]]; then
    tflops=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$result")
    ms=$(sed -n 's/.* ms=\([0-9.]*\).*/\1/p' <<<"$result")
    pct=$(awk -v t="$tflops" -v p="$PEAK" 'BEGIN { printf "%.1f", 100 * t / p }')
    row "gemm bf16 8192^3 (cublasLt)" "$tflops TFLOP/s" \
      "${pct}% of assumed peak $PEAK TFLOP/s; ${ms} ms/iter (median)"
  elif ((rc == 77)); then
    row "gemm bf16 8192^3 (cublasLt)" "SKIPPED" "no GPU"
    SKIPPED=1
  else
    fail_row "gemm bf16 8192^3 (cublasLt)" "logs/gemm_bench.log"
  fi
elif ((RUN_BENCH)); then
  row "gemm bf16 8192^3 (cublasLt)" "NOT BUILT" ""
else
  row "gemm bf16 8192^3 (cublasLt)" "not run" "--no-bench"
fi
# nvidia-smi sees a GPU but the CUDA runtime does not: most likely a driver older than
# CUDA 13 needs (>= 580), which cudaGetDeviceCount reports as 35. A failure, not a skip.
if ((SKIPPED)) && [[ "$GPU_NAME" != none ]]; then
  row "gpu visible to CUDA 13" "FAIL" "nvidia-smi shows $GPU_NAME but the tests saw no device"
  FAILED=1
fi
# AdamW step over 124M params (fp32 master/m/v, bf16 grads in, bf16 model out).
if ((RUN_BENCH)) && [[ -n "${BIN[adamw_bench]:-}" ]]; then
  run_step adamw_bench 120 "${BIN[adamw_bench]}" --params 124000000
  rc=$?
  result=$(grep '^RESULT adamw' "$RESULTS/logs/adamw_bench.log")
  if ((rc == 0)) && [[ -n "$result" ]]; then
    gbps=$(sed -n 's/.* gbps=\([0-9.]*\).*/\1/p' <<<"$result")
    copy=$(sed -n 's/.*copy_gbps=\([0-9.]*\).*/\1/p' <<<"$result")
    peak=$(sed -n 's/.*peak_gbps=\([0-9.]*\).*/\1/p' <<<"$result")
    ms=$(sed -n 's/.* ms=\([0-9.]*\).*/\1/p' <<<"$result")
    row "adamw step 124M (bf16 grads)" "$gbps GB/s" \
      "$(awk -v g="$gbps" -v c="$copy" -v p="$peak" 'BEGIN { printf "%.0f%% of D2D copy %s GB/s, %.0f%% of nominal %s GB/s", 100*g/c, c, 100*g/p, p }'); ${ms} ms"
  elif ((rc == 77)); then
    row "adamw step 124M (bf16 grads)" "SKIPPED" "no GPU"
    SKIPPED=1
  else
    fail_row "adamw step 124M (bf16 grads)" "logs/adamw_bench.log"
  fi
elif ((RUN_BENCH)); then
  row "adamw step 124M (bf16 grads)" "NOT BUILT" ""
else
  row "adamw step 124M (bf16 grads)" "not run" "--no-bench"
fi

# Flash attention fwd+bwd (kernels/cuda/attention, another engineer's target), when defined.
for T in 1024 4096; do
  name="attention fwd+bwd T=$T"
  if ! defined attention_bench kernels/cuda/attention; then
    row "$name" "not implemented yet" "//kernels/cuda/attention:attention_bench not defined"
  elif ((!RUN_BENCH)); then
    row "$name" "not run" "--no-bench"
  elif [[ -z "${BIN[attention_bench]:-}" ]]; then
    row "$name" "NOT BUILT" ""
  else
    run_step "attention_bench_T$T" 120 "${BIN[attention_bench]}" --seq "$T"
    rc=$?
    result=$(grep "^RESULT attention T=$T" "$RESULTS/logs/attention_bench_T$T.log" | tail -1)
    if ((rc == 0)) && [[ -n "$result" ]]; then
      row "$name" "$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$result") TFLOP/s" "${result#RESULT }"
    elif ((rc == 77)); then
      row "$name" "SKIPPED" "no GPU"
      SKIPPED=1
    else
      fail_row "$name" "logs/attention_bench_T$T.log"
    fi
  fi
done
# GPT-2 124M shape through ds-worker with device.type cuda, ZeRO stage 1: what the runtime
# itself does on the GPU (bf16 forward/backward on the CUDA kernels), not a kernel composition.
# Two rows: the model states and AdamW on the GPU (the default), and offload_optimizer (the fp32
# master and AdamW on the host, ZeRO-Offload). The micro-batch is the largest of 32, 16, 8 that
# fits (a smaller one is tried only when the larger ran out of memory). tokens/s and MFU (model
# FLOPs from the executor / step time, against the bf16 peak) are the medians of steps 3-6.
gpt2_tokens() {
  python3 -c "
import random, struct
random.seed(0)
with open('$1', 'wb') as f:
    f.write(struct.pack('<%dH' % 400000, *[random.randrange(50257) for _ in range(400000)]))"
}
gpt2_row() {  # gpt2_row NAME TAG EXTRA_YAML
  local name=$1 tag=$2 extra=$3
  if ((!RUN_BENCH)); then row "$name" "not run" "--no-bench"; return; fi
  if [[ -z "${BIN[ds-worker]:-}" ]]; then row "$name" "not run" "needs Bazel (//runtime/worker:ds-worker)"; return; fi
  if [[ $GPU_NAME == none ]]; then row "$name" "SKIPPED" "no GPU"; SKIPPED=1; return; fi
  local d="$WORK/gpt2_$tag" micro rc=1
  mkdir -p "$d"
  [[ -f "$WORK/gpt2_tokens.bin" ]] || gpt2_tokens "$WORK/gpt2_tokens.bin" ||
    { row "$name" "FAIL" "python3 could not write tokens"; FAILED=1; return; }
  for micro in 32 16 8; do
    rm -f "$d/metrics.csv"
    cat >"$d/job.yaml" <<YAML
train_micro_batch_size_per_gpu: $micro
bf16: {enabled: true}
optimizer: {type: AdamW, params: {lr: 3.0e-4, weight_decay: 0.1}}
gradient_clipping: 1.0
zero_optimization: {stage: 1$extra}
model: {family: gpt2, n_layer: 12, n_embd: 768, n_head: 12, vocab_size: 50257, max_seq_len: 1024}
data: {train: $WORK/gpt2_tokens.bin, format: uint16, seq_len: 1024, shuffle: false}
training: {train_iters: 6}
monitor: {csv: $d/metrics.csv}
device: {type: cuda}
YAML
    run_step "gpt2_${tag}_micro$micro" 240 "${BIN[ds-worker]}" --config "$d/job.yaml"
    rc=$?
    ((rc == 0)) && break
    grep -q -i -E "out of memory|ResourceExhausted|RESOURCE_EXHAUSTED" "$RESULTS/logs/gpt2_${tag}_micro$micro.log" || break
  done
  if ((rc != 0)); then
    fail_row "$name" "logs/gpt2_${tag}_micro$micro.log: $(grep -m1 -i error "$RESULTS/logs/gpt2_${tag}_micro$micro.log" | cut -c1-80)"
    return
  fi
  median() {  # median of CSV column $1 over steps 3-6
    tail -n +4 "$d/metrics.csv" | cut -d, -f"$1" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
  }
  local tps tf ms
  tps=$(median 5); tf=$(median 6); ms=$(median 10)
  row "$name" "$tps tok/s" "$(awk -v f="$tf" -v p="$PEAK" 'BEGIN { printf "MFU %.1f%% (%.1f TFLOP/s)", 100*f/p, f }'); ${ms} ms/step, micro $micro"
  if [[ $tag == device ]]; then GPT2_MICRO=$micro; GPT2_TPS=$tps; fi
}
# The peer: the same shape in PyTorch eager (bf16 autocast, SDPA attention, fused AdamW) at the
# micro-batch the ds-runtime row used, when the machine's Python has torch with CUDA.
GPT2_MICRO=""
GPT2_TPS=""
torch_row() {
  local name="  same, PyTorch eager (peer)"
  if ((!RUN_BENCH)); then row "$name" "not run" "--no-bench"; return; fi
  if [[ $GPU_NAME == none ]]; then row "$name" "SKIPPED" "no GPU"; SKIPPED=1; return; fi
  if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    row "$name" "not run" "no torch with CUDA in python3"; return
  fi
  local micro=${GPT2_MICRO:-8} rc result tps
  run_step gpt2_torch 240 python3 tools/bench/gpt2_torch_gpu.py --micro "$micro" --peak "$PEAK"
  rc=$?
  result=$(grep '^RESULT torch_gpt2' "$RESULTS/logs/gpt2_torch.log" | tail -1)
  if ((rc != 0)) || [[ -z "$result" ]]; then fail_row "$name" "logs/gpt2_torch.log"; return; fi
  tps=$(sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' <<<"$result")
  row "$name" "$tps tok/s" "$(sed -n 's/.*mfu=\([0-9.]*\).*/MFU \1%/p' <<<"$result") (6N + 6LTC FLOPs/token), micro $micro$(
      [[ -n "$GPT2_TPS" ]] && awk -v a="$GPT2_TPS" -v b="$tps" 'BEGIN { printf "; ds-runtime/PyTorch %.2fx", a/b }')"
}
gpt2_row "gpt-2 124M T=1024 bf16 ZeRO-1" device ""
torch_row
# Where the step's time goes: 3 steps of the same job with DS_PROFILE_OPS=1 (per op type and
# per plan instruction, synchronized on the device), kept in logs/gpt2_profile.log.
if ((RUN_BENCH)) && [[ -n "$GPT2_MICRO" && -f "$WORK/gpt2_device/job.yaml" ]]; then
  if run_step gpt2_profile 120 env DS_PROFILE_OPS=1 "${BIN[ds-worker]}" --config "$WORK/gpt2_device/job.yaml" \
       --steps 3; then
    row "  op profile (DS_PROFILE_OPS=1)" "ok" "logs/gpt2_profile.log"
  else
    row "  op profile (DS_PROFILE_OPS=1)" "not run (rc $?)" "logs/gpt2_profile.log"
  fi
fi
gpt2_row "  same, offload_optimizer cpu" offload ", offload_optimizer: {device: cpu}"

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

rm -rf "$WORK"
if ((FAILED)); then exit 1; fi
if ((SKIPPED)); then exit 77; fi
exit 0
