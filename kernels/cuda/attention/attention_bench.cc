// Causal attention throughput, bf16, forward + backward, through the same launchers the
// registry kernel uses (flash path for D 64 and 128).
//
// Usage: attention_bench [--batch B] [--heads H] [--kv-heads Hkv] [--seq T[,T...]]
//                        [--dim D[,D...]] [--iters I] [--warmup W]
// Defaults: B=8, H=16, Hkv=H, T=1024,4096, D=64,128, 20 iterations after 3 warmups.
// One line per (T, D), for scripts (tools/gpu-check.sh):
//   RESULT attention T=<T> D=<D> fwd_ms=<a> bwd_ms=<b> tflops=<x>
// FLOP convention (the CPU op's forward_flops / backward_flops): forward counts the two
// matrix products QK^T and PV of the causal half, 4 B H T^2 D / 2; backward counts five
// such products, 2.5x forward; softmax is not counted. tflops = (fwd + bwd FLOPs) /
// (fwd_ms + bwd_ms). bwd_ms includes D_i = rowsum(dO * O) and the dQ conversion.
// Exit codes: 0 ok, 77 no GPU (skipped), 1 CUDA error, 2 bad arguments, 3 non-finite output.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/attention/attention_launch.h"

namespace {

using ds::kernels::attention::AttentionPath;
using ds::kernels::attention::AttentionShape;
using ds::kernels::attention::AttentionType;

#define BENCH_CUDA(call)                                                                     \
  do {                                                                                       \
    const cudaError_t e = (call);                                                            \
    if (e != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "attention_bench: %s: %s (%d): %s\n", #call, cudaGetErrorName(e), \
                   static_cast<int>(e), cudaGetErrorString(e));                              \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  uint64_t s = seed;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = ToBf16(static_cast<float>((s >> 40) * (2.0 / (1ull << 24)) - 1.0));
  }
  return v;
}

const char* Flag(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return nullptr;
}

std::vector<int64_t> ParseList(const char* text, const char* dflt) {
  std::vector<int64_t> out;
  std::string s = text ? text : dflt;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string item =
        s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    out.push_back(std::atoll(item.c_str()));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

int64_t ParseInt(int argc, char** argv, const char* name, int64_t dflt) {
  const char* v = Flag(argc, argv, name);
  return v ? std::atoll(v) : dflt;
}

// Times `iters` runs of fn after `warmup` ones; milliseconds per run.
template <typename F>
float TimeMs(int warmup, int iters, F fn) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) fn();
  BENCH_CUDA(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) fn();
  BENCH_CUDA(cudaEventRecord(stop));
  BENCH_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  return ms / iters;
}

