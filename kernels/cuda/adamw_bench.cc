// AdamW step throughput on the GPU: N parameters (default 124M, GPT-2 small) with fp32
// master, exp_avg, exp_avg_sq, bf16 gradients in and the bf16 model copy out, as one
// multi-tensor launch over GPT-2-like parameter segments. Reports the bytes the step must
// move (28 per parameter: p, m, v read+write, g read, model write) per second, next to a
// device-to-device cudaMemcpy of a similar size (the practical peak) and the nominal peak
// from PEAK_HBM_GBPS (default 4800, H200).
//
//   adamw_bench [--params N] [--iters K]
//   RESULT adamw gbps=<x> copy_gbps=<y> peak_gbps=<z> ms=<median ms> params=<N>
// Exit 77 without a GPU, 1 on a CUDA error.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/optimizer_launch.h"

namespace {

#define BENCH_CHECK(call)                                                                        \
  do {                                                                                           \
    const cudaError_t e = (call);                                                                \
    if (e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Median milliseconds of `iters` timed runs of fn (after two warm-ups).
template <typename Fn>
float MedianMs(int iters, Fn fn) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  fn();
  fn();
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    BENCH_CHECK(cudaEventRecord(start));
    fn();
    BENCH_CHECK(cudaEventRecord(stop));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 124'000'000;
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--params"))
      n = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iters"))
      iters = std::atoi(argv[i + 1]);
  }
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe == cudaErrorInsufficientDriver || probe == cudaErrorNoDevice || devices == 0) {
    std::printf("SKIPPED: no CUDA device (%s)\n", cudaGetErrorName(probe));
    return 77;
  }
  BENCH_CHECK(probe);
  const char* peak_env = std::getenv("PEAK_HBM_GBPS");
  const double peak = peak_env ? std::atof(peak_env) : 4800.0;

  // GPT-2-like layout: alternating 768x2304-sized matrices (decay) and 768-wide vectors.
  std::vector<ds::kernels::OptimizerParamRange> params;
  for (int64_t off = 0; off < n;) {
    const bool matrix = params.size() % 2 == 0;
    const int64_t size = std::min<int64_t>(matrix ? 768 * 2304 : 768, n - off);
    params.push_back({off, size, matrix});
    off += size;
  }
  const std::vector<ds::kernels::AdamWSegment> segs = ds::kernels::SplitOptimizerSegments(params);
  ds::kernels::AdamWSegment* d_segs;
  float *p, *m, *v;
  __nv_bfloat16 *g, *model;
  BENCH_CHECK(cudaMalloc(&d_segs, segs.size() * sizeof(segs[0])));
  BENCH_CHECK(
      cudaMemcpy(d_segs, segs.data(), segs.size() * sizeof(segs[0]), cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMalloc(&p, n * 4));
  BENCH_CHECK(cudaMalloc(&m, n * 4));
  BENCH_CHECK(cudaMalloc(&v, n * 4));
  BENCH_CHECK(cudaMalloc(&g, n * 2));
  BENCH_CHECK(cudaMalloc(&model, n * 2));
  BENCH_CHECK(cudaMemset(p, 0, n * 4));
  BENCH_CHECK(cudaMemset(m, 0, n * 4));
  BENCH_CHECK(cudaMemset(v, 0, n * 4));
  BENCH_CHECK(cudaMemset(g, 0x3c, n * 2));  // bf16 0x3c3c ~ 0.0115

  ds::kernels::AdamWStepParams o;
  o.weight_decay = 0.1f;
  int64_t step = 0;
  const float ms = MedianMs(iters, [&] {
    o.step = ++step;
    BENCH_CHECK(ds::kernels::LaunchAdamWStep(d_segs, segs.size(), p, m, v, g, model, o, nullptr));
  });
  const double bytes = 28.0 * n;
  const double gbps = bytes / (ms * 1e-3) / 1e9;

  // Practical peak: copy the same number of bytes (read + write = 2x the size).
  const size_t copy_bytes = static_cast<size_t>(bytes / 2);
  void *src, *dst;
  BENCH_CHECK(cudaMalloc(&src, copy_bytes));
  BENCH_CHECK(cudaMalloc(&dst, copy_bytes));
  const float copy_ms = MedianMs(
      iters, [&] { BENCH_CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); });
  const double copy_gbps = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;

  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %zu segments, %.1f%% of copy, %.1f%% of nominal peak\n", prop.name,
              segs.size(), 100.0 * gbps / copy_gbps, 100.0 * gbps / peak);
  std::printf("RESULT adamw gbps=%.1f copy_gbps=%.1f peak_gbps=%.1f ms=%.3f params=%lld\n", gbps,
              copy_gbps, peak, ms, static_cast<long long>(n));
  for (void* ptr :
       {static_cast<void*>(d_segs), static_cast<void*>(p), static_cast<void*>(m),
        static_cast<void*>(v), static_cast<void*>(g), static_cast<void*>(model), src, dst})
    cudaFree(ptr);
  return 0;
}
