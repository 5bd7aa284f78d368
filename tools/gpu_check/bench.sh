# tools/gpu_check/bench.sh: the benchmark rows of tools/gpu-check.sh (sourced by it; uses its
# run_step, row, fail_row, BIN, RESULTS, WORK, PEAK, GPU_NAME, RUN_BENCH, FAILED, SKIPPED).
#   - bf16 GEMM through cuBLASLt (the runtime's path) beside cublasGemmEx, 8192^3, 4096^3 and
#     the unaligned shape of GPT-2's LM head
#   - AdamW over 124M parameters against the device-to-device copy and nominal HBM bandwidth
#   - causal flash attention forward + backward beside PyTorch's scaled_dot_product_attention
#   - GPT-2 124M through ds-worker (ZeRO-1 bf16, optimizer on the GPU and offloaded) beside
#     PyTorch eager and torch.compile at the same micro-batch, with a 3-step op profile

# bench_skip NAME BINARY: the row of a benchmark that cannot run (not built / --no-bench);
# returns 0 when it wrote such a row.
bench_skip() {
  if ((!RUN_BENCH)); then row "$1" "not run" "--no-bench"; return 0; fi
  if [[ -z "${BIN[$2]:-}" ]]; then row "$1" "NOT BUILT" ""; FAILED=1; return 0; fi
  return 1
}

# GEMM: 8192^3 (the issue's large shape), 4096^3, and GPT-2's LM head as cuBLAS sees it
# unstaged (D's rows 50257 elements long, not a multiple of 16 bytes: the CUDA linear stages
# such rows through padded ones, kernels/cuda/blas/linear.cc).
for shape in 8192:8192:8192 4096:4096:4096 50257:16384:768; do
  IFS=: read -r gm gn gk <<<"$shape"
  name="gemm bf16 ${gm}x${gn}x${gk}"
  bench_skip "$name" gemm_bench && continue
  run_step "gemm_bench_$gm" 120 "${BIN[gemm_bench]}" --m "$gm" --n "$gn" --k "$gk"
  rc=$?
  result=$(grep '^RESULT gemm_bf16' "$RESULTS/logs/gemm_bench_$gm.log")
  if ((rc == 0)) && [[ -n "$result" ]]; then
    tflops=$(sed -n 's/.* tflops=\([0-9.]*\).*/\1/p' <<<"$result")
    blas=$(sed -n 's/.*cublas_tflops=\([0-9.]*\).*/\1/p' <<<"$result")
    ms=$(sed -n 's/.* ms=\([0-9.]*\).*/\1/p' <<<"$result")
    row "$name" "$tflops TFLOP/s" "$(awk -v t="$tflops" -v b="$blas" -v p="$PEAK" \
      'BEGIN { printf "cublasLt, %.1f%% of peak %s; cublasGemmEx %s TFLOP/s (%.1f%%)", 100*t/p, p, b, 100*b/p }'); ${ms} ms"
  elif ((rc == 77)); then
    row "$name" "SKIPPED" "no GPU"
    SKIPPED=1
  else
    fail_row "$name" "logs/gemm_bench_$gm.log"
  fi
done
# nvidia-smi sees a GPU but the CUDA runtime does not: most likely a driver older than
# CUDA 13 needs (>= 580), which cudaGetDeviceCount reports as 35. A failure, not a skip.
if ((SKIPPED)) && [[ "$GPU_NAME" != none ]]; then
  row "gpu visible to CUDA 13" "FAIL" "nvidia-smi shows $GPU_NAME but the tests saw no device"
  FAILED=1
fi

# AdamW step over 124M params (fp32 master/m/v, bf16 grads in, bf16 model out).
name="adamw step 124M (bf16 grads)"
if ! bench_skip "$name" adamw_bench; then
  run_step adamw_bench 120 "${BIN[adamw_bench]}" --params 124000000
  rc=$?
  result=$(grep '^RESULT adamw' "$RESULTS/logs/adamw_bench.log")
  if ((rc == 0)) && [[ -n "$result" ]]; then
    gbps=$(sed -n 's/.* gbps=\([0-9.]*\).*/\1/p' <<<"$result")
    copy=$(sed -n 's/.*copy_gbps=\([0-9.]*\).*/\1/p' <<<"$result")
    peak=$(sed -n 's/.*peak_gbps=\([0-9.]*\).*/\1/p' <<<"$result")
    ms=$(sed -n 's/.* ms=\([0-9.]*\).*/\1/p' <<<"$result")
    row "$name" "$gbps GB/s" \
      "$(awk -v g="$gbps" -v c="$copy" -v p="$peak" 'BEGIN { printf "%.0f%% of D2D copy %s GB/s, %.0f%% of nominal %s GB/s", 100*g/c, c, 100*g/p, p }'); ${ms} ms"
  elif ((rc == 77)); then
    row "$name" "SKIPPED" "no GPU"
    SKIPPED=1
  else
    fail_row "$name" "logs/adamw_bench.log"
  fi