// Benchmarks one (T, D); returns 3 if the output is not finite.
int RunOne(AttentionShape s, int warmup, int iters) {
  const AttentionType t = AttentionType::kBF16;
  const size_t n_qkv = s.batch * s.seq * s.row(), n_out = s.batch * s.seq * s.n_head * s.head_dim;
  const size_t n_lse = s.batch * s.n_head * s.seq;
  void *qkv, *out, *dout, *dqkv, *scratch;
  float* lse;
  BENCH_CUDA(cudaMalloc(&qkv, n_qkv * 2));
  BENCH_CUDA(cudaMalloc(&dqkv, n_qkv * 2));
  BENCH_CUDA(cudaMalloc(&out, n_out * 2));
  BENCH_CUDA(cudaMalloc(&dout, n_out * 2));
  BENCH_CUDA(cudaMalloc(&lse, n_lse * 4));
  const std::vector<uint16_t> h_qkv = RandomBf16(n_qkv, 1), h_dout = RandomBf16(n_out, 2);
  BENCH_CUDA(cudaMemcpy(qkv, h_qkv.data(), n_qkv * 2, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(dout, h_dout.data(), n_out * 2, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemset(dqkv, 0, n_qkv * 2));
  const AttentionPath path =
      ds::kernels::attention::ChooseAttentionPath(s, t, qkv, out, dout, dqkv);
  BENCH_CUDA(cudaMalloc(&scratch, ds::kernels::attention::AttentionScratchBytes(s, path)));

  const float fwd_ms = TimeMs(warmup, iters, [&] {
    BENCH_CUDA(ds::kernels::attention::LaunchAttentionForward(s, t, path, qkv, out, lse, nullptr));
  });
  const float bwd_ms = TimeMs(warmup, iters, [&] {
    BENCH_CUDA(ds::kernels::attention::LaunchAttentionBackward(s, t, path, qkv, out, dout, lse,
                                                               dqkv, scratch, nullptr));
  });
  std::vector<uint16_t> h_out(n_out);
  BENCH_CUDA(cudaMemcpy(h_out.data(), out, n_out * 2, cudaMemcpyDeviceToHost));
  int status = 0;
  for (size_t i = 0; i < n_out; i += 97)
    if (!std::isfinite(FromBf16(h_out[i]))) status = 3;

  const double fwd_flops = 4.0 * s.batch * s.n_head * double(s.seq) * s.seq * s.head_dim / 2;
  const double total = 3.5 * fwd_flops;
  const double tflops = total / ((fwd_ms + bwd_ms) * 1e-3) / 1e12;
  if (status == 0)
    std::printf("RESULT attention T=%lld D=%lld fwd_ms=%.4f bwd_ms=%.4f tflops=%.1f\n",
                static_cast<long long>(s.seq), static_cast<long long>(s.head_dim), fwd_ms, bwd_ms,
                tflops);
  else
    std::fprintf(stderr, "attention_bench: T=%lld D=%lld: non-finite output\n",
                 static_cast<long long>(s.seq), static_cast<long long>(s.head_dim));
  std::fflush(stdout);
  for (void* p : {qkv, out, dout, dqkv, scratch, static_cast<void*>(lse)}) cudaFree(p);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe == cudaErrorInsufficientDriver || probe == cudaErrorNoDevice || devices == 0) {
    std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s)\n", cudaGetErrorName(probe));
    return 77;
  }
  BENCH_CUDA(probe);
  AttentionShape base;
  base.batch = ParseInt(argc, argv, "--batch", 8);
  base.n_head = ParseInt(argc, argv, "--heads", 16);
  base.n_kv_head = ParseInt(argc, argv, "--kv-heads", base.n_head);
  const int warmup = static_cast<int>(ParseInt(argc, argv, "--warmup", 3));
  const int iters = static_cast<int>(ParseInt(argc, argv, "--iters", 20));
  const std::vector<int64_t> seqs = ParseList(Flag(argc, argv, "--seq"), "1024,4096");
  const std::vector<int64_t> dims = ParseList(Flag(argc, argv, "--dim"), "64,128");
  if (base.batch < 1 || base.n_head < 1 || base.n_kv_head < 1 ||
      base.n_head % base.n_kv_head != 0 || warmup < 0 || iters < 1) {
    std::fprintf(stderr, "attention_bench: bad arguments\n");
    return 2;
  }
  std::printf(
      "# attention_bench bf16 causal B=%lld H=%lld Hkv=%lld (FLOPs: fwd 4BHT^2D/2, bwd 2.5x)\n",
      static_cast<long long>(base.batch), static_cast<long long>(base.n_head),
      static_cast<long long>(base.n_kv_head));
  int status = 0;
  for (int64_t d : dims) {
    for (int64_t t : seqs) {
      if (t < 1 || d < 1 || d > ds::kernels::attention::kMaxHeadDim) {
        std::fprintf(stderr, "attention_bench: bad T=%lld or D=%lld\n", static_cast<long long>(t),
                     static_cast<long long>(d));
        return 2;
      }
      AttentionShape s = base;
      s.seq = t;
      s.head_dim = d;
      const int rc = RunOne(s, warmup, iters);
      if (rc != 0) status = rc;
    }
  }
  return status;
}