fi

# Flash attention forward + backward (B 8, H 16, causal) at T 1024 / 4096 and D 64 / 128,
# beside PyTorch's scaled_dot_product_attention on the same shapes (tools/bench/attention_torch_gpu.py).
torch_cuda() { python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }
attention_rows() {
  local name="attention fwd+bwd" rc
  bench_skip "$name" attention_bench && return
  run_step attention_bench 150 "${BIN[attention_bench]}" --seq 1024,4096 --dim 64,128
  rc=$?
  if ((rc == 77)); then row "$name" "SKIPPED" "no GPU"; SKIPPED=1; return; fi
  local have_torch=0
  if [[ $GPU_NAME != none ]] && torch_cuda; then
    run_step attention_torch 150 python3 tools/bench/attention_torch_gpu.py --seq 1024,4096 --dim 64,128 &&
      have_torch=1
  fi
  ((rc == 0)) || fail_row "$name" "logs/attention_bench.log"
  local line t d ours theirs fwd bwd
  while read -r line; do
    t=$(sed -n 's/.* T=\([0-9]*\).*/\1/p' <<<"$line"); d=$(sed -n 's/.* D=\([0-9]*\).*/\1/p' <<<"$line")
    ours=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$line")
    fwd=$(sed -n 's/.*fwd_ms=\([0-9.]*\).*/\1/p' <<<"$line"); bwd=$(sed -n 's/.*bwd_ms=\([0-9.]*\).*/\1/p' <<<"$line")
    theirs=""
    ((have_torch)) && theirs=$(grep "^RESULT torch_attention T=$t D=$d " "$RESULTS/logs/attention_torch.log" |
      sed -n 's/.*tflops=\([0-9.]*\).*/\1/p')
    row "attention T=$t D=$d fwd+bwd" "$ours TFLOP/s" "fwd $fwd ms, bwd $bwd ms$(
      [[ -n $theirs ]] && awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "; PyTorch SDPA %s TFLOP/s, ours/PyTorch %.2fx", b, a/b }')"
  done < <(grep '^RESULT attention ' "$RESULTS/logs/attention_bench.log")
}
attention_rows

# GPT-2 124M shape through ds-worker with device.type cuda, ZeRO stage 1: what the runtime
# itself does on the GPU (bf16 forward/backward on the CUDA kernels), not a kernel composition.
# Two rows: the model states and AdamW on the GPU (the default), and offload_optimizer (the fp32
# master and AdamW on the host, ZeRO-Offload). The micro-batch is the largest of 16 and 8 that
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
  for micro in ${GPT2_MICROS:-16 8}; do
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
# The peer: the same shape in PyTorch (bf16 autocast, SDPA attention, fused AdamW), eager or
# compiled, at the micro-batch the ds-runtime row used, when the machine's Python has torch.
GPT2_MICRO=""
GPT2_TPS=""
torch_row() {  # torch_row NAME TAG [--compile]
  local name=$1 tag=$2
  shift 2
  if ((!RUN_BENCH)); then row "$name" "not run" "--no-bench"; return; fi
  if [[ $GPU_NAME == none ]]; then row "$name" "SKIPPED" "no GPU"; SKIPPED=1; return; fi
  if ! torch_cuda; then row "$name" "not run" "no torch with CUDA in python3"; return; fi
  local micro=${GPT2_MICRO:-8} rc result tps
  run_step "gpt2_torch_$tag" 240 python3 tools/bench/gpt2_torch_gpu.py --micro "$micro" --peak "$PEAK" "$@"
  rc=$?
  result=$(grep '^RESULT torch_gpt2' "$RESULTS/logs/gpt2_torch_$tag.log" | tail -1)
  if ((rc != 0)) || [[ -z "$result" ]]; then fail_row "$name" "logs/gpt2_torch_$tag.log"; return; fi
  tps=$(sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' <<<"$result")
  row "$name" "$tps tok/s" "$(sed -n 's/.*mfu=\([0-9.]*\).*torch=\(.*\)/MFU \1%, torch \2/p' <<<"$result") (6N + 6LTC FLOPs/token), micro $micro$(
      [[ -n "$GPT2_TPS" ]] && awk -v a="$GPT2_TPS" -v b="$tps" 'BEGIN { printf "; ds-runtime/PyTorch %.2fx", a/b }')"
}
gpt2_row "gpt-2 124M T=1024 bf16 ZeRO-1" device ""
torch_row "  same, PyTorch eager (peer)" eager
GPT2_MICROS=${GPT2_MICRO:-8} gpt2_row "  same, offload_optimizer cpu" offload ", offload_optimizer: {device: cpu}"
torch_row "  same, torch.compile (peer)" compile --compile
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
